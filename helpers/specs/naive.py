"""Spec for kernels/01_naive.cu (chapter "The naive kernel")."""
from ..registry import KernelSpec, Param, cdiv, register

BLOCK_SIDES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

SPEC = register(
    KernelSpec(
        name="naive",
        file="01_naive.cu",
        function="sgemm_naive",
        title="Naive (1 thread = 1 element)",
        chapter="naive",
        params=(
            Param("BX", 32, BLOCK_SIDES, "threads along x (rows of C)"),
            Param("BY", 32, BLOCK_SIDES, "threads along y (columns of C)"),
        ),
        block=lambda p: (p["BX"], p["BY"], 1),
        grid=lambda p, M, N, K: (cdiv(M, p["BX"]), cdiv(N, p["BY"]), 1),
        label=lambda p: f"{p['BX']}x{p['BY']}",
        tile=lambda p: (1, 1),  # no reuse between threads is modelled: each reads its own row and column
        summary="one thread per element of C; x walks down rows",
    )
)

# What `python -m helpers record --chapter naive` measures: (params, (M, N, K)).
SWEEP = (
    [({"BX": 32, "BY": 32}, (n, n, n)) for n in (256, 512, 1024, 2048, 4096)]
    + [({"BX": bx, "BY": by}, (n, n, n))
       for n in (1024, 2048, 4096)
       for bx, by in ((8, 8), (16, 16), (32, 8), (8, 32), (64, 4), (4, 64))]
)
