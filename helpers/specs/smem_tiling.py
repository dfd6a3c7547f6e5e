"""Specs for kernels/03_smem_tiling.cu (chapter "Shared-memory tiling")."""
from ..registry import KernelSpec, Param, cdiv, multiple_of, register

TILES = (8, 16, 32)


def _grid(p, M, N, K):
    rows, cols = cdiv(M, p["TILE"]), cdiv(N, p["TILE"])
    return (rows, cols, 1) if p.get("SWAP", 1) else (cols, rows, 1)


SPECS = [
    register(KernelSpec(
        name="smem_tiling",
        file="03_smem_tiling.cu",
        function="sgemm_smem_tiling",
        title="Shared-memory tiling",
        chapter="smem_tiling",
        params=(Param("TILE", 32, TILES, "side of the square tile of C per block"),
                Param("SWAP", 1, (0, 1), "1: blockIdx.x walks rows of C")),
        block=lambda p: (p["TILE"], p["TILE"], 1),
        grid=_grid,
        label=lambda p: f"TILE={p['TILE']}" + ("" if p["SWAP"] else " columns-first"),
        tile=lambda p: (p["TILE"], p["TILE"]),
        summary="each block stages TILE x TILE tiles of A and B in shared memory",
    )),
    register(KernelSpec(
        name="smem_tiling_unguarded",
        file="03_smem_tiling.cu",
        function="sgemm_smem_tiling_unguarded",
        title="Shared-memory tiling, no bounds checks",
        chapter="smem_tiling",
        params=(Param("TILE", 32, TILES, "side of the square tile of C per block"),),
        block=lambda p: (p["TILE"], p["TILE"], 1),
        grid=_grid,
        shape_rules=tuple(multiple_of(d, "TILE", "the kernel has no bounds checks") for d in "MNK"),
        label=lambda p: f"TILE={p['TILE']} unguarded",
        tile=lambda p: (p["TILE"], p["TILE"]),
        summary="the textbook kernel without edge handling: only for multiples of TILE",
    )),
]
SPEC = SPECS[0]

SWEEP = (
    [("smem_tiling", {"TILE": t, "SWAP": 1}, (n, n, n)) for t in TILES for n in (1024, 2048, 4096)]
    + [("smem_tiling", {"TILE": 32, "SWAP": 1}, (512, 512, 512))]
    + [("smem_tiling", {"TILE": t, "SWAP": 0}, (4096, 4096, 4096)) for t in TILES]
    # what the bounds checks cost: the same kernel without them, where it is allowed
    + [("smem_tiling_unguarded", {"TILE": t}, (4096, 4096, 4096)) for t in TILES]
    + [("smem_tiling_unguarded", {"TILE": 32}, (n, n, n)) for n in (1024, 2048)]
    # a shape that is not a tile multiple: the guarded kernel only
    + [("smem_tiling", {"TILE": 32, "SWAP": 1}, (4097, 4097, 4097))]
)
TEST_CONFIGS = [("smem_tiling", {"TILE": 8, "SWAP": 1}), ("smem_tiling", {"TILE": 16, "SWAP": 0}),
                ("smem_tiling", {"TILE": 32, "SWAP": 0}), ("smem_tiling_unguarded", {"TILE": 8})]
