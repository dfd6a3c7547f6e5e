"""CPU matrix multiply in Numba, from the textbook loop to a parallel tiled kernel.

Taught in the chapter "On the CPU" (book/01_cpu.md): the kernels, the machine they run
on (caches, vector registers, the compiled inner loop) and timing them. Every variant
computes C = A @ B for float32 row-major A (M, K) and B (K, N), for any sizes (edges
that are not multiples of 4 or of a tile are handled), and is checked against NumPy.
``benchmark`` times them against NumPy's own float32 matmul (its BLAS);
``ratio_to_numpy`` measures the best variant against NumPy in alternating blocks.

Nothing here assumes a machine. The tiled kernels take their block sizes from the
caches this machine reports (:func:`blocking`), and their register tile from what the
compiler manages to keep in registers (:func:`micro_tile`: the widest tile whose
compiled loop does not spill to the stack).

Fast math: every variant allows ``contract``, which lets ``a * b + c`` become one
fused multiply-add instruction (one rounding instead of two) without reordering
any sum, so the first four variants add each element's K products in the same
order as ``ijk`` and agree with it to the last bit. The two tiled variants also
allow ``reassoc``: the compiler may split each dot product into one partial sum
per SIMD lane and add those at the end, a different but fixed order (the results
differ from ``ijk`` by rounding, as NumPy's do, and are identical run to run and
between the sequential and parallel versions). No NaN/Inf assumptions are made.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import time

import numpy as np
from numba import njit, prange

FASTMATH = {"contract"}
FASTMATH_REASSOC = {"contract", "reassoc"}   # the tiled kernels: sums may be split per SIMD lane
MR = 4      # rows of C per register block
KU = 4      # k unrolled by 4: four rows of B per pass
MB = 32     # rows of C per parallel work item
TILES = ((4, 4), (4, 2))   # register tiles of C the tiled kernels can use, widest first


# --------------------------------------------------------------------- 1. ijk
@njit(cache=True, fastmath=FASTMATH)
def ijk(A, B, C):
    """Textbook order: the inner loop walks down a column of B (stride N floats)."""
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc


# --------------------------------------------------------------------- 2. ikj
@njit(cache=True, fastmath=FASTMATH)
def ikj(A, B, C):
    """Loop reordering: the inner loop walks along a row of B and a row of C (stride 1)."""
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    for i in range(M):
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]


# ------------------------------------------------------- 3. ikj, k unrolled x4
@njit(cache=True, fastmath=FASTMATH)
def ikj_unroll4(A, B, C):
    """ikj with k unrolled by 4: one pass over a row of C consumes four rows of B.

    Each C[i, j] is loaded and stored once per 4 multiply-adds instead of once per one.
    """
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    for i in range(M):
        c = C[i]
        k = 0
        while k + KU <= K:
            a0, a1, a2, a3 = A[i, k], A[i, k + 1], A[i, k + 2], A[i, k + 3]
            b0, b1, b2, b3 = B[k], B[k + 1], B[k + 2], B[k + 3]
            for j in range(N):
                c[j] = c[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]
            k += KU
        while k < K:                                    # K not a multiple of 4
            a, b = A[i, k], B[k]
            for j in range(N):
                c[j] += a * b[j]
            k += 1


# --------------------------------------------- 4. the 4x4 register block
@njit(cache=True, fastmath=FASTMATH, inline="always")
def _block(A, B, C, i0, i1, k0, k1, b_row0, b_col0, c_col0, w):
    """C[i0:i1, c_col0:c_col0+w] += A[i0:i1, k0:k1] @ B[b_row0:b_row0+(k1-k0), b_col0:b_col0+w].

    The heart is the 4x4 register block: 16 values of A (4 rows x 4 k) sit in
    registers while the j loop streams 4 rows of B and updates 4 rows of C. Each
    loaded B[k, j] feeds 4 multiply-adds (one per row), and each C[i, j] is loaded
    and stored once per 4. The j loop is stride 1, so it is compiled to SIMD
    instructions (8 or 16 floats each). Rows and k that do not fill a block of 4
    are done one at a time.
    """
    i = i0
    while i + MR <= i1:
        c0 = C[i, c_col0:c_col0 + w]
        c1 = C[i + 1, c_col0:c_col0 + w]
        c2 = C[i + 2, c_col0:c_col0 + w]
        c3 = C[i + 3, c_col0:c_col0 + w]
        k = k0
        while k + KU <= k1:
            r = b_row0 + (k - k0)
            b0 = B[r, b_col0:b_col0 + w]
            b1 = B[r + 1, b_col0:b_col0 + w]
            b2 = B[r + 2, b_col0:b_col0 + w]
            b3 = B[r + 3, b_col0:b_col0 + w]
            a00, a01, a02, a03 = A[i, k], A[i, k + 1], A[i, k + 2], A[i, k + 3]
            a10, a11, a12, a13 = A[i + 1, k], A[i + 1, k + 1], A[i + 1, k + 2], A[i + 1, k + 3]
            a20, a21, a22, a23 = A[i + 2, k], A[i + 2, k + 1], A[i + 2, k + 2], A[i + 2, k + 3]
            a30, a31, a32, a33 = A[i + 3, k], A[i + 3, k + 1], A[i + 3, k + 2], A[i + 3, k + 3]
            for j in range(w):
                x0, x1, x2, x3 = b0[j], b1[j], b2[j], b3[j]
                c0[j] = c0[j] + a00 * x0 + a01 * x1 + a02 * x2 + a03 * x3
                c1[j] = c1[j] + a10 * x0 + a11 * x1 + a12 * x2 + a13 * x3
                c2[j] = c2[j] + a20 * x0 + a21 * x1 + a22 * x2 + a23 * x3
                c3[j] = c3[j] + a30 * x0 + a31 * x1 + a32 * x2 + a33 * x3
            k += KU
        while k < k1:                                   # k edge: one row of B at a time
            b = B[b_row0 + (k - k0), b_col0:b_col0 + w]
            a0, a1, a2, a3 = A[i, k], A[i + 1, k], A[i + 2, k], A[i + 3, k]
            for j in range(w):
                x = b[j]
                c0[j] += a0 * x
                c1[j] += a1 * x
                c2[j] += a2 * x
                c3[j] += a3 * x
            k += 1
        i += MR
    while i < i1:                                       # row edge: one row of C at a time
        c = C[i, c_col0:c_col0 + w]
        for k in range(k0, k1):
            b = B[b_row0 + (k - k0), b_col0:b_col0 + w]
            a = A[i, k]
            for j in range(w):
                c[j] += a * b[j]
        i += 1


@njit(cache=True, fastmath=FASTMATH)
def register_4x4(A, B, C):
    """4x4 register blocks over whole rows: B is read straight from the matrix."""
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    _block(A, B, C, 0, M, 0, K, 0, 0, 0, N)


# ------------------------------------- 5. packed B blocks, C in registers
@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _dot4x4(A, Bt, C, i, j, jj, k0, kc, N):
    """C[i:i+4, j:j+4] += A[i:i+4, k0:k0+kc] @ Bt[jj:jj+4, :kc].T, the 16 sums in registers.

    Bt is a packed block of B stored transposed (row jj of Bt is column j of B), so
    all eight streams (4 rows of A, 4 rows of Bt) are contiguous in k and the k loop
    compiles to SIMD loads and FMAs. With ``reassoc`` the compiler may split each of
    the 16 sums into one partial sum per SIMD lane, added up at the end.
    """
    c00 = c01 = c02 = c03 = np.float32(0.0)
    c10 = c11 = c12 = c13 = np.float32(0.0)
    c20 = c21 = c22 = c23 = np.float32(0.0)
    c30 = c31 = c32 = c33 = np.float32(0.0)
    a0, a1 = A[i, k0:k0 + kc], A[i + 1, k0:k0 + kc]
    a2, a3 = A[i + 2, k0:k0 + kc], A[i + 3, k0:k0 + kc]
    b0, b1, b2, b3 = Bt[jj, :kc], Bt[jj + 1, :kc], Bt[jj + 2, :kc], Bt[jj + 3, :kc]
    for k in range(kc):
        x0, x1, x2, x3 = a0[k], a1[k], a2[k], a3[k]
        y0, y1, y2, y3 = b0[k], b1[k], b2[k], b3[k]
        c00 += x0 * y0
        c01 += x0 * y1
        c02 += x0 * y2
        c03 += x0 * y3
        c10 += x1 * y0
        c11 += x1 * y1
        c12 += x1 * y2
        c13 += x1 * y3
        c20 += x2 * y0
        c21 += x2 * y1
        c22 += x2 * y2
        c23 += x2 * y3
        c30 += x3 * y0
        c31 += x3 * y1
        c32 += x3 * y2
        c33 += x3 * y3
    # ---- store: columns past N exist only in the zero padding of the last block
    C[i, j] += c00
    C[i + 1, j] += c10
    C[i + 2, j] += c20
    C[i + 3, j] += c30
    if j + 1 < N:
        C[i, j + 1] += c01
        C[i + 1, j + 1] += c11
        C[i + 2, j + 1] += c21
        C[i + 3, j + 1] += c31
    if j + 2 < N:
        C[i, j + 2] += c02
        C[i + 1, j + 2] += c12
        C[i + 2, j + 2] += c22
        C[i + 3, j + 2] += c32
    if j + 3 < N:
        C[i, j + 3] += c03
        C[i + 1, j + 3] += c13
        C[i + 2, j + 3] += c23
        C[i + 3, j + 3] += c33


@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _dot4x2(A, Bt, C, i, j, jj, k0, kc, N):
    """The 4 x 2 tile: 8 sums, for machines whose vector registers cannot hold 4 x 4 (see micro_tile)."""
    c00 = c01 = c10 = c11 = np.float32(0.0)
    c20 = c21 = c30 = c31 = np.float32(0.0)
    a0, a1 = A[i, k0:k0 + kc], A[i + 1, k0:k0 + kc]
    a2, a3 = A[i + 2, k0:k0 + kc], A[i + 3, k0:k0 + kc]
    b0, b1 = Bt[jj, :kc], Bt[jj + 1, :kc]
    for k in range(kc):
        x0, x1, x2, x3 = a0[k], a1[k], a2[k], a3[k]
        y0, y1 = b0[k], b1[k]
        c00 += x0 * y0
        c01 += x0 * y1
        c10 += x1 * y0
        c11 += x1 * y1
        c20 += x2 * y0
        c21 += x2 * y1
        c30 += x3 * y0
        c31 += x3 * y1
    C[i, j] += c00
    C[i + 1, j] += c10
    C[i + 2, j] += c20
    C[i + 3, j] += c30
    if j + 1 < N:
        C[i, j + 1] += c01
        C[i + 1, j + 1] += c11
        C[i + 2, j + 1] += c21
        C[i + 3, j + 1] += c31


@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _dot1xn(A, Bt, C, i, j, jj, k0, kc, N, NR):
    """One row of C against NR (4 or 2) columns: for the last M % 4 rows."""
    c0 = c1 = c2 = c3 = np.float32(0.0)
    a = A[i, k0:k0 + kc]
    for k in range(kc):
        x = a[k]
        c0 += x * Bt[jj, k]
        c1 += x * Bt[jj + 1, k]
        if NR == 4:
            c2 += x * Bt[jj + 2, k]
            c3 += x * Bt[jj + 3, k]
    C[i, j] += c0
    if j + 1 < N:
        C[i, j + 1] += c1
    if NR == 4 and j + 2 < N:
        C[i, j + 2] += c2
    if NR == 4 and j + 3 < N:
        C[i, j + 3] += c3


@njit(cache=True, inline="always")
def _pack_block(B, Bp, pk, pn):
    """Block (pk, pn) of B, KC rows x NC columns, transposed into Bp[pk, pn] (NC x KC); zeros outside B.

    Copied in squares of 16 x 16 floats, so that both the rows read from B and the rows
    written to the block stay in L1 while a square is copied (a transpose done row by
    row would write one float per cache line).
    """
    K, N = B.shape
    NC, KC = Bp.shape[2], Bp.shape[3]
    k0, j0 = pk * KC, pn * NC
    kc, w = min(KC, K - k0), min(NC, N - j0)
    blk = Bp[pk, pn]
    if kc < KC or w < NC:
        blk[:, :] = 0
    for kb in range(0, kc, 16):
        for jb in range(0, w, 16):
            for kk in range(kb, min(kb + 16, kc)):
                row = B[k0 + kk]
                for jj in range(jb, min(jb + 16, w)):
                    blk[jj, kk] = row[j0 + jj]


@njit(cache=True)
def pack_b(B, KC, NC):
    """Copy B into blocks of KC rows x NC columns, each stored transposed and contiguous.

    Shape (K blocks, N blocks, NC, KC). A block is one stretch of 4 * KC * NC bytes in
    which each column of B is KC consecutive floats, the order the micro-kernel reads.
    """
    K, N = B.shape
    Bp = np.empty(((K + KC - 1) // KC, (N + NC - 1) // NC, NC, KC), dtype=np.float32)
    for pk in range(Bp.shape[0]):
        for pn in range(Bp.shape[1]):
            _pack_block(B, Bp, pk, pn)
    return Bp


@njit(cache=True, parallel=True)
def pack_b_parallel(B, KC, NC):
    """pack_b with the blocks shared among the cores."""
    K, N = B.shape
    nk, nn = (K + KC - 1) // KC, (N + NC - 1) // NC
    Bp = np.empty((nk, nn, NC, KC), dtype=np.float32)
    for b in prange(nk * nn):
        _pack_block(B, Bp, b // nn, b % nn)
    return Bp


@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _rows_tiled(A, Bp, C, i0, i1, NR):
    """Rows i0:i1 of C: for each packed block of B, every 4 x NR tile of these rows."""
    K = A.shape[1]
    N = C.shape[1]
    NC, KC = Bp.shape[2], Bp.shape[3]
    C[i0:i1, :] = 0
    for pn in range(Bp.shape[1]):
        j0 = pn * NC
        w = min(NC, N - j0)
        for pk in range(Bp.shape[0]):
            k0 = pk * KC
            kc = min(KC, K - k0)
            Bt = Bp[pk, pn]                 # NC x KC, in L2 while all the rows below use it
            i = i0
            while i + MR <= i1:
                for jj in range(0, w, NR):
                    if NR == 4:
                        _dot4x4(A, Bt, C, i, j0 + jj, jj, k0, kc, N)
                    else:
                        _dot4x2(A, Bt, C, i, j0 + jj, jj, k0, kc, N)
                i += MR
            while i < i1:                   # M not a multiple of 4
                for jj in range(0, w, NR):
                    _dot1xn(A, Bt, C, i, j0 + jj, jj, k0, kc, N, NR)
                i += 1


@njit(cache=True, fastmath=FASTMATH_REASSOC)
def tiled_kernel(A, B, C, KC, NC, NR):
    """Packed, transposed blocks of B (KC x NC floats, sized to stay in L2) and 4 x NR tiles of C in registers."""
    Bp = pack_b(B, KC, NC)
    M = A.shape[0]
    for i0 in range(0, M, MB):
        _rows_tiled(A, Bp, C, i0, min(M, i0 + MB), NR)


# ---------------------------------------------------------------- 6. parallel
@njit(cache=True, fastmath=FASTMATH_REASSOC, parallel=True)
def tiled_parallel_kernel(A, B, C, KC, NC, NR):
    """The tiled kernel with blocks of MB rows of C spread over the cores (prange).

    Rows of C are independent, so the threads never write the same element; they
    all read the same packed B (packed in parallel too). Each element of C is summed
    in the same order as in ``tiled_kernel``, so both give identical results.
    """
    Bp = pack_b_parallel(B, KC, NC)
    M = A.shape[0]
    blocks = (M + MB - 1) // MB
    for b in prange(blocks):
        _rows_tiled(A, Bp, C, b * MB, min(M, b * MB + MB), NR)


def tiled(A, B, C):
    """``tiled_kernel`` with this machine's block sizes and register tile (:func:`plan`)."""
    p = plan()
    tiled_kernel(A, B, C, p["KC"], p["NC"], p["NR"])


