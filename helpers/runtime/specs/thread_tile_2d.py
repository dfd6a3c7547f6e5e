"""kernels/06_thread_tile_2d.cu: a TM x TN tile of C per thread (chapter "2D thread tiles")."""
from ..rules import divides, register_tile_min_blocks, register_tile_registers, tile_threads
from ..spec import KernelSpec, Param, Tiles, cdiv

SIZES = (16, 32, 64, 128, 256)


def sweeps_whole_rows(p):
    # The block's threads sweep B's BK x BN tile row by row: a sweep must cover whole rows.
    if p["BM"] % p["TM"] or p["BN"] % p["TN"]:
        return None
    if tile_threads(p) % p["BN"]:
        return (f"the {tile_threads(p)} threads of a block load the B tile a row at a time, "
                f"so BN={p['BN']} columns must not exceed them")
    return None


SPEC = KernelSpec(
    name="thread_tile_2d",
    file="06_thread_tile_2d.cu",
    function="sgemm_thread_tile_2d",
    title="2D thread tiles",
    chapter="thread_tile_2d",
    params=(
        Param("BM", 128, SIZES, "rows of C per block"),
        Param("BN", 128, SIZES, "columns of C per block"),
        Param("BK", 16, (4, 8, 16, 32), "k-slice staged per step"),
        Param("TM", 8, (1, 2, 4, 8, 16), "rows per thread"),
        Param("TN", 8, (1, 2, 4, 8, 16), "columns per thread"),
    ),
    block=lambda p: (tile_threads(p), 1, 1),
    grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    static_smem=lambda p: 4 * (p["BM"] + p["BN"]) * p["BK"],
    registers=register_tile_registers(vector=False),
    min_blocks=register_tile_min_blocks,
    rules=(divides("TM", "BM"), divides("TN", "BN"), sweeps_whole_rows),
    label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
    summary="each thread computes a TM x TN tile from registers (outer products)",
)
SPECS = [SPEC]

D = SPEC.defaults()
N4 = (4096, 4096, 4096)
SWEEP = (
    [(SPEC, D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    # thread tile sizes on 64x64 and 128x128 blocks
    + [(SPEC, dict(D, BM=64, BN=64, TM=t, TN=t), N4) for t in (2, 4, 8)]
    + [(SPEC, dict(D, TM=4, TN=4), N4), (SPEC, dict(D, TM=8, TN=4), N4), (SPEC, dict(D, TM=4, TN=8), N4),
       (SPEC, dict(D, TM=16, TN=8), N4)]
    # block tile and k-slice
    + [(SPEC, dict(D, BM=64, BN=128), N4), (SPEC, dict(D, BM=128, BN=64), N4)]
    + [(SPEC, dict(D, BK=bk), N4) for bk in (4, 8, 32)]
    # the same config on a shape that is not a multiple of anything
    + [(SPEC, D, (4095, 4095, 4095))]
)
TEST_CONFIGS = [(SPEC, dict(D, BM=64, BN=64, BK=16, TM=4, TN=4)), (SPEC, dict(D, BM=128, BN=64, BK=8, TM=8, TN=4)),
                (SPEC, dict(D, BM=64, BN=64, BK=8, TM=2, TN=2)), (SPEC, dict(D, BK=32, TM=16, TN=8))]
