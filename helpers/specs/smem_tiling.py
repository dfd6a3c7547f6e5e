"""Spec for kernels/03_smem_tiling.cu (chapter "Shared-memory tiling")."""
from ..registry import KernelSpec, Param, cdiv, register

SPEC = register(
    KernelSpec(
        name="smem_tiling",
        file="03_smem_tiling.cu",
        function="sgemm_smem_tiling",
        title="Shared-memory tiling",
        chapter="smem_tiling",
        params=(Param("TILE", 32, (8, 16, 32), "side of the square tile of C per block"),
                Param("SWAP", 1, (0, 1), "1: blockIdx.x walks rows of C")),
        block=lambda p: (p["TILE"], p["TILE"], 1),
        grid=lambda p, M, N, K: ((cdiv(M, p["TILE"]), cdiv(N, p["TILE"]), 1) if p["SWAP"]
                                 else (cdiv(N, p["TILE"]), cdiv(M, p["TILE"]), 1)),
        label=lambda p: f"TILE={p['TILE']}" + ("" if p["SWAP"] else " columns-first"),
        tile=lambda p: (p["TILE"], p["TILE"]),
        summary="each block stages TILE x TILE tiles of A and B in shared memory",
    )
)

SWEEP = ([({"TILE": t, "SWAP": 1}, (n, n, n)) for t in (8, 16, 32) for n in (512, 1024, 2048, 4096)]
         + [({"TILE": t, "SWAP": 0}, (4096, 4096, 4096)) for t in (8, 16, 32)])
TEST_CONFIGS = [{"TILE": 8, "SWAP": 1}, {"TILE": 16, "SWAP": 0}, {"TILE": 32, "SWAP": 0}]
