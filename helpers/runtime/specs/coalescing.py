"""kernels/03_coalescing.cu: a warp along a row of C (chapter "Global-memory coalescing")."""
from ..spec import KernelSpec, Param, Tiles, cdiv

SIDES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def blocks_xy(p, M, N) -> tuple[int, int]:
    """Blocks along x and along y (SWAP=1: x walks the rows of C); the same on every device."""
    cols, rows = cdiv(N, p["BX"]), cdiv(M, p["BY"])
    return (rows, cols) if p["SWAP"] else (cols, rows)


def strips(p: dict, M: int, N: int) -> tuple[list[int], list[int]]:
    """Per block in launch order (blockIdx.x fastest): the row strip and column strip of C it owns."""
    gx, gy = blocks_xy(p, M, N)
    blocks = [(b % gx, b // gx) for b in range(gx * gy)]
    if p["SWAP"]:                                   # blockIdx.x walks the rows of C
        return [bx for bx, _ in blocks], [by for _, by in blocks]
    return [by for _, by in blocks], [bx for bx, _ in blocks]


SPEC = KernelSpec(
    name="coalescing",
    file="03_coalescing.cu",
    function="sgemm_coalescing",
    title="Coalesced (warp along a row of C)",
    chapter="coalescing",
    params=(
        Param("BX", 64, SIDES, "threads along x (columns of C)"),
        Param("BY", 4, SIDES, "threads along y (rows of C)"),
        Param("SWAP", 1, (0, 1), "1: blockIdx.x walks rows of C instead of columns"),
    ),
    block=lambda p: (p["BX"], p["BY"], 1),
    grid=lambda p, M, N, K, device: (*blocks_xy(p, M, N), 1),
    tiles=lambda p: Tiles(1, 1, 0, 1, 1),
    element=lambda x, y: (y, x),            # row = threadIdx.y, col = threadIdx.x
    label=lambda p: f"{p['BX']}x{p['BY']}" + (" swapped" if p["SWAP"] else ""),
    summary="threadIdx.x walks along a row of C, so a warp's B loads and C stores are contiguous",
)
SPECS = [SPEC]

# Block shapes of the n = 4096 experiment (both grid orders): why 8x8 is slow, which
# shape is best, and whether swapping the grid's M and N pays.
BLOCKS = ((8, 8), (16, 16), (32, 4), (32, 8), (32, 16), (32, 32), (64, 4), (128, 2), (256, 1))
# At n = 2048 the three matrices (48 MB) fit in the reference GPU's L2: if the swap helps
# through L2 capacity, its gain should vanish there.
BLOCKS_2048 = ((8, 8), (32, 8), (32, 32), (64, 4), (128, 2))
DEFAULT = SPEC.defaults()

SWEEP = (
    [(SPEC, DEFAULT, (n, n, n)) for n in (256, 512, 1024)]
    + [(SPEC, {"BX": bx, "BY": by, "SWAP": s}, (4096, 4096, 4096)) for s in (0, 1) for bx, by in BLOCKS]
    + [(SPEC, {"BX": bx, "BY": by, "SWAP": s}, (2048, 2048, 2048)) for s in (0, 1) for bx, by in BLOCKS_2048]
)
TEST_CONFIGS = [(SPEC, {"BX": 8, "BY": 8, "SWAP": 1}), (SPEC, {"BX": 32, "BY": 8, "SWAP": 0}),
                (SPEC, {"BX": 256, "BY": 1, "SWAP": 0})]
