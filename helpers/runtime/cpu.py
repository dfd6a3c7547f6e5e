"""CPU matrix multiply in Numba, from the textbook loop to a parallel tiled kernel.

Taught in the chapter "On the CPU" (book/01_cpu.md): the CPU's kernels, and timing them. Every variant computes
C = A @ B for float32 row-major A (M, K) and B (K, N), for any sizes (edges that
are not multiples of 4 or of a tile are handled), and is checked against NumPy.
``benchmark`` times them against NumPy's own float32 matmul (its BLAS);
``ratio_to_numpy`` measures the best variant against NumPy, interleaved.

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

import os
import platform
import time

import numpy as np
from numba import njit, prange

FASTMATH = {"contract"}
FASTMATH_REASSOC = {"contract", "reassoc"}   # the tiled kernels: sums may be split per SIMD lane
MR = 4      # rows of C per register block
KU = 4      # k unrolled by 4: four rows of B per pass
KC = 512    # rows of a packed block of B: KC x NC floats = 256 KB, sized for a 1 MB L2
NC = 128    # columns of a packed block of B
MB = 32     # rows of C per parallel work item


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


# ------------------------------------- 5. packed B panels, C in registers
@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _dot4x4(A, Bt, C, i, j, jj, k0, kc, N):
    """C[i:i+4, j:j+4] += A[i:i+4, k0:k0+kc] @ Bt[jj:jj+4, :kc].T, the sums in 16 registers.

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
    # ---- store: columns past N exist only in the zero padding of the last panel
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
def _dot1x4(A, Bt, C, i, j, jj, k0, kc, N):
    """One row of C against four columns: for the last M % 4 rows."""
    c0 = c1 = c2 = c3 = np.float32(0.0)
    a = A[i, k0:k0 + kc]
    b0, b1, b2, b3 = Bt[jj, :kc], Bt[jj + 1, :kc], Bt[jj + 2, :kc], Bt[jj + 3, :kc]
    for k in range(kc):
        x = a[k]
        c0 += x * b0[k]
        c1 += x * b1[k]
        c2 += x * b2[k]
        c3 += x * b3[k]
    C[i, j] += c0
    if j + 1 < N:
        C[i, j + 1] += c1
    if j + 2 < N:
        C[i, j + 2] += c2
    if j + 3 < N:
        C[i, j + 3] += c3


@njit(cache=True, inline="always")
def _pack_block(B, Bp, pk, pn):
    """Block (pk, pn) of B, KC rows x NC columns, transposed into Bp[pk, pn] (NC x KC); zeros outside B."""
    K, N = B.shape
    k0, j0 = pk * KC, pn * NC
    kc, w = min(KC, K - k0), min(NC, N - j0)
    blk = Bp[pk, pn]
    blk[:, :] = 0
    for kk in range(kc):                # read B along its rows; the writes land in 8 KB of L1
        row = B[k0 + kk]
        for jj in range(w):
            blk[jj, kk] = row[j0 + jj]


