"""The shared-memory tiled kernels on the CPU: an emulation of their index math, and the real kernels.

Taught in the chapter "Shared-memory tiling" (and used again in the chapters on thread tiles).

:func:`emulate_smem_tiling` is a NumPy *emulation of the index math* of
``kernels/04_smem_tiling.cu``: it walks the grid block by block and the K loop step by
step, computing exactly the addresses the CUDA kernel computes (which element of A or B
every thread loads into its tile, which products it adds, and where it stores), and
counts what a GPU would never tell you politely:

* reads past the end of A or B (on a GPU: whatever lies in memory there, or a
  crash); the emulation gives them the value NaN, so any result that depends
  on one shows up;
* reads inside the array but of the wrong element (a row's end running into
  the next row): silently wrong numbers;
* stores past the end of C, and stray stores that land on an element of C
  another thread owns.

``emulate_smem_tiling(..., guarded=False)`` is the textbook kernel launched on a shape
that is not a multiple of TILE, which its spec refuses to do on a real GPU.

:func:`cpu_check` runs the *real* kernel file on the CPU instead
(:mod:`helpers.runtime.cpu_cuda`: one C++ thread per CUDA thread, barriers, shared memory
filled with NaN, every array under AddressSanitizer) and compares the result with NumPy:
the same check as on a GPU, for any kernel of the book.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import hardware
from ..hardware import Device
from ..runtime.check import compare, tolerance
from ..runtime.spec import ConfigError, KernelSpec, cdiv
from ..runtime.specs import get
from ..shapes import label as shape_label
from ..tables import Table, Text
from ..runtime import cpu_cuda

# Categories of an element of C after an emulated run (for figures).
CORRECT, WRONG, UNDEFINED, CLOBBERED, UNWRITTEN = range(5)
CATEGORY_NAMES = {CORRECT: "correct", WRONG: "wrong (read the wrong elements)",
                  UNDEFINED: "undefined (read past the end of A or B)",
                  CLOBBERED: "overwritten by a stray store", UNWRITTEN: "never written"}


@dataclass
class Emulation:
    """What an emulated launch computed and which accesses went astray."""

    C: np.ndarray                   # (M, N) result; NaN where unwritten or undefined
    writes: np.ndarray              # (M, N) how many stores hit each element
    stray: np.ndarray               # (M, N) True where a thread outside C stored
    reads: dict = field(default_factory=dict)   # counters, see ``summary``

    def categories(self, reference: np.ndarray, K: int) -> np.ndarray:
        """Per element of C: CORRECT, WRONG, UNDEFINED, CLOBBERED or UNWRITTEN."""
        scale = max(float(np.abs(reference).max()), 1e-30)
        bad = ~np.isclose(self.C, reference, rtol=0, atol=max(tolerance(K), 1e-6) * scale * np.sqrt(K))
        out = np.full(self.C.shape, CORRECT, dtype=np.int8)
        out[bad] = WRONG
        out[np.isnan(self.C)] = UNDEFINED
        out[self.stray] = CLOBBERED
        out[self.writes == 0] = UNWRITTEN
        return out

    def summary(self) -> dict:
        return dict(self.reads, elements_written_twice=int((self.writes > 1).sum()),
                    elements_unwritten=int((self.writes == 0).sum()))


class _Memory:
    """A flat float32 array that records every access, in or out of bounds."""

    def __init__(self, X: np.ndarray, name: str):
        self.flat = np.ascontiguousarray(X, dtype=np.float64).ravel()
        self.size = self.flat.size
        self.name = name
        self.past_end = 0     # loads at an index >= size (or < 0)

    def load(self, idx: np.ndarray) -> np.ndarray:
        out = np.full(idx.shape, np.nan)
        inside = (idx >= 0) & (idx < self.size)
        out[inside] = self.flat[idx[inside]]
        self.past_end += int((~inside).sum())
        return out


def emulate_smem_tiling(A: np.ndarray, B: np.ndarray, TILE: int, SWAP: int = 1,
                        guarded: bool = True) -> Emulation:
    """Run ``sgemm_smem_tiling<TILE, SWAP>`` (or the unguarded kernel) on the CPU.

    The grid is the one the spec launches: ceil(M / TILE) x ceil(N / TILE) blocks.
    """
    M, K = A.shape
    N = B.shape[1]
    Amem, Bmem = _Memory(A, "A"), _Memory(B, "B")
    C = np.full(M * N, np.nan)
    writes = np.zeros(M * N, dtype=np.int64)
    stray = np.zeros(M * N, dtype=bool)
    wrong_reads = {"A": 0, "B": 0}
    store_past_end = 0
    ty, tx = np.meshgrid(np.arange(TILE), np.arange(TILE), indexing="ij")   # (TILE, TILE) threads
    for block_row in range(cdiv(M, TILE)):
        for block_col in range(cdiv(N, TILE)):
            row = block_row * TILE + ty
            col = block_col * TILE + tx
            acc = np.zeros((TILE, TILE))
            for k0 in range(0, K, TILE):
                a_col, b_row = k0 + tx, k0 + ty
                a_idx, b_idx = row * K + a_col, b_row * N + col
                if guarded:
                    a_ok, b_ok = (row < M) & (a_col < K), (b_row < K) & (col < N)
                    As = np.where(a_ok, Amem.load(np.where(a_ok, a_idx, 0)), 0.0)
                    Bs = np.where(b_ok, Bmem.load(np.where(b_ok, b_idx, 0)), 0.0)
                else:
                    As, Bs = Amem.load(a_idx), Bmem.load(b_idx)
                    # inside the array, but not the element the math wants
                    wrong_reads["A"] += int((((row >= M) | (a_col >= K)) & (a_idx < Amem.size)).sum())
                    wrong_reads["B"] += int((((b_row >= K) | (col >= N)) & (b_idx < Bmem.size)).sum())
                acc += As @ Bs     # acc[ty, tx] += sum over kk of As[ty, kk] * Bs[kk, tx]
            c_idx = row * N + col
            mine = (row < M) & (col < N)
            if guarded:
                C[c_idx[mine]] = acc[mine]
                writes[c_idx[mine]] += 1
            else:
                inside = c_idx < M * N
                C[c_idx[inside]] = acc[inside]
                writes[c_idx[inside]] += 1
                stray[c_idx[inside & ~mine]] = True
                store_past_end += int((~inside).sum())
    reads = {"A_reads_past_end": Amem.past_end, "B_reads_past_end": Bmem.past_end,
             "A_reads_wrong_element": wrong_reads["A"], "B_reads_wrong_element": wrong_reads["B"],
             "stray_stores_into_C": int(stray.sum()), "stores_past_end_of_C": store_past_end}
    return Emulation(C.reshape(M, N), writes.reshape(M, N), stray.reshape(M, N), reads)


def operands(M: int, N: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (M, K)).astype(np.float32), rng.uniform(-1, 1, (K, N)).astype(np.float32))


def failure_table(shapes, TILE: int = 32, seed: int = 0) -> Table:
    """The emulated unguarded kernel on each shape: how many elements of C come out right, and the
    accesses that went astray."""
    rows = []
    for M, N, K in shapes:
        A, B = operands(M, N, K, seed)
        em = emulate_smem_tiling(A, B, TILE, guarded=False)
        cat = em.categories(A.astype(np.float64) @ B, K)
        s = em.summary()
        rows.append({"M x N x K": f"{M} x {N} x {K}", "elements correct": f"{int((cat == CORRECT).sum())} of {M * N}",
                     "reads past the end of A or B": s["A_reads_past_end"] + s["B_reads_past_end"],
                     "reads of a wrong element": s["A_reads_wrong_element"] + s["B_reads_wrong_element"],
                     "stray stores into C": s["stray_stores_into_C"], "stores past the end of C": s["stores_past_end_of_C"]})
    return Table(rows, caption=f"Emulated index math of the unguarded kernel, TILE = {TILE}")


def guarded_table(shapes, TILE: int = 32, seed: int = 0) -> Table:
    """The emulated guarded kernel on each shape: every element written once, no stray read."""
    rows = []
    for M, N, K in shapes:
        A, B = operands(M, N, K, seed)
        em = emulate_smem_tiling(A, B, TILE, guarded=True)
        rows.append({"M x N x K": f"{M} x {N} x {K}", "every element written once": bool((em.writes == 1).all()),
                     "largest error": float(np.abs(em.C - A.astype(np.float64) @ B).max()),
                     "reads past the end": em.reads["A_reads_past_end"] + em.reads["B_reads_past_end"]})
    return Table(rows, caption=f"Emulated index math of the guarded kernel, TILE = {TILE}")


def copies_text(kernel: str | KernelSpec, params: dict | None, shape: tuple[int, int, int], device: Device) -> Text:
    """How a tiled kernel's block splits the copies of each k-slice among its threads, and its grid for a
    shape on ``device``."""
    spec = get(kernel)
    p = spec.resolve(params)
    t = spec.tiles(p)
    threads = spec.threads(p)
    a, b = t.BM * t.BK / threads, t.BK * t.BN / threads
    def rounds(x):
        return f"{x:g} floats" if x >= 1 else f"one float for {x:.0%} of the threads"
    return Text(f"{spec.label(p)}: {threads} threads per block; each k-slice, a thread copies {rounds(a)} of A "
                f"and {rounds(b)} of B. For {shape[0]} x {shape[1]} x {shape[2]} the grid is "
                f"{' x '.join(map(str, spec.grid(p, *shape, device)[:2]))} blocks.")


def shape_verdict(kernel: str | KernelSpec, M: int, N: int, K: int, device: Device, **params) -> Text:
    """Whether a config may run an M x N x K product on ``device``, as one sentence (the refusal, without
    a traceback)."""
    spec = get(kernel)
    full = spec.resolve(params)
    try:
        spec.check_shape(full, M, N, K, device)
    except ConfigError as exc:
        return Text(f"**Refused.** {exc}")
    return Text(f"**Allowed:** {spec.name} {spec.label(full)} on {M}x{N}x{K}.")


# ------------------------------------------------------------- the real kernel on the CPU
def run_on_cpu(kernel: str | KernelSpec, A: np.ndarray, B: np.ndarray, device: Device, params: dict | None = None,
               offset_floats: int = 0) -> tuple[np.ndarray, dict]:
    """C = A @ B computed by the kernel's own ``.cu`` file on the CPU, launched with the grid it has on
    ``device``; (C, the run's diagnostics).

    C starts as NaN, like on a GPU, so an element nobody writes shows. ``offset_floats=1``
    places every array 4 bytes past an aligned address (a view into a bigger array).
    """
    spec = get(kernel)
    full = spec.resolve(params)
    M, K = A.shape
    N = B.shape[1]
    spec.check_shape(full, M, N, K, device)
    C = np.full((M, N), np.nan, dtype=np.float32)
    args = [np.int32(M), np.int32(N), np.int32(K), np.ascontiguousarray(A, np.float32),
            np.ascontiguousarray(B, np.float32), C]
    if spec.workspace is not None:
        raise ConfigError(f"{spec.name}: the CPU runner here does not allocate split-K workspaces")
    out = cpu_cuda.run(spec.path, spec.name_expression(full), spec.grid(full, M, N, K, device), spec.block(full),
                       spec.smem_bytes(full), args, offset_floats=offset_floats)
    return out["arrays"][5], {k: v for k, v in out.items() if k != "arrays"}


def cpu_check(kernel: str | KernelSpec, shapes, configs: list[dict] | None = None, seed: int = 0,
              offset_floats: int = 0) -> Table | Text:
    """The real kernel on the CPU for each config and shape, against NumPy (the GPU check's bounds).

    Returns a Text instead of a table where the CPU runner cannot run here (no g++).
    """
    spec = get(kernel)
    device = hardware.default()    # the grid a launch on the book's GPU has
    configs = [spec.resolve(cfg) for cfg in configs or [spec.defaults()]]
    try:       # compile every config at once (in parallel) before running them
        cpu_cuda.build(spec.path, [spec.name_expression(full) for full in configs])
    except cpu_cuda.CompilerMissing as exc:
        return Text(f"The CPU runner cannot compile here: {exc}")
    rows = []
    for full in configs:
        for M, N, K in shapes:
            A, B = operands(M, N, K, seed)
            C, info = run_on_cpu(spec, A, B, device, full, offset_floats)
            c = compare(C, A.astype(np.float64) @ B.astype(np.float64), A, B)
            rows.append({"config": spec.label(full), "shape": shape_label((M, N, K)),
                         "blocks x threads": f"{info['blocks']} x {info['threads']}",
                         "barriers": info.get("barriers"), "elements never written": c.unwritten,
                         "relative error": c.rel_err, "tolerance": tolerance(K), "correct": c.ok})
    where = " (every array 4 bytes past an aligned address)" if offset_floats else ""
    return Table(rows, caption=f"kernels/{spec.file} compiled with g++ and run on the CPU{where}, against NumPy")
