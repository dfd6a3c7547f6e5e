"""Spec for kernels/03_smem_tiling.cu (chapter "Shared-memory tiling")."""
from ..registry import KernelSpec, Param, cdiv, register

SPEC = register(
    KernelSpec(
        name="smem_tiling",
        file="03_smem_tiling.cu",
        function="sgemm_smem_tiling",
        title="Shared-memory tiling",
        chapter="smem_tiling",
        params=(Param("TILE", 32, (8, 16, 32), "side of the square tile of C per block"),),
        block=lambda p: (p["TILE"], p["TILE"], 1),
        grid=lambda p, M, N, K: (cdiv(N, p["TILE"]), cdiv(M, p["TILE"]), 1),
        label=lambda p: f"TILE={p['TILE']}",
        tile=lambda p: (p["TILE"], p["TILE"]),
        summary="each block stages TILE x TILE tiles of A and B in shared memory",
    )
)

SWEEP = [({"TILE": t}, (n, n, n)) for t in (8, 16, 32) for n in (512, 1024, 2048, 4096)]
TEST_CONFIGS = [{"TILE": 8}, {"TILE": 16}]
