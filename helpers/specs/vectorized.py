"""Spec for kernels/06_vectorized.cu (chapter "Vectorized float4 access")."""
from ..registry import KernelSpec, Param, cdiv, divides, register
from .thread_tile_2d import _regs_rule, _smem_rule

SIZES = (32, 64, 128, 256)

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
            Param("BK", 16, (4, 8, 16, 32), "k-slice staged per step"),
            Param("TM", 8, (4, 8, 16), "rows per thread (multiple of 4: float4)"),
            Param("TN", 8, (4, 8, 16), "columns per thread (multiple of 4: float4)"),
        ),
        block=lambda p: ((p["BM"] // p["TM"]) * (p["BN"] // p["TN"]), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"), divides("TN", "BN"), _smem_rule, _regs_rule),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
        tile=lambda p: (p["BM"], p["BN"]),
        summary="float4 global loads; A tile transposed so shared reads are LDS.128",
    )
)

D = SPEC.defaults()
SWEEP = (
    [(D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    + [(D, (4095, 4095, 4095)), (D, (4096, 4096, 4095)), (D, (4095, 4096, 4096))]
    + [(dict(D, BK=8), (4096, 4096, 4096)), (dict(D, BM=64, BN=128), (4096, 4096, 4096)),
       (dict(D, BM=128, BN=64, TM=8, TN=4), (4096, 4096, 4096))]
)
TEST_CONFIGS = [dict(D, BM=64, BN=64, BK=4, TM=4, TN=4), dict(D, BK=16, TN=4, BN=64)]
