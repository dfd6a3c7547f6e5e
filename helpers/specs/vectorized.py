"""Spec for kernels/06_vectorized.cu (chapter "Vectorized float4 access")."""
from ..registry import KernelSpec, Param, cdiv, divides, register
from .thread_tile_2d import _regs_rule_for, _smem_rule, threads_of

SIZES = (32, 64, 128, 256)


def _loads_rule(p):
    # The threads sweep B's tile row by row in float4: a sweep must cover whole rows.
    if p["BM"] % p["TM"] or p["BN"] % p["TN"]:
        return None
    threads = threads_of(p)
    if threads % (p["BN"] // 4):
        return (f"the {threads} threads of a block load the B tile a row of float4 at a time, "
                f"so BN/4={p['BN'] // 4} float4 must not exceed them")
    return None


SPEC = register(
    KernelSpec(
        name="vectorized",
        file="06_vectorized.cu",
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
        block=lambda p: (threads_of(p), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"), divides("TN", "BN"), _smem_rule, _regs_rule_for(vector=True), _loads_rule),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
        tile=lambda p: (p["BM"], p["BN"]),
        summary="float4 global loads; A tile transposed so shared reads are LDS.128",
    )
)

D = SPEC.defaults()
N4 = (4096, 4096, 4096)
SWEEP = (
    [(D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    # alignment: K or N not a multiple of 4 takes the scalar path for A or B
    + [(D, (4095, 4095, 4095)), (D, (4096, 4096, 4095)), (D, (4096, 4095, 4096)), (D, (4095, 4096, 4096))]
    + [(dict(D, BK=bk), N4) for bk in (8, 32)]
    + [(dict(D, BM=64, BN=128), N4), (dict(D, BM=128, BN=64, TN=4), N4), (dict(D, TM=16, TN=8), N4)]
)
TEST_CONFIGS = [dict(D, BM=64, BN=64, BK=4, TM=4, TN=4), dict(D, BK=16, TN=4, BN=64),
                dict(D, BK=8), dict(D, BK=32, TM=16, TN=8)]
