"""kernels/10_warptiling.cu: block tile -> warp tiles -> thread tiles (chapter "Warp tiling")."""
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
    grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    smem_bytes=smem_bytes,
    registers=warp_tile_registers(staging),
    load_width=4,
    fragments=warp_fragments,
    rules=(divides("WM", "BM"), divides("WN", "BN"), warp_lanes, float4_split),
    label=warp_tile_label,
    summary="block tile -> warp tiles -> 4x4 thread sub-tiles; fragments double-buffered in registers",
)
SPECS = [SPEC]

D = SPEC.defaults()
# Warp-tile shapes compared at n = 4096 (the chapter's figure).
VARIANTS = [
    dict(D),                                                        # 128x128, 4 warps of 64x64, 16x8
    dict(D, BK=16),
    dict(D, TM=8, TN=16),                                           # lanes 8x4 instead of 4x8
    dict(D, BM=256, BN=128),                                        # 8 warps of 64x64
    dict(D, BM=128, BN=256, TM=8, TN=16),
    dict(D, WN=32, TM=8, TN=8),                                     # 8 warps of 64x32, 8x8
    dict(D, WM=32, WN=64, TM=8, TN=8),                              # 8 warps of 32x64, 8x8
    dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16),         # small tile
    dict(D, WM=32, WN=128, TM=8, TN=16),                            # flat warp tile
]
SWEEP = ([(SPEC, D, (n, n, n)) for n in (1024, 2048, 4096, 8192)]
         + [(SPEC, v, (4096, 4096, 4096)) for v in VARIANTS[1:]])
TEST_CONFIGS = [(SPEC, v) for v in (VARIANTS[1], VARIANTS[3], VARIANTS[5], VARIANTS[7])] + [
    (SPEC, dict(D, BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=16))]