def tiled_parallel(A, B, C):
    """``tiled_parallel_kernel`` with this machine's block sizes and register tile (:func:`plan`)."""
    p = plan()
    tiled_parallel_kernel(A, B, C, p["KC"], p["NC"], p["NR"])


VARIANTS = {
    "ijk": ijk,
    "ikj (reordered)": ikj,
    "ikj, k unrolled x4": ikj_unroll4,
    "4x4 register block": register_4x4,
    "tiled, packed B": tiled,
    "tiled, parallel": tiled_parallel,
}
BEST = "tiled, parallel"
NUMPY = "NumPy (BLAS)"


def numpy_matmul(A, B, C):
    np.matmul(A, B, out=C)


# ------------------------------------------------------------------- machine
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """Cores this process may run on (what Numba's threads and NumPy's BLAS use)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _size(text: str) -> int:
    text = text.strip()
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * mult


@functools.cache
def caches() -> dict:
    """Data caches of core 0 as Linux reports them in /sys: bytes per level, the line size.

    ``source`` is "this machine" when /sys was read; where it cannot be read (not Linux),
    the levels are missing and ``source`` says so: nothing is assumed.
    """
    out: dict = {"source": "not reported by this system"}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            d = os.path.join(base, idx)
            if not idx.startswith("index") or open(os.path.join(d, "type")).read().strip() == "Instruction":
                continue
            level = int(open(os.path.join(d, "level")).read())
            out[f"L{level}"] = _size(open(os.path.join(d, "size")).read())
            out["line"] = int(open(os.path.join(d, "coherency_line_size")).read())
            out["source"] = "this machine"
    except (OSError, ValueError):
        pass
    return out


def machine_label() -> str:
    return f"measured on this machine: {cpu_name()}, {cores()} cores"


def _pow2_floor(x: float) -> int:
    return 1 << max(int(x), 1).bit_length() - 1


def blocking(c: dict | None = None, nr: int = 4) -> dict:
    """Block sizes of the tiled kernels from the caches ``c`` (default: this machine's).

    KC (values of k per block): one tile's two panels, MR rows of A and NR columns of
    B of KC floats each, take at most half of the L1, so they stay there while the
    tile's loop runs. NC (columns per block): a packed block of KC x NC floats takes
    at most half of the L2, so it stays there while every tile of a row band uses it.
    Both are powers of two. Where the system reports no caches, KC = 512 and NC = 128,
    and ``from_caches`` is False (the chapter then says the sizes are a guess).
    """
    c = dict(c if c is not None else caches())
    l1, l2 = c.get("L1"), c.get("L2")
    kc = min(_pow2_floor(l1 / 2 / (4 * (MR + nr))), 4096) if l1 else 512
    nc = max(min(_pow2_floor(l2 / 2 / (4 * kc)), 1024), 8) if l2 else 128
    return {"KC": kc, "NC": nc, "block_bytes": 4 * kc * nc, "panels_bytes": 4 * (MR + nr) * kc,
            "from_caches": bool(l1 and l2)}


# ------------------------------------------------------------- machine code
_LABEL = re.compile(r"^\.?L\w+:")
_JUMP = re.compile(r"^\s+j\w+\s+(\.?L\w+)")
_VREG = re.compile(r"%([xyz])mm(\d+)")
_FLOATS = {"x": 4, "y": 8, "z": 16}


def innermost_loops(asm: str) -> list[list[str]]:
    """The innermost loops of an x86 assembly listing (AT&T syntax): a label, the
    instructions up to a jump back to it, with no other label in between."""
    lines = asm.splitlines()
    labels = {l.rstrip(":"): i for i, l in enumerate(lines) if _LABEL.match(l)}
    loops = []
    for i, line in enumerate(lines):
        m = _JUMP.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            body = [l.split("#")[0].rstrip() for l in lines[labels[m.group(1)]:i + 1]]
            body = [l for l in body if l.strip() and (_LABEL.match(l) or not l.strip().startswith("."))]
            if not any(_LABEL.match(l) for l in body[1:]):
                loops.append(body)
    return loops


def loop_stats(loop: str | list[str]) -> dict:
    """What one iteration of a compiled loop does, counted from its instructions.

    ``floats_per_vector``: the widest vector register the FMAs use (xmm 4, ymm 8, zmm 16
    floats); ``fmas``: fused multiply-adds; ``vector_loads`` / ``vector_stores``: vector
    moves from / to memory, plus FMAs that read an operand straight from memory;
    ``spill_loads`` / ``spill_stores``: those whose address is on the stack (``%rsp``),
    values the compiler could not keep in a register; ``registers``: distinct vector
    registers the loop names.
    """
    body = loop.splitlines() if isinstance(loop, str) else list(loop)
    fmas = loads = stores = spill_loads = spill_stores = 0
    width, regs = 0, set()
    for line in body:
        parts = line.split(None, 1)
        if len(parts) < 2:
            continue
        op, args = parts[0], parts[1]
        vregs = _VREG.findall(args)
        regs |= {int(n) for _, n in vregs}
        if "fmadd" in op or "fmsub" in op:
            fmas += 1
            width = max([width] + [_FLOATS[k] for k, _ in vregs])
        if not vregs or "(" not in args:
            continue
        ops = [a.strip() for a in re.split(r",(?![^(]*\))", args)]
        stack = "%rsp" in args
        if op.startswith("vmov") or op.startswith("vbroadcast") or "fmadd" in op:
            if "(" in ops[-1]:          # AT&T: the destination is last
                stores += 1
                spill_stores += stack
            else:
                loads += 1
                spill_loads += stack
    return {"instructions": len([l for l in body if not _LABEL.match(l)]), "fmas": fmas,
            "floats_per_vector": width or None, "vector_loads": loads, "vector_stores": stores,
            "spill_loads": spill_loads, "spill_stores": spill_stores, "registers": len(regs)}


def _probe(nr: int):
    """A small uncached function around one micro-kernel, so Numba keeps its assembly."""
    dot = _dot4x4 if nr == 4 else _dot4x2

    @njit(fastmath=FASTMATH_REASSOC)
    def probe(A, Bt, C):
        dot(A, Bt, C, 0, 0, 0, 0, A.shape[1], C.shape[1])

    A = np.ones((4, 64), dtype=np.float32)
    probe(A, A.copy(), np.zeros((4, 4), dtype=np.float32))
    return next(iter(probe.inspect_asm().values()))


@functools.cache
def micro_kernel_loop(nr: int = 4) -> str:
    """The machine code of the k loop of the 4 x ``nr`` micro-kernel, as compiled for this
    CPU: the innermost loop with the most fused multiply-adds (the widest vectors first)."""
    loops = innermost_loops(_probe(nr))
    best = max(loops, key=lambda b: (loop_stats(b)["fmas"], loop_stats(b)["floats_per_vector"] or 0), default=[])
    return "\n".join(best)


@functools.cache
def micro_tile() -> dict:
    """The register tile of C the tiled kernels use on this machine: the widest of
    :data:`TILES` whose compiled loop keeps everything in registers (no spill), else
    the narrowest. With the loop's counts, and the other tiles' for comparison."""
    tried = []
    for mr, nr in TILES:
        stats = loop_stats(micro_kernel_loop(nr))
        tried.append({"MR": mr, "NR": nr, **stats})
        if not stats["spill_loads"] and not stats["spill_stores"]:
            break
    return {**tried[-1], "tried": tried}


@functools.cache
def plan() -> dict:
    """Block sizes and register tile of the tiled kernels on this machine."""
    tile = micro_tile()
    return {**blocking(nr=tile["NR"]), "MR": tile["MR"], "NR": tile["NR"], "MB": MB}


# ------------------------------------------------------------ check and time
def random(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)


def check(fn, M: int = 37, N: int = 67, K: int = 45) -> float:
    """Relative error of a variant against a float64 NumPy reference, C pre-filled with NaN."""
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, dtype=np.float32)
    fn(A, B, C)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    return float(np.linalg.norm(C - ref) / np.linalg.norm(ref))


def agreement(M: int = 37, N: int = 67, K: int = 45) -> list[dict]:
    """Each variant (and NumPy) against ``ijk`` on a small odd shape: largest difference
    and relative error against a float64 reference. C is pre-filled with NaN."""
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    ref = np.empty((M, N), np.float32)
    ijk(A, B, ref)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    out = []
    for name, fn in list(VARIANTS.items()) + [(NUMPY, numpy_matmul)]:
        C = np.full((M, N), np.nan, np.float32)
        fn(A, B, C)
        out.append({"variant": name, "max |C - ijk|": float(np.abs(C - ref).max()),
                    "bit-identical to ijk": bool(np.array_equal(C, ref)),
                    "relative error vs float64": float(np.linalg.norm(C - exact) / np.linalg.norm(exact))})
    return out


def warm_up(names=None) -> float:
    """Compile (or load from Numba's cache) every variant on a tiny problem; returns seconds."""
    t0 = time.perf_counter()
    plan()
    A, B = random(8)
    C = np.empty((8, 8), dtype=np.float32)
    for name in names or VARIANTS:
        VARIANTS[name](A, B, C)
    return time.perf_counter() - t0


SETTLE_S = 0.2   # pause before timing: lets the other library's idle threads stop spinning


def _block_times(fn, A, B, C, repeats: int, budget_s: float) -> list:
    """Seconds of ``repeats`` back-to-back calls, after a pause and one untimed call."""
    time.sleep(SETTLE_S)
    fn(A, B, C)
    times = []
    t_start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(A, B, C)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > budget_s and len(times) >= 3:
            break
    return times


def time_variant(fn, n: int, repeats: int = 7, budget_s: float = 1.5) -> list[float]:
    """Seconds of each timed call of C = A @ B at n x n x n, after one untimed call.

    Calls are timed back to back, never interleaved with another library: after a
    parallel call, NumPy's BLAS threads and Numba's threads both keep spinning on
    their cores for a while, and would slow the other down.
    """
    A, B = random(n)
    C = np.empty((n, n), dtype=np.float32)
    return _block_times(fn, A, B, C, repeats, budget_s)


def row(name: str, n: int, times: list[float]) -> dict:
    """A timing row: median seconds and GFLOP/s, with the 20th-80th percentile band."""
    s, s20, s80 = (float(np.percentile(times, q)) for q in (50, 20, 80))
    flop = 2 * n ** 3 / 1e9
    return {"name": name, "n": n, "s": s, "gflops": flop / s, "gflops_p20": flop / s80, "gflops_p80": flop / s20,
            "calls": len(times), "vs_numpy": None}


def benchmark(sizes: dict, progress=None) -> list[dict]:
    """Time each variant (and NumPy, as "NumPy (BLAS)") at its sizes.

    Rows from :func:`row`; ``vs_numpy`` is the ratio to NumPy at the same n when NumPy
    was timed too. For the headline ratio, prefer :func:`ratio_to_numpy`.
    """
    rows = []
    for name, ns in sizes.items():
        fn = numpy_matmul if name == NUMPY else VARIANTS[name]
        for n in ns:
            rows.append(row(name, n, time_variant(fn, n)))
            if progress:
                progress(f"{name:22s} n={n:5d}: {rows[-1]['gflops']:7.2f} GFLOP/s")
    blas = {r["n"]: r["gflops"] for r in rows if r["name"] == NUMPY}
    for r in rows:
        if r["n"] in blas:
            r["vs_numpy"] = r["gflops"] / blas[r["n"]]
    return rows


def ratio_to_numpy(n: int = 1024, name: str = BEST, rounds: int = 3, repeats: int = 5) -> dict:
    """The best variant against NumPy at n: GFLOP/s of both and the ratio variant / NumPy.

    Blocks of back-to-back calls of each, alternating (ours, NumPy, NumPy, ours, ...)
    so both see the same machine state on average; medians over all calls.
    """
    fn = VARIANTS[name]
    A, B = random(n)
    C = np.empty((n, n), dtype=np.float32)
    _block_times(fn, A, B, C, 2, 1.0)             # warm-up: compile, thread pools, page faults
    _block_times(numpy_matmul, A, B, C, 2, 1.0)
    ours, theirs = [], []
    for r in range(rounds):
        pair = ((fn, ours), (numpy_matmul, theirs))
        for f, out in (pair if r % 2 == 0 else pair[::-1]):
            out += _block_times(f, A, B, C, repeats, budget_s=2.0)
    a, b = row(name, n, ours), row(NUMPY, n, theirs)
    return {"name": name, "n": n, "gflops": a["gflops"], "numpy_gflops": b["gflops"], "ratio": a["gflops"] / b["gflops"],
            "ours": a, "numpy": b, "machine": machine_label()}


@njit(cache=True, parallel=True)
def _parallel_touch(x):
    for i in prange(x.shape[0]):
        x[i] += 1.0


def parallel_overhead(calls: int = 200) -> float:
    """Median seconds of a parallel loop with almost no work: the fixed cost of handing
    work to the threads and waiting for them, paid by every call of ``tiled_parallel``."""
    x = np.zeros(cores() * 16)
    _parallel_touch(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        _parallel_touch(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def load_average() -> float | None:
    """The 1-minute load average (runnable processes, ours included), where the OS reports it."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@njit(cache=True, fastmath=FASTMATH_REASSOC)
def _loop_in_l1(A, Bt, C, reps, NR):
    kc = A.shape[1]
    for _ in range(reps):
        if NR == 4:
            _dot4x4(A, Bt, C, 0, 0, 0, 0, kc, 4)
        else:
            _dot4x2(A, Bt, C, 0, 0, 0, 0, kc, 4)


def loop_ceiling(calls: int = 7) -> dict:
    """GFLOP/s of the tiled kernels' micro-kernel on one core with all its data in L1:
    one tile's panels (MR rows of A, NR columns of B, KC values of k each) used over and
    over, the reduction after each run of KC included. What a core can do with this
    loop, the ceiling of the tiled kernel per core: ``gflops_best``, the fastest call
    (other work on the machine can only slow a call down), with the median and band."""
    p = plan()
    rng = np.random.default_rng(2)
    A = rng.uniform(-1, 1, (MR, p["KC"])).astype(np.float32)
    Bt = rng.uniform(-1, 1, (p["NR"], p["KC"])).astype(np.float32)
    C = np.zeros((MR, 4), dtype=np.float32)
    reps = max(1, int(2e8 // (2 * MR * p["NR"] * p["KC"])))
    _loop_in_l1(A, Bt, C, 1, p["NR"])
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        _loop_in_l1(A, Bt, C, reps, p["NR"])
        times.append(time.perf_counter() - t0)
    flop = 2 * MR * p["NR"] * p["KC"] * reps / 1e9
    s, s20, s80 = (float(np.percentile(times, q)) for q in (50, 20, 80))
    return {"gflops": flop / s, "gflops_p20": flop / s80, "gflops_p80": flop / s20, "gflops_best": flop / min(times),
            "calls": calls, "KC": p["KC"], "MR": MR, "NR": p["NR"]}


def facts() -> dict:
    """What the page measures about the machine besides the timings (the reasons it gives use them)."""
    return {"tile": micro_tile(), "parallel_overhead_s": parallel_overhead(), "cores": cores(),
            "load_average": load_average()}


def blas_name() -> str:
    """The BLAS library NumPy was built with, as NumPy reports it."""
    try:
        return np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:      # older NumPy, or a build that does not say
        return "its BLAS library"


# What the chapter times: the slow variants stop at smaller sizes so the page builds quickly.
SMALL, LARGE = [64, 128, 256, 512], [64, 128, 256, 512, 1024]
CHAPTER_SIZES = {"ijk": SMALL} | {name: LARGE for name in list(VARIANTS)[1:]} | {NUMPY: LARGE}
