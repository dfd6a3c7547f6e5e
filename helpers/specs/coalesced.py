"""Spec for kernels/02_coalesced.cu (chapter "Global-memory coalescing")."""
from ..registry import KernelSpec, Param, cdiv, register

SIDES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _grid(p, M, N, K):
    cols, rows = cdiv(N, p["BX"]), cdiv(M, p["BY"])
    return (rows, cols, 1) if p["SWAP"] else (cols, rows, 1)


SPEC = register(
    KernelSpec(
        name="coalesced",
        file="02_coalesced.cu",
        function="sgemm_coalesced",
        title="Coalesced (warp along a row of C)",
        chapter="coalescing",
        params=(
            Param("BX", 64, SIDES, "threads along x (columns of C)"),
            Param("BY", 4, SIDES, "threads along y (rows of C)"),
            Param("SWAP", 1, (0, 1), "1: blockIdx.x walks rows of C instead of columns"),
        ),
        block=lambda p: (p["BX"], p["BY"], 1),
        grid=_grid,
        label=lambda p: f"{p['BX']}x{p['BY']}" + (" swapped" if p["SWAP"] else ""),
        tile=lambda p: (1, 1),
        summary="threadIdx.x walks along a row of C, so a warp's B loads and C stores are contiguous",
    )
)

# Block shapes of the n = 4096 experiment (both grid orders): why 8x8 is slow, which
# shape is best, and whether swapping the grid's M and N pays.
BLOCKS = ((8, 8), (16, 16), (32, 4), (32, 8), (32, 16), (32, 32), (64, 4), (128, 2), (256, 1))
# At n = 2048 all three matrices (48 MB) fit in the 60 MB L2: if the swap helps through
# L2 capacity, its gain should vanish there. Both grid orders for a few shapes.
BLOCKS_2048 = ((8, 8), (32, 8), (32, 32), (64, 4), (128, 2))
DEFAULT = {"BX": 64, "BY": 4, "SWAP": 1}

SWEEP = (
    [(DEFAULT, (n, n, n)) for n in (256, 512, 1024)]
    + [({"BX": bx, "BY": by, "SWAP": s}, (4096, 4096, 4096)) for s in (0, 1) for bx, by in BLOCKS]
    + [({"BX": bx, "BY": by, "SWAP": s}, (2048, 2048, 2048)) for s in (0, 1) for bx, by in BLOCKS_2048]
)
TEST_CONFIGS = [{"BX": 8, "BY": 8, "SWAP": 1}, {"BX": 32, "BY": 8, "SWAP": 0}, {"BX": 256, "BY": 1, "SWAP": 0}]
