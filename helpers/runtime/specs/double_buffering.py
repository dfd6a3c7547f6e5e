"""kernels/09_double_buffering.cu: two shared stages, the next tile prefetched into registers
(chapter "Double buffering"). Two specs of one kernel: with the barrier after the first
tile, and without it (kept because it is racy: the chapter studies the race)."""
from ..rules import register_tile_parts
from ..spec import KernelSpec, Param, Tiles, cdiv
from . import bank_conflicts

BM = BN = 128
TM = TN = 8


def registers(p):
    """The 2D-tile model with two register fragments of TM + TN (double-buffered) and the next
    tile's float4 held across the whole k-slice. Fitted to the offline compile: at BK = 8 the
    kernel needs all 128 registers two blocks per SM allow; at BK = 16 it spills (80 bytes)."""
    parts = register_tile_parts(dict(BM=BM, BN=BN, BK=p["BK"], TM=TM, TN=TN), vector=True)
    return parts["accumulators"] + 2 * (TM + TN) + parts["in flight"] + 24


def register_roles(p):
    """``acc[TM][TN]``, two fragments ``a[2][TM]``, ``b[2][TN]``, and the next tile's
    ``float4 ra[A_LOADS], rb[B_LOADS]`` held through the k-slice."""
    return {"accumulators": TM * TN, "A values": 2 * TM, "B values": 2 * TN,
            "next tile (staging)": p["BK"] * (BM + BN) // 256}


FAST_PATH = Param("FAST_PATH", 0, (0, 1), "1: no checks at the edges (shapes of whole tiles, aligned operands)")
WHY_FAST = "FAST_PATH = 1 has no checks at the edges of A and B (FAST_PATH = 0 has)"


def choose(M: int, N: int, K: int, device=None) -> dict:
    """The fast path wherever the shape is made of whole tiles (the operands' alignment is
    checked at launch), the checked loads everywhere else."""
    return {"FAST_PATH": int(M % BM == 0 and N % BN == 0 and K % 8 == 0)}


def fast_path_rule(p, M, N, K):
    if not p["FAST_PATH"]:
        return None
    bad = [f"{d}={v} is not a multiple of {m}" for d, v, m in (("M", M, BM), ("N", N, BN), ("K", K, p["BK"])) if v % m]
    return "; ".join(bad) or None


fast_path_rule.why = WHY_FAST
COMMON = dict(file="09_double_buffering.cu", register_roles=register_roles, function="sgemm_double_buffering", chapter="double_buffering",
              block=lambda p: (256, 1, 1), grid=lambda p, M, N, K, device: (cdiv(N, BN), cdiv(M, BM), 1),
              tiles=lambda p: Tiles(BM, BN, p["BK"], TM, TN),
              static_smem=lambda p: 2 * 2 * p["BK"] * 128 * 4,
              registers=registers, min_blocks=lambda p: 2, int32_indices=False, load_width=4,
              shape_rules=(fast_path_rule,), aligned_operands=lambda p: bool(p["FAST_PATH"]),
              # kernel 08's split thread tile with the XOR-swizzled A tile
              smem_layout=lambda p: dict(BK=p["BK"], SPLIT=1, PAD=0, SWIZZLE=1),
              fragments=lambda p: bank_conflicts.fragments(dict(BK=p["BK"], SPLIT=1, PAD=0, SWIZZLE=1)))

SPEC = KernelSpec(
    name="double_buffering", title="Double buffering (2 shared stages, register prefetch)",
    params=(Param("BK", 8, (8, 16), "k-slice per step"),
            Param("FIXED", 1, (1,), "1: the barrier after the first tile is there"),
            FAST_PATH),
    label=lambda p: f"BK={p['BK']}" + (", fast path" if p["FAST_PATH"] else ""),
    summary="load the next tile into registers while computing on the current shared-memory stage",
    choose=choose, **COMMON)
RACY = KernelSpec(
    name="double_buffering_racy", title="Double buffering, racy (one barrier missing)",
    params=(Param("BK", 8, (8, 16), "k-slice per step"),
            Param("FIXED", 0, (0,), "0: the barrier after the first tile is missing"),
            FAST_PATH),
    label=lambda p: f"BK={p['BK']} racy",
    broken="no barrier between storing the first tile and computing on it: a shared-memory race",
    summary="the same kernel without the barrier after the first tile, kept to study the race",
    **COMMON)
SPECS = [SPEC, RACY]

SIZES = (1024, 2048, 4096)
SWEEP = (
    [(SPEC, {"BK": 8}, (n, n, n)) for n in SIZES]
    + [(SPEC, {"BK": 8, "FAST_PATH": 1}, (n, n, n)) for n in SIZES]
    + [(RACY, {"BK": 8}, (n, n, n)) for n in SIZES]
)
TEST_CONFIGS = [(SPEC, {"BK": 8, "FAST_PATH": 1})]     # BK = 16 spills: the register rule refuses it
