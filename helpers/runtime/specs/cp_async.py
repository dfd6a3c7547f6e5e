"""kernels/09_cp_async.cu: a multi-stage cp.async pipeline (chapter "Double buffering")."""
from ..rules import register_tile_registers
from ..spec import KernelSpec, Param, Tiles, cdiv

BM = BN = 128
TM = TN = 8


def smem_bytes(p: dict) -> int:
    """STAGES tiles of A (128 x BK) and B (BK x 128), dynamic."""
    return p["STAGES"] * (BM * p["BK"] + p["BK"] * BN) * 4


def registers(p):
    # 8 x 8 accumulators, 4 k of each of the 8 rows of A (row-major tile) and 8 of B, addresses
    return TM * TN + 4 * TM + TN + 24


SPEC = KernelSpec(
    name="cp_async",
    file="09_cp_async.cu",
    function="sgemm_cp_async",
    title="cp.async pipeline",
    chapter="double_buffering",
    params=(Param("BK", 16, (8, 16, 32), "k-slice per stage"),
            Param("STAGES", 3, (2, 3, 4), "pipeline depth: tiles in shared memory at once")),
    block=lambda p: (256, 1, 1),
    grid=lambda p, M, N, K, device: (cdiv(N, BN), cdiv(M, BM), 1),
    tiles=lambda p: Tiles(BM, BN, p["BK"], TM, TN),
    smem_bytes=smem_bytes,
    registers=registers,
    min_blocks=lambda p: 2,
    uses_cp_async=True,
    # A's tile is row-major: a thread reads 4 consecutive k of each of its TM rows at once
    # (a4[TM][4]) and one b[TN]; the tiles travel without registers
    register_roles=lambda p: {"accumulators": TM * TN, "A values": 4 * TM, "B values": TN, "next tile (staging)": 0},
    load_width=4,
    int32_indices=False,
    label=lambda p: f"BK={p['BK']}, {p['STAGES']} stages",
    summary="a multi-stage cp.async pipeline: global -> shared memory without registers",
)
SPECS = [SPEC]

SIZES = (1024, 2048, 4096)
SWEEP = (
    [(SPEC, {"BK": 16, "STAGES": s}, (n, n, n)) for s in (2, 3, 4) for n in SIZES]
    + [(SPEC, {"BK": bk, "STAGES": s}, (4096, 4096, 4096)) for bk in (8, 32) for s in (2, 3, 4)]
)
TEST_CONFIGS = [(SPEC, {"BK": 8, "STAGES": 2}), (SPEC, {"BK": 32, "STAGES": 4})]