@njit(cache=True)
def pack_b(B):
    """Copy B into blocks of KC rows x NC columns, each stored transposed and contiguous.

    Shape (K blocks, N blocks, NC, KC). A block is one 256 KB stretch of memory in
    which each column of B is KC consecutive floats, the order the micro-kernel reads.
    """
    K, N = B.shape
    Bp = np.empty(((K + KC - 1) // KC, (N + NC - 1) // NC, NC, KC), dtype=np.float32)
    for pk in range(Bp.shape[0]):
        for pn in range(Bp.shape[1]):
            _pack_block(B, Bp, pk, pn)
    return Bp


@njit(cache=True, parallel=True)
def pack_b_parallel(B):
    """pack_b with the blocks shared among the cores."""
    K, N = B.shape
    nk, nn = (K + KC - 1) // KC, (N + NC - 1) // NC
    Bp = np.empty((nk, nn, NC, KC), dtype=np.float32)
    for b in prange(nk * nn):
        _pack_block(B, Bp, b // nn, b % nn)
    return Bp


@njit(cache=True, fastmath=FASTMATH_REASSOC, inline="always")
def _rows_tiled(A, Bp, C, i0, i1):
    """Rows i0:i1 of C: for each packed block of B, every 4 x 4 tile of these rows."""
    K = A.shape[1]
    N = C.shape[1]
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
                for jj in range(0, w, 4):
                    _dot4x4(A, Bt, C, i, j0 + jj, jj, k0, kc, N)
                i += MR
            while i < i1:                   # M not a multiple of 4
                for jj in range(0, w, 4):
                    _dot1x4(A, Bt, C, i, j0 + jj, jj, k0, kc, N)
                i += 1


@njit(cache=True, fastmath=FASTMATH_REASSOC)
def tiled(A, B, C):
    """Packed, transposed blocks of B (KC x NC = 256 KB, they stay in L2) and 4 x 4 tiles of C in registers."""
    Bp = pack_b(B)
    M = A.shape[0]
    for i0 in range(0, M, MB):
        _rows_tiled(A, Bp, C, i0, min(M, i0 + MB))


# ---------------------------------------------------------------- 6. parallel
@njit(cache=True, fastmath=FASTMATH_REASSOC, parallel=True)
def tiled_parallel(A, B, C):
    """The tiled kernel with blocks of MB rows of C spread over the cores (prange).

    Rows of C are independent, so the threads never write the same element; they
    all read the same packed B (packed in parallel too), and each core's L2 holds
    the block of it that core is working on. Each element of C is summed in the
    same order as in ``tiled``, so both give identical results.
    """
    Bp = pack_b_parallel(B)
    M = A.shape[0]
    blocks = (M + MB - 1) // MB
    for b in prange(blocks):
        _rows_tiled(A, Bp, C, b * MB, min(M, b * MB + MB))


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


# ------------------------------------------------------------- machine code
def micro_kernel_loop() -> str:
    """The machine code of ``_dot4x4``'s k loop, as compiled for this CPU.

    Compiles a small wrapper around the micro-kernel (uncached, so Numba keeps its
    assembly) and returns the loop with the most fused multiply-adds.
    """
    import re

    @njit(fastmath=FASTMATH_REASSOC)
    def probe(A, Bt, C):
        _dot4x4(A, Bt, C, 0, 0, 0, 0, A.shape[1], C.shape[1])

    A = np.ones((4, 64), dtype=np.float32)
    C = np.zeros((4, 4), dtype=np.float32)
    probe(A, A.copy(), C)
    asm = next(iter(probe.inspect_asm().values())).splitlines()
    labels = {l.rstrip(":"): i for i, l in enumerate(asm) if re.match(r"^\.?L\w+:", l)}
    best, best_n = [], (-1, 0)
    for i, line in enumerate(asm):
        m = re.match(r"^\s+j\w+\s+(\.?L\w+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            body = [l.split("#")[0].rstrip() for l in asm[labels[m.group(1)]:i + 1]]
            body = [l for l in body if l.strip() and not l.strip().startswith(".p2align")]
            if any(re.match(r"^\.?L\w+:", l) for l in body[1:]):
                continue                    # not an innermost loop
            width = 3 if "zmm" in "".join(body) else 2 if "ymm" in "".join(body) else 1
            n = (sum("fmadd" in l or "mul" in l for l in body), width)
            if n > best_n:
                best, best_n = body, n
    return "\n".join(best)


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


def caches() -> dict:
    """Data-cache sizes in bytes and the line size, from Linux's /sys (defaults if unreadable)."""
    out = {"line": 64, "L1": 32 * 1024, "L2": 1024 * 1024, "L3": 32 * 1024 * 1024, "source": "assumed"}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            if not idx.startswith("index"):
                continue
            d = os.path.join(base, idx)
            kind = open(os.path.join(d, "type")).read().strip()
            if kind == "Instruction":
                continue
            level = open(os.path.join(d, "level")).read().strip()
            size = open(os.path.join(d, "size")).read().strip()
            mult = {"K": 1024, "M": 1024 * 1024}.get(size[-1], 1)
            out[f"L{level}"] = int(size.rstrip("KM")) * mult
            out["line"] = int(open(os.path.join(d, "coherency_line_size")).read().strip())
            out["source"] = "this machine"
    except (OSError, ValueError):
        pass
    return out


def machine_label() -> str:
    return f"measured on this machine: {cpu_name()}, {cores()} cores"


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


def warm_up(names=None) -> float:
    """Compile (or load from Numba's cache) every variant on a tiny problem; returns seconds."""
    t0 = time.perf_counter()
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


def time_variant(fn, n: int, repeats: int = 5, budget_s: float = 1.5) -> float:
    """Median seconds of C = A @ B at n x n x n, after one untimed call (JIT, caches).

    Calls are timed back to back, never interleaved with another library: after a
    parallel call, NumPy's BLAS threads and Numba's threads both keep spinning on
    their cores for a while, and would slow the other down.
    """
    A, B = random(n)
    C = np.empty((n, n), dtype=np.float32)
    return float(np.median(_block_times(fn, A, B, C, repeats, budget_s)))


def benchmark(sizes: dict, progress=print) -> list[dict]:
    """Time each variant (and NumPy, as "NumPy (BLAS)") at its sizes.

    Returns rows {name, n, s, gflops, vs_numpy}, GFLOP/s = 2 n^3 / seconds / 1e9;
    ``vs_numpy`` is the ratio to NumPy at the same n when NumPy was timed too (else None).
    For the headline ratio, prefer :func:`ratio_to_numpy`, which alternates the two.
    """
    rows = []
    for name, ns in sizes.items():
        fn = numpy_matmul if name == NUMPY else VARIANTS[name]
        for n in ns:
            s = time_variant(fn, n)
            rows.append({"name": name, "n": n, "s": s, "gflops": 2 * n**3 / s / 1e9, "vs_numpy": None})
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
    g_ours = 2 * n**3 / float(np.median(ours)) / 1e9
    g_np = 2 * n**3 / float(np.median(theirs)) / 1e9
    return {"name": name, "n": n, "gflops": g_ours, "numpy_gflops": g_np, "ratio": g_ours / g_np,
            "machine": machine_label()}


