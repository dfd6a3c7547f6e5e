"""kernels/07_vectorized.cu: float4 loads, A's tile transposed (chapter "Vectorized float4 access")."""
from ..rules import divides, register_tile_min_blocks, register_tile_registers, tile_threads
from ..spec import KernelSpec, Param, Tiles, cdiv

SIZES = (32, 64, 128, 256)


def sweeps_whole_rows(p):
    # The threads sweep B's tile row by row in float4: a sweep must cover whole rows.
    if p["BM"] % p["TM"] or p["BN"] % p["TN"]:
        return None
    if tile_threads(p) % (p["BN"] // 4):
        return (f"the {tile_threads(p)} threads of a block load the B tile a row of float4 at a time, "
                f"so BN/4={p['BN'] // 4} float4 must not exceed them")
    return None


SPEC = KernelSpec(
    name="vectorized",
    file="07_vectorized.cu",
    function="sgemm_vectorized",
    title="float4 loads, transposed A tile",
    chapter="vectorized",
    params=(
        Param("BM", 128, SIZES, "rows of C per block"),
        Param("BN", 128, SIZES, "columns of C per block"),
        Param("BK", 16, (4, 8, 16, 32), "k-slice staged per step (multiple of 4: float4)"),
        Param("TM", 8, (4, 8, 16), "rows per thread (multiple of 4: float4)"),
        Param("TN", 8, (4, 8, 16), "columns per thread (multiple of 4: float4)"),
    ),
    block=lambda p: (tile_threads(p), 1, 1),
    grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    static_smem=lambda p: 4 * (p["BM"] + p["BN"]) * p["BK"],
    registers=register_tile_registers(vector=True),
    min_blocks=register_tile_min_blocks,
    load_width=4,
    # the 128 x 128 tile with 8 x 8 per thread is kernel 08's contiguous layout
    smem_layout=lambda p: (dict(BK=p["BK"], SPLIT=0, PAD=0, SWIZZLE=0)
                           if (p["BM"], p["BN"], p["TM"], p["TN"]) == (128, 128, 8, 8) else None),
    rules=(divides("TM", "BM"), divides("TN", "BN"), sweeps_whole_rows),
    label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
    summary="float4 global loads; A tile transposed so shared reads are LDS.128",
)
SPECS = [SPEC]

D = SPEC.defaults()
N4 = (4096, 4096, 4096)
SWEEP = (
    [(SPEC, D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    # alignment: K or N not a multiple of 4 takes the scalar path for A or B
    + [(SPEC, D, s) for s in ((4095, 4095, 4095), (4096, 4096, 4095), (4096, 4095, 4096), (4095, 4096, 4096))]
    + [(SPEC, dict(D, BK=bk), N4) for bk in (8, 32)]
    + [(SPEC, dict(D, BM=64, BN=128), N4), (SPEC, dict(D, BM=128, BN=64, TN=4), N4), (SPEC, dict(D, TM=16, TN=8), N4)]
)
TEST_CONFIGS = [(SPEC, dict(D, BM=64, BN=64, BK=4, TM=4, TN=4)), (SPEC, dict(D, BK=16, TN=4, BN=64)),
                (SPEC, dict(D, BK=8)), (SPEC, dict(D, BK=32, TM=16, TN=8))]
