"""kernels/02_naive.cu: one thread per element of C (chapter "The naive kernel")."""
from ..spec import KernelSpec, Param, Tiles, cdiv

SIDES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

SPEC = KernelSpec(
    name="naive",
    file="02_naive.cu",
    function="sgemm_naive",
    title="Naive (1 thread = 1 element)",
    chapter="naive",
    params=(
        Param("BX", 32, SIDES, "threads along x (rows of C)"),
        Param("BY", 32, SIDES, "threads along y (columns of C)"),
    ),
    block=lambda p: (p["BX"], p["BY"], 1),
    grid=lambda p, M, N, K, device: (cdiv(M, p["BX"]), cdiv(N, p["BY"]), 1),
    tiles=lambda p: Tiles(1, 1, 0, 1, 1),   # no reuse between threads: each reads its own row and column
    element=lambda x, y: (x, y),            # row = threadIdx.x, col = threadIdx.y
    label=lambda p: f"{p['BX']}x{p['BY']}",
    summary="one thread per element of C; x walks down rows",
)
SPECS = [SPEC]

# What `python -m helpers record --chapter naive` measures.
SWEEP = (
    [(SPEC, {"BX": 32, "BY": 32}, (n, n, n)) for n in (256, 512, 1024, 2048, 4096)]
    + [(SPEC, {"BX": bx, "BY": by}, (n, n, n))
       for n in (1024, 2048, 4096)
       for bx, by in ((8, 8), (16, 16), (32, 8), (8, 32), (64, 4), (4, 64))]
)
TEST_CONFIGS = [(SPEC, {"BX": 8, "BY": 32}), (SPEC, {"BX": 64, "BY": 4})]
