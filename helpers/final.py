"""The final kernel as a library call: pick a config per shape, then launch.

``choose_config(M, N, K)`` returns the template parameters of kernels/10_final.cu
for one problem shape: a small table of shapes measured by ``scripts/tune_final.py``
on the H200, and otherwise rules derived from the same measurements (how many
output tiles the shape has against the 132 SMs, how long K is). ``matmul(A, B)``
uses it. Split-K is part of the kernel (blocks along ``blockIdx.z`` that add their
partial tiles in a fixed order), so every choice is a single launch that
``helpers.bench.measure`` can time like any other kernel.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

from .registry import cdiv

SMS = 132  # H100 / H200 SXM

# Blocks of 256 x 128 (8 warps of 64 x 64, 16 x 8 per thread): one per SM.
BIG = dict(BM=256, BN=128, BK=8, WM=64, WN=64, TM=16, TN=8, STAGES=3, SPLITK=1, GROUP=8)
# Blocks of 128 x 128 (4 warps of 64 x 64): two per SM, finer grain.
MID = dict(BIG, BM=128, BN=128, STAGES=4)
# Blocks of 64 x 64 (4 warps of 32 x 32, 4 x 8 per thread): for small products.
SMALL = dict(BIG, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=3)

# Shapes measured on the H200 (scripts/tune_final.py): exact (M, N, K) -> params.
TUNED: dict[tuple[int, int, int], dict] = {}


def _waves(tiles: int, per_sm: int) -> float:
    """Fraction of the last wave that is busy: 1.0 means no idle SMs at the end."""
    slots = SMS * per_sm
    return tiles / (cdiv(tiles, slots) * slots)


def _split(tiles: int, per_sm: int, k_tiles: int, most: int = 8) -> int:
    """Smallest split of K that fills the GPU, keeping at least 16 k-tiles per block."""
    from .registry import get

    allowed = get("final").params[[p.name for p in get("final").params].index("SPLITK")].allowed
    best = 1
    for s in allowed:
        if s > most or k_tiles // s < 16:
            break
        best = s
        if tiles * s >= 0.9 * SMS * per_sm:
            break
    return best


def choose_config(M: int, N: int, K: int) -> dict:
    """Template parameters of the final kernel for an M x N x K product."""
    if (M, N, K) in TUNED:
        return dict(TUNED[(M, N, K)])
    big_tiles = cdiv(M, 256) * cdiv(N, 128)
    mid_tiles = cdiv(M, 128) * cdiv(N, 128)
    if big_tiles >= 2 * SMS and _waves(big_tiles, 1) >= 0.85:
        return dict(BIG)
    if mid_tiles >= SMS:
        return dict(MID)
    if M * N > 128 * 128 * 16 or min(M, N) <= 128:
        # few output tiles: split K so that the blocks fill the SMs
        return dict(MID, SPLITK=_split(mid_tiles, 2, cdiv(K, 8)))
    small_tiles = cdiv(M, 64) * cdiv(N, 64)
    return dict(SMALL, SPLITK=_split(small_tiles, 4, cdiv(K, 8)))


def matmul(A, B, params: dict | None = None):
    """C = A @ B with the final kernel and the config ``choose_config`` picks for the shape."""
    import cupy
    import numpy as np

    from .launch import check_operands, prepare

    check_operands(A, B)
    (M, K), N = A.shape, B.shape[1]
    launcher = prepare("final", M, N, K, params or choose_config(M, N, K))
    C = cupy.empty((M, N), dtype=np.float32)   # every element is written (split 0 stores)
    launcher(A, B, C)
    return C
