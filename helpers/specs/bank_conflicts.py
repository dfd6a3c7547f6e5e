"""Spec for kernels/07_bank_conflicts.cu (chapter "Shared-memory bank conflicts")."""
from ..registry import KernelSpec, Param, cdiv, register


def _label(p):
    parts = ["split" if p["SPLIT"] else "contiguous"]
    if p["PAD"]:
        parts.append(f"pad {p['PAD']}")
    if p["SWIZZLE"]:
        parts.append("swizzle")
    return f"BK={p['BK']} " + ", ".join(parts)


SPEC = register(
    KernelSpec(
        name="bank_conflicts",
        file="07_bank_conflicts.cu",
        function="sgemm_bank_conflicts",
        title="Conflict-free shared memory",
        chapter="bank_conflicts",
        params=(
            Param("BK", 16, (8, 16), "k-slice per step"),
            Param("SPLIT", 1, (0, 1), "1: split the 8x8 thread tile into four 4x4 quadrants"),
            Param("PAD", 0, (0, 1, 2, 4), "floats of padding per row of the transposed A tile"),
            Param("SWIZZLE", 1, (0, 1), "1: XOR-swizzle the columns of the transposed A tile"),
        ),
        block=lambda p: (256, 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, 128), cdiv(M, 128), 1),
        rules=(lambda p: "PAD and SWIZZLE both fix the A store; pick one" if p["PAD"] and p["SWIZZLE"] else None,),
        label=_label,
        tile=lambda p: (128, 128),
        summary="128x128 tiles, 8x8 per thread; split thread tile, padding or swizzle against bank conflicts",
    )
)

# The layouts the chapter compares, for both k-slices.
VARIANTS = [
    dict(SPLIT=0, PAD=0, SWIZZLE=0),   # as 06: conflicted B reads and A stores
    dict(SPLIT=1, PAD=0, SWIZZLE=0),   # B reads fixed, A store still conflicted
    dict(SPLIT=1, PAD=1, SWIZZLE=0),   # rows 4-byte aligned: LDS.128 lost; store still conflicted
    dict(SPLIT=1, PAD=2, SWIZZLE=0),   # fixes the A store for BK=16; rows 8-byte aligned: LDS.64
    dict(SPLIT=1, PAD=4, SWIZZLE=0),   # aligned; fixes the A store for BK=8 only
    dict(SPLIT=1, PAD=0, SWIZZLE=1),   # XOR swizzle: conflict-free, aligned, no padding
]
D = SPEC.defaults()
SWEEP = ([(D, (n, n, n)) for n in (1024, 2048)]
         + [(dict(v, BK=bk), (4096, 4096, 4096)) for bk in (8, 16) for v in VARIANTS]
         + [(D, (4095, 4095, 4095))])
TEST_CONFIGS = [dict(v, BK=bk) for bk in (8, 16) for v in VARIANTS if dict(v, BK=bk) != D]
