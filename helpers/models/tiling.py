"""NumPy emulations of the shared-memory tiled kernels' index math, on the CPU.

Taught in the chapter "Shared-memory tiling" (and used again in "1D thread
tiles"). The tests run the real kernels on the CPU too (:mod:`helpers.runtime.cpu_cuda`)
and check that both agree. Each emulator walks the grid block by block and the K loop step by
step, computing exactly the addresses the CUDA kernel computes: which element
of A or B every thread loads into its tile, which products it adds, and where
it stores. It counts what a GPU would never tell you politely:

* reads past the end of A or B (on a GPU: whatever lies in memory there, or a
  crash); the emulation gives them the value NaN, so any result that depends
  on one shows up;
* reads inside the array but of the wrong element (a row's end running into
  the next row): silently wrong numbers;
* stores past the end of C, and stray stores that land on an element of C
  another thread owns.

``emulate_smem_tiling(..., guarded=False)`` is the textbook kernel of
``kernels/04_smem_tiling.cu`` launched on a shape that is not a multiple of
TILE, which its spec refuses to do on a real GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime.check import tolerance
from ..runtime.spec import cdiv

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


def thread_tile_1d_owner(BM: int, BN: int, TM: int) -> np.ndarray:
    """(BM, BN) array: which thread of the block computes each element of its tile."""
    threads = BM * BN // TM
    owner = np.full((BM, BN), -1)
    for tid in range(threads):
        tcol, trow = tid % BN, tid // BN
        for m in range(TM):
            assert owner[trow * TM + m, tcol] == -1, "two threads own one element"
            owner[trow * TM + m, tcol] = tid
    return owner


def emulate_thread_tile_1d(A: np.ndarray, B: np.ndarray, BM: int, BN: int, BK: int, TM: int) -> Emulation:
    """Run ``sgemm_thread_tile_1d<BM, BN, BK, TM, *>`` on the CPU, load loops included.

    Also checks that every element of each shared tile is stored exactly once
    per step (the strided loads cover the tile with no gap and no overlap).
    """
    M, K = A.shape
    N = B.shape[1]
    threads = BM * BN // TM
    a_loads, b_loads = cdiv(BM * BK, threads), cdiv(BK * BN, threads)
    Amem, Bmem = _Memory(A, "A"), _Memory(B, "B")
    C = np.full(M * N, np.nan)
    writes = np.zeros(M * N, dtype=np.int64)
    tid = np.arange(threads)
    tcol, trow = tid % BN, tid // BN
    tile_gaps = 0
    for by in range(cdiv(M, BM)):
        for bx in range(cdiv(N, BN)):
            row0, col0 = by * BM, bx * BN
            acc = np.zeros((threads, TM))
            for k0 in range(0, K, BK):
                As, Bs = np.full((BM, BK), np.nan), np.full((BK, BN), np.nan)
                stored_a, stored_b = np.zeros((BM, BK), int), np.zeros((BK, BN), int)
                for j in range(a_loads):
                    i = tid + j * threads
                    i = i[i < BM * BK]
                    r, c = i // BK, i % BK
                    gr, gc = row0 + r, k0 + c
                    ok = (gr < M) & (gc < K)
                    As[r, c] = np.where(ok, Amem.load(np.where(ok, gr * K + gc, 0)), 0.0)
                    np.add.at(stored_a, (r, c), 1)
                for j in range(b_loads):
                    i = tid + j * threads
                    i = i[i < BK * BN]
                    r, c = i // BN, i % BN
                    gr, gc = k0 + r, col0 + c
                    ok = (gr < K) & (gc < N)
                    Bs[r, c] = np.where(ok, Bmem.load(np.where(ok, gr * N + gc, 0)), 0.0)
                    np.add.at(stored_b, (r, c), 1)
                tile_gaps += int((stored_a != 1).sum() + (stored_b != 1).sum())
                # compute: thread tid, result m uses As[trow*TM + m][k] and Bs[k][tcol]
                rows = trow[:, None] * TM + np.arange(TM)[None, :]          # (threads, TM)
                acc += np.einsum("tmk,kt->tm", As[rows], Bs[:, tcol])
            rows = row0 + trow[:, None] * TM + np.arange(TM)[None, :]
            cols = np.broadcast_to((col0 + tcol)[:, None], rows.shape)
            mine = (rows < M) & (cols < N)
            idx = rows[mine] * N + cols[mine]
            C[idx] = acc[mine]
            np.add.at(writes, idx, 1)
    reads = {"A_reads_past_end": Amem.past_end, "B_reads_past_end": Bmem.past_end,
             "tile_elements_not_stored_once": tile_gaps}
    return Emulation(C.reshape(M, N), writes.reshape(M, N), np.zeros((M, N), bool), reads)


