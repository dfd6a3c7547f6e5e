"""Spec for kernels/09_warptiling.cu (chapter "Warp tiling")."""
from ..registry import KernelSpec, Param, cdiv, divides, int32_indices, register

TILE_SIDES = (32, 64, 128, 256)
WARP_SIDES = (16, 32, 64, 128)


def threads(p) -> int:
    """Threads per block: one warp per WM x WN warp tile."""
    return max(1, p["BM"] // p["WM"]) * max(1, p["BN"] // p["WN"]) * 32


def smem_bytes(p) -> int:
    """Two stages of (transposed A tile with 4 floats of padding per row + B tile), float32."""
    return 2 * (p["BK"] * (p["BM"] + 4) + p["BK"] * p["BN"]) * 4


def _lanes_rule(p):
    if p["WM"] % p["TM"] or p["WN"] % p["TN"]:
        return f"the thread tile {p['TM']}x{p['TN']} must divide the warp tile {p['WM']}x{p['WN']}"
    lanes = (p["WM"] // p["TM"]) * (p["WN"] // p["TN"])
    if lanes != 32:
        return (f"a {p['WM']}x{p['WN']} warp tile of {p['TM']}x{p['TN']} thread tiles has {lanes} lanes, "
                "not 32: (WM/TM) * (WN/TN) must be 32")
    return None


def _loads_rule(p):
    t = threads(p)
    for name, n in (("A", p["BM"] * p["BK"] // 4), ("B", p["BK"] * p["BN"] // 4)):
        if n % t:
            return f"{name}'s tile has {n} float4, not a multiple of the {t} threads that load it"
    return None


def _regs_rule(p):
    need = p["TM"] * p["TN"] + 2 * (p["TM"] + p["TN"])
    if need > 200:
        return (f"TM*TN + 2*(TM+TN) = {need} live values: with the staging registers they exceed the 255 "
                "registers a thread may use (they would spill to local memory)")
    return None


def label(p) -> str:
    return f"{p['BM']}x{p['BN']}x{p['BK']} w{p['WM']}x{p['WN']} t{p['TM']}x{p['TN']}"


SPEC = register(
    KernelSpec(
        name="warptiling",
        file="09_warptiling.cu",
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
        block=lambda p: (threads(p), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        smem_bytes=smem_bytes,
        rules=(divides("WM", "BM"), divides("WN", "BN"), _lanes_rule, _loads_rule, _regs_rule),
        shape_rules=(int32_indices,),
        label=label,
        tile=lambda p: (p["BM"], p["BN"]),
        summary="block tile -> warp tiles -> 4x4 thread sub-tiles; fragments double-buffered in registers",
    )
)

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
# (Rows of another kernel would be recorded into that kernel's chapter: the chapter
# compares with the double-buffering chapter's own recorded rows.)
SWEEP = (
    [(D, (n, n, n)) for n in (1024, 2048, 4096, 8192)]
    + [(v, (4096, 4096, 4096)) for v in VARIANTS[1:]]
)
TEST_CONFIGS = [VARIANTS[1], VARIANTS[3], VARIANTS[5], VARIANTS[7],
                dict(D, BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=16)]
