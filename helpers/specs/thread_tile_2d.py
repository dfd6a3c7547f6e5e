"""Spec for kernels/05_thread_tile_2d.cu (chapter "2D thread tiles")."""
from ..registry import KernelSpec, Param, cdiv, divides, register

SIZES = (16, 32, 64, 128, 256)


def _smem_rule(p):
    b = 4 * (p["BM"] + p["BN"]) * p["BK"]
    return f"static shared memory {b} B exceeds the 48 KB limit" if b > 48 * 1024 else None


def _regs_rule(p):
    # TM*TN accumulators + TM + TN operands must fit the 255 registers a thread may have.
    need = p["TM"] * p["TN"] + p["TM"] + p["TN"]
    return (f"TM*TN + TM + TN = {need} live values exceed the 255 registers a thread may use "
            "(they would spill to local memory)") if need > 200 else None


SPEC = register(
    KernelSpec(
        name="thread_tile_2d",
        file="05_thread_tile_2d.cu",
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
        block=lambda p: ((p["BM"] // p["TM"]) * (p["BN"] // p["TN"]), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"), divides("TN", "BN"), _smem_rule, _regs_rule),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
        tile=lambda p: (p["BM"], p["BN"]),
        summary="each thread computes a TM x TN tile from registers (outer products)",
    )
)

D = SPEC.defaults()
SWEEP = (
    [(D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    + [(dict(D, BM=64, BN=64, TM=t, TN=t), (4096, 4096, 4096)) for t in (2, 4)]
    + [(dict(D, TM=8, TN=4), (4096, 4096, 4096)), (dict(D, TM=4, TN=8), (4096, 4096, 4096))]
    + [(dict(D, BM=64, BN=64), (4096, 4096, 4096)), (dict(D, BM=64, BN=128), (4096, 4096, 4096)),
       (dict(D, BK=8), (4096, 4096, 4096)), (dict(D, BK=4), (4096, 4096, 4096)),
       (dict(D, BM=128, BN=128, TM=16, TN=8), (4096, 4096, 4096))]
)
TEST_CONFIGS = [dict(D, BM=64, BN=64, BK=16, TM=4, TN=4), dict(D, BM=128, BN=64, BK=8, TM=8, TN=4)]
