"""kernels/04_smem_tiling.cu: TILE x TILE tiles staged in shared memory (chapter "Shared-memory tiling")."""
from ..rules import multiple_of
from ..spec import KernelSpec, Param, Tiles, cdiv

TILES = (8, 16, 32)


def grid(p, M, N, K, device):
    """(x, y, z) blocks, the same on every device; SWAP=1 (the default): x walks the rows of C."""
    rows, cols = cdiv(M, p["TILE"]), cdiv(N, p["TILE"])
    return (rows, cols, 1) if p.get("SWAP", 1) else (cols, rows, 1)


COMMON = dict(file="04_smem_tiling.cu", chapter="smem_tiling", block=lambda p: (p["TILE"], p["TILE"], 1),
              grid=grid, tiles=lambda p: Tiles(p["TILE"], p["TILE"], p["TILE"], 1, 1),
              static_smem=lambda p: 2 * p["TILE"] * p["TILE"] * 4)

SPEC = KernelSpec(
    name="smem_tiling", function="sgemm_smem_tiling", title="Shared-memory tiling",
    params=(Param("TILE", 32, TILES, "side of the square tile of C per block"),
            Param("SWAP", 1, (0, 1), "1: blockIdx.x walks rows of C")),
    label=lambda p: f"TILE={p['TILE']}" + ("" if p["SWAP"] else " columns-first"),
    summary="each block stages TILE x TILE tiles of A and B in shared memory",
    **COMMON)
UNGUARDED = KernelSpec(
    name="smem_tiling_unguarded", function="sgemm_smem_tiling_unguarded",
    title="Shared-memory tiling, no bounds checks",
    params=(Param("TILE", 32, TILES, "side of the square tile of C per block"),),
    shape_rules=tuple(multiple_of(d, "TILE", "the kernel has no bounds checks") for d in "MNK"),
    label=lambda p: f"TILE={p['TILE']} unguarded",
    summary="the textbook kernel without edge handling: only for multiples of TILE",
    **COMMON)
SPECS = [SPEC, UNGUARDED]

SWEEP = (
    [(SPEC, {"TILE": t, "SWAP": 1}, (n, n, n)) for t in TILES for n in (1024, 2048, 4096)]
    + [(SPEC, {"TILE": 32, "SWAP": 1}, (512, 512, 512))]
    + [(SPEC, {"TILE": t, "SWAP": 0}, (4096, 4096, 4096)) for t in TILES]
    # what the bounds checks cost: the same kernel without them, where it is allowed
    + [(UNGUARDED, {"TILE": t}, (4096, 4096, 4096)) for t in TILES]
    + [(UNGUARDED, {"TILE": 32}, (n, n, n)) for n in (1024, 2048)]
    # a shape that is not a tile multiple: the guarded kernel only
    + [(SPEC, {"TILE": 32, "SWAP": 1}, (4097, 4097, 4097))]
)
TEST_CONFIGS = [(SPEC, {"TILE": 8, "SWAP": 1}), (SPEC, {"TILE": 16, "SWAP": 0}),
                (SPEC, {"TILE": 32, "SWAP": 0}), (UNGUARDED, {"TILE": 8})]
