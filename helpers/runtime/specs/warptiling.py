"""kernels/10_warptiling.cu: block tile -> warp tiles -> thread tiles on chapter 9's pipeline (chapter "Warp tiling")."""
from ..rules import divides, warp_fragments, warp_lanes, warp_threads, warp_tile_label, warp_tile_registers
from ..spec import KernelSpec, Param, Tiles, cdiv

TILE_SIDES = (32, 64, 128, 256)
WARP_SIDES = (16, 32, 64, 128)
PAD = 4          # floats of padding per row of the transposed A tile


def smem_bytes(p) -> int:
    """Two stages of (transposed A tile, padded, + B tile), dynamic."""
    return 2 * (p["BK"] * (p["BM"] + PAD) + p["BK"] * p["BN"]) * 4


def float4_split(p):
    t = warp_threads(p)
    for name, n in (("A", p["BM"] * p["BK"] // 4), ("B", p["BK"] * p["BN"] // 4)):
        if n % t:
            return f"{name}'s tile has {n} float4, not a multiple of the {t} threads that load it"
    return None


def load_rows(p):
    """A thread's float4 of one tile share their columns: the threads must be a multiple of the
    float4 in a row of A's tile (BK/4) and in a row of B's (BN/4)."""
    t = warp_threads(p)
    for name, n in (("A", p["BK"] // 4), ("B", p["BN"] // 4)):
        if t % n:
            return f"{t} threads are not a multiple of the {n} float4 in a row of {name}'s tile"
    return None


def min_blocks(p) -> int:
    """Blocks per SM its __launch_bounds__ asks for (kernels/10_warptiling.cu, wt::min_blocks):
    two 256-thread blocks of 8 x 8 per thread, as chapter 9's kernel; one otherwise."""
    return 2 if warp_threads(p) == 256 and p["TM"] * p["TN"] <= 64 else 1


def fits_budget(p) -> bool:
    """ptxas fits 8 x 8 per thread in two 256-thread blocks' budget (128 registers) at BK <= 8
    without spilling, as it does chapter 9's kernel (tests/test_sass.py)."""
    return min_blocks(p) == 2 and p["BK"] <= 8


def staging(p) -> int:
    """Floats a thread holds between its global load and its store to shared memory."""
    return p["BK"] * (p["BM"] + p["BN"]) // warp_threads(p)


SPEC = KernelSpec(
    name="warptiling",
    file="10_warptiling.cu",
    function="sgemm_warptiling",
    title="Warp tiling",
    chapter="warptiling",
    params=(
        Param("BM", 128, TILE_SIDES, "rows of C per block"),
        Param("BN", 128, TILE_SIDES, "columns of C per block"),
        Param("BK", 8, (4, 8, 16, 32), "k-slice per step"),
        Param("WM", 64, WARP_SIDES, "rows of C per warp"),
        Param("WN", 64, WARP_SIDES, "columns of C per warp"),
        Param("TM", 16, (4, 8, 16), "rows of C per thread (4x4 sub-tiles)"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread (4x4 sub-tiles)"),
    ),
    block=lambda p: (warp_threads(p), 1, 1),
    grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    smem_bytes=smem_bytes,
    registers=warp_tile_registers(staging),
    min_blocks=min_blocks,
    fits_budget=fits_budget,
    int32_indices=False,
    load_width=4,
    fragments=warp_fragments,
    rules=(divides("WM", "BM"), divides("WN", "BN"), warp_lanes, float4_split, load_rows),
    label=warp_tile_label,
    summary=("block tile -> warp tiles -> 4x4 thread sub-tiles, on chapter 9's two stages, register "
             "prefetch and fast path (no checks in blocks wholly inside A and B)"),
)
SPECS = [SPEC]

D = SPEC.defaults()
# Warp-tile shapes compared at n = 4096 (the chapter's figure), and the candidates
# scripts/warptiling_sweep.py times for the default.
VARIANTS = [
    dict(D),                                                        # 128x128, 4 warps of 64x64, 16x8
    dict(D, BK=16),
    dict(D, TM=8, TN=16),                                           # lanes 8x4 instead of 4x8
    dict(D, BM=256, BN=128),                                        # 8 warps of 64x64
    dict(D, BM=128, BN=256, TM=8, TN=16),
    dict(D, WN=32, TM=8, TN=8),                                     # 8 warps of 64x32, 8x8: 09's tile, warp-tiled
    dict(D, WM=32, WN=64, TM=8, TN=8),                              # 8 warps of 32x64, 8x8
    dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16),         # small tile
    dict(D, BM=128, BN=256),                                        # 8 warps of 64x64, 16x8
    dict(D, BM=128, BN=256, BK=16, TM=8, TN=16),
]
SWEEP = ([(SPEC, D, (n, n, n)) for n in (1024, 2048, 4096, 8192)]
         + [(SPEC, v, (4096, 4096, 4096)) for v in VARIANTS[1:]])
TEST_CONFIGS = [(SPEC, v) for v in (VARIANTS[1], VARIANTS[3], VARIANTS[5], VARIANTS[7])] + [
    (SPEC, dict(D, BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=16))]


def fast_blocks(p: dict, M: int, N: int, K: int) -> int:
    """Blocks of an M x N x K launch that take the path without checks (kernels/10_warptiling.cu,
    region fast_path), for operands that start 16-byte aligned: every row of A and B aligned
    (K, N multiples of 4), K a multiple of BK, and the block's tile wholly inside C."""
    p = SPEC.resolve(p)
    if K % 4 or N % 4 or K % p["BK"]:
        return 0
    return (M // p["BM"]) * (N // p["BN"])
