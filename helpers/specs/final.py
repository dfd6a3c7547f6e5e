"""Spec for kernels/10_final.cu (chapter "The final kernel").

The per-shape choice of a config lives in :mod:`helpers.final` (``choose_config``).
"""
from ..registry import KernelSpec, Param, cdiv, divides, int32_indices, register

TILE_SIDES = (64, 128, 256)
WARP_SIDES = (32, 64, 128)


def threads(p) -> int:
    """Threads per block: one warp per WM x WN warp tile."""
    return max(1, p["BM"] // p["WM"]) * max(1, p["BN"] // p["WN"]) * 32


def smem_bytes(p) -> int:
    """STAGES x (transposed A tile with 4 floats of padding per row + B tile), float32."""
    return p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * p["BN"]) * 4


def _lanes_rule(p):
    if p["WM"] % p["TM"] or p["WN"] % p["TN"]:
        return f"the thread tile {p['TM']}x{p['TN']} must divide the warp tile {p['WM']}x{p['WN']}"
    lanes = (p["WM"] // p["TM"]) * (p["WN"] // p["TN"])
    if lanes != 32:
        return (f"a {p['WM']}x{p['WN']} warp tile of {p['TM']}x{p['TN']} thread tiles has {lanes} lanes, "
                "not 32: (WM/TM) * (WN/TN) must be 32")
    return None


def _a_copy_rule(p):
    t = threads(p)
    if t % 8 or p["BM"] % (t // 8):
        return (f"A's 4-byte copies: {t} threads cover {t // 8} rows per pass, which must divide BM={p['BM']}")
    return None


def _b_copy_rule(p):
    t, per_row = threads(p), p["BN"] // 4
    if t % per_row or (p["BK"] * per_row) % t:
        return (f"B's float4 copies: the {p['BK'] * per_row} float4 of a {p['BK']}x{p['BN']} tile must split "
                f"evenly over {t} threads, and {t} must be a multiple of the {per_row} float4 per row")
    return None


def _regs_rule(p):
    # TM*TN accumulators + two buffers of TM + TN fragment values, plus ~30 for addresses.
    need = p["TM"] * p["TN"] + 2 * (p["TM"] + p["TN"])
    if need > 200:
        return (f"TM*TN + 2*(TM+TN) = {need} live values: with addresses they exceed the 255 registers "
                "a thread may use (they would spill to local memory)")
    return None


def _split_rule(p, M, N, K):
    tiles = cdiv(M, p["BM"]) * cdiv(N, p["BN"])
    if p["SPLITK"] > 1 and tiles > 65536:
        return f"split-K keeps one counter per output tile, at most 65536; this shape has {tiles} tiles"
    return None


def label(p) -> str:
    out = (f"{p['BM']}x{p['BN']}x{p['BK']} w{p['WM']}x{p['WN']} t{p['TM']}x{p['TN']} "
           f"s{p['STAGES']}")
    if p["SPLITK"] > 1:
        out += f" k/{p['SPLITK']}"
    if p["GROUP"]:
        out += f" g{p['GROUP']}"
    return out


SPEC = register(
    KernelSpec(
        name="final",
        file="10_final.cu",
        function="sgemm_final",
        title="Final: warp tiles + cp.async pipeline",
        chapter="final",
        params=(
            Param("BM", 128, TILE_SIDES, "rows of C per block"),
            Param("BN", 256, TILE_SIDES, "columns of C per block"),
            Param("BK", 32, (8, 16, 32), "k-slice per pipeline stage"),
            Param("WM", 64, WARP_SIDES, "rows of C per warp"),
            Param("WN", 64, WARP_SIDES, "columns of C per warp"),
            Param("TM", 16, (4, 8, 16), "rows of C per thread (4x4 sub-tiles)"),
            Param("TN", 8, (4, 8, 16), "columns of C per thread (4x4 sub-tiles)"),
            Param("STAGES", 2, (2, 3, 4, 5), "shared-memory stages in the cp.async pipeline"),
            Param("SPLITK", 1, (1, 2, 3, 4, 6, 8), "blocks along K, added in a fixed order"),
            Param("GROUP", 8, (0, 4, 8, 16), "block-rows per rasterisation group (0: row by row)"),
        ),
        block=lambda p: (threads(p), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), p["SPLITK"]),
        smem_bytes=smem_bytes,
        rules=(divides("WM", "BM"), divides("WN", "BN"), _lanes_rule, _a_copy_rule, _b_copy_rule, _regs_rule),
        shape_rules=(int32_indices, _split_rule),
        label=label,
        tile=lambda p: (p["BM"], p["BN"]),
        summary="warp tiles fed by a multi-stage cp.async pipeline; grouped rasterisation; optional split-K",
    )
)

D = SPEC.defaults()
SQUARE = (1024, 2048, 4096)
# The shape suite the final chapter reports (M, N, K).
SUITE = ((1000, 3000, 777), (4097, 4097, 4097), (8192, 128, 8192), (128, 8192, 8192),
         (2048, 2048, 8192), (3000, 3000, 3000), (512, 512, 512))


def _chosen(shape):
    from ..final import choose_config

    return choose_config(*shape)


def _sweep():
    c4, c8 = _chosen((4096,) * 3), _chosen((8192,) * 3)
    items = ([(D, (n, n, n)) for n in SQUARE]
             + [(c4, (4096,) * 3), (c8, (8192,) * 3)]
             + [(_chosen(s), s) for s in SUITE]
             # one knob at a time around the choice: pipeline depth, rasterisation
             + [(dict(c4, STAGES=s), (4096,) * 3) for s in (2, 3, 4) if s != c4["STAGES"]]
             + [(dict(c8, GROUP=0), (8192,) * 3)])
    out = []
    for params, shape in items:      # the choice at 4096 may be the default: measure it once
        if (params, shape) not in out:
            out.append((params, shape))
    return out


# What `python -m helpers record --chapter final` measures: the default at the square
# sizes, and the per-shape choice (helpers/final.py, the single source) at 4096, 8192
# and every shape of the suite.
SWEEP = _sweep()
TEST_CONFIGS = [
    dict(D, BM=128, BN=128, WM=64, WN=64, TM=16, TN=8, BK=8, STAGES=4),      # 128 threads
    dict(D, BM=128, BN=256, WM=64, WN=64, TM=8, TN=16, BK=16, STAGES=3, GROUP=0),  # 8 x 16 thread tile
    dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=2),        # small tile, 4 warps
    dict(D, BM=128, BN=128, WM=64, WN=32, TM=8, TN=8, BK=8, SPLITK=3, STAGES=4),  # split-K, 8 warps
    dict(D, BM=128, BN=128, WM=64, WN=64, TM=16, TN=8, SPLITK=8, BK=32, STAGES=2),
]
