"""kernels/08_bank_conflicts.cu: six shared-memory layouts of one kernel (chapter "Bank conflicts").

The layout functions below are the kernel's own index math; the bank model
(:mod:`helpers.models.banks`) builds every shared-memory access from them.
"""
from ...hardware import WARP_SIZE
from ..rules import register_tile_registers
from ..spec import KernelSpec, Param, Tiles, cdiv

BM = BN = 128
TM = TN = 8
THREADS = 256


def rows_per_warp_store(BK: int) -> int:
    """Rows of A one warp stores at once: its lanes cover BK/4 float4 per row."""
    return WARP_SIZE // (BK // 4)


def a_column(p: dict, k: int, m: int) -> int:
    """Column of As where element (k, m) of the transposed A tile lives (XOR swizzle or not)."""
    return m ^ ((k // 4) * rows_per_warp_store(p["BK"]) % WARP_SIZE) if p["SWIZZLE"] else m


def thread_row(p: dict, trow: int, g: int) -> int:
    """First of the four rows of group g (0 or 1) of thread row trow."""
    return trow * 4 + g * (BM // 2) if p["SPLIT"] else trow * TM + g * 4


def thread_col(p: dict, tcol: int, g: int) -> int:
    return tcol * 4 + g * (BN // 2) if p["SPLIT"] else tcol * TN + g * 4


def fragments(p: dict) -> tuple[list, list]:
    """Byte offsets each lane's LDS.128 reads at k = 0: thread (trow, tcol) = (tid / 16, tid % 16)
    reads its two groups of 4 rows of A and of 4 columns of B."""
    a = [[4 * thread_row(p, lane // 16, g) for lane in range(WARP_SIZE)] for g in range(2)]
    b = [[4 * thread_col(p, lane % 16, g) for lane in range(WARP_SIZE)] for g in range(2)]
    return a, b


def label(p):
    parts = ["split" if p["SPLIT"] else "contiguous"]
    if p["PAD"]:
        parts.append(f"pad {p['PAD']}")
    if p["SWIZZLE"]:
        parts.append("swizzle")
    return f"BK={p['BK']} " + ", ".join(parts)


SPEC = KernelSpec(
    name="bank_conflicts",
    file="08_bank_conflicts.cu",
    function="sgemm_bank_conflicts",
    title="Conflict-free shared memory",
    chapter="bank_conflicts",
    params=(
        Param("BK", 16, (8, 16), "k-slice per step"),
        Param("SPLIT", 1, (0, 1), "1: split the 8x8 thread tile into four 4x4 quadrants"),
        Param("PAD", 0, (0, 1, 2, 4), "floats of padding per row of the transposed A tile"),
        Param("SWIZZLE", 1, (0, 1), "1: XOR-swizzle the columns of the transposed A tile"),
    ),
    block=lambda p: (THREADS, 1, 1),
    grid=lambda p, M, N, K, device: (cdiv(N, BN), cdiv(M, BM), 1),
    tiles=lambda p: Tiles(BM, BN, p["BK"], TM, TN),
    static_smem=lambda p: 4 * (p["BK"] * (BM + p["PAD"]) + p["BK"] * BN),
    registers=lambda p: register_tile_registers(vector=True)(dict(BM=BM, BN=BN, BK=p["BK"], TM=TM, TN=TN)),
    min_blocks=lambda p: 2,
    load_width=4,
    smem_layout=lambda p: {k: p[k] for k in ("BK", "SPLIT", "PAD", "SWIZZLE")},
    fragments=fragments,
    rules=(lambda p: "PAD and SWIZZLE both fix the A store; pick one" if p["PAD"] and p["SWIZZLE"] else None,),
    label=label,
    summary="128x128 tiles, 8x8 per thread; split thread tile, padding or swizzle against bank conflicts",
)
SPECS = [SPEC]

# The layouts the chapter compares, for both k-slices.
VARIANTS = {
    "contiguous (as 07)": dict(SPLIT=0, PAD=0, SWIZZLE=0),   # conflicted B reads and A stores
    "split": dict(SPLIT=1, PAD=0, SWIZZLE=0),                # B reads fixed, A store still conflicted
    "split + pad 1": dict(SPLIT=1, PAD=1, SWIZZLE=0),        # rows 4-byte aligned: LDS.128 lost
    "split + pad 2": dict(SPLIT=1, PAD=2, SWIZZLE=0),        # fixes the A store for BK=16; LDS.64
    "split + pad 4": dict(SPLIT=1, PAD=4, SWIZZLE=0),        # aligned; fixes the A store for BK=8 only
    "split + swizzle": dict(SPLIT=1, PAD=0, SWIZZLE=1),      # conflict-free, aligned, no padding
}
D = SPEC.defaults()
SWEEP = ([(SPEC, D, (n, n, n)) for n in (1024, 2048)]
         + [(SPEC, dict(v, BK=bk), (4096, 4096, 4096)) for bk in (8, 16) for v in VARIANTS.values()]
         + [(SPEC, D, (4095, 4095, 4095))])
TEST_CONFIGS = [(SPEC, dict(v, BK=bk)) for bk in (8, 16) for v in VARIANTS.values() if dict(v, BK=bk) != D]
