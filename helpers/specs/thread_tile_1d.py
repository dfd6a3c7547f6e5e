"""Spec for kernels/04_thread_tile_1d.cu (chapter "1D thread tiles")."""
from ..registry import KernelSpec, Param, cdiv, divides, register

STATIC_SMEM_LIMIT = 48 * 1024


def threads(p: dict) -> int:
    """Threads per block: one per TM results of the BM x BN tile."""
    return p["BM"] * p["BN"] // p["TM"]


def smem_bytes(p: dict) -> int:
    """The two static tiles, As (BM, BK) and Bs (BK, BN)."""
    return 4 * (p["BM"] + p["BN"]) * p["BK"]


def _threads_rule(p):
    t = threads(p)
    if t > 1024:
        return (f"BM*BN/TM = {p['BM']}*{p['BN']}/{p['TM']} = {t} threads, more than the 1024 a block "
                f"can hold; raise TM to {p['BM'] * p['BN'] // 1024} or more, or shrink the tile")
    if t % 32:
        return (f"BM*BN/TM = {p['BM']}*{p['BN']}/{p['TM']} = {t} threads is not a whole number of "
                f"32-thread warps; lower TM or grow the tile")
    return None


def _smem_rule(p):
    if smem_bytes(p) > STATIC_SMEM_LIMIT:
        return (f"the tiles need 4*(BM+BN)*BK = {smem_bytes(p)} B of static shared memory, above the "
                f"48 KB static limit; lower BK")
    return None


SPEC = register(
    KernelSpec(
        name="thread_tile_1d",
        file="04_thread_tile_1d.cu",
        function="sgemm_thread_tile_1d",
        title="1D thread tiles",
        chapter="thread_tile_1d",
        params=(
            Param("BM", 64, (16, 32, 64, 128, 256), "rows of C per block"),
            Param("BN", 64, (16, 32, 64, 128, 256), "columns of C per block"),
            Param("BK", 32, (4, 8, 16, 32, 64), "k-slice staged per step"),
            Param("TM", 8, (1, 2, 4, 8, 16, 32), "results per thread (a column)"),
            Param("LOOP", 1, (0, 1), "1: k outer with B in a register; 0: dot product per result"),
        ),
        block=lambda p: (threads(p), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"), _threads_rule, _smem_rule),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} TM={p['TM']}" + ("" if p["LOOP"] else " dot-order"),
        tile=lambda p: (p["BM"], p["BN"]),
        summary="each thread computes TM results in a column; B values reused from a register",
    )
)

DEFAULT = SPEC.defaults()
N4096 = (4096, 4096, 4096)

SWEEP = (
    # the default against the previous chapter and cuBLAS
    [(DEFAULT, (n, n, n)) for n in (512, 1024, 2048)]
    # results per thread x k-slice on the 64 x 64 block tile (includes the default)
    + [(dict(DEFAULT, TM=tm, BK=bk), N4096) for tm in (4, 8, 16) for bk in (8, 16, 32, 64)]
    # the loop order the compiler sees (chapter: same machine code)
    + [(dict(DEFAULT, LOOP=0), N4096), (dict(DEFAULT, BK=8, LOOP=0), N4096)]
    # taller and wider block tiles
    + [(dict(DEFAULT, BM=128, BN=64, BK=16, TM=16), N4096),
       (dict(DEFAULT, BM=128, BN=64, BK=32, TM=16), N4096),
       (dict(DEFAULT, BM=128, BN=128, BK=8, TM=32), N4096)]
)
TEST_CONFIGS = [dict(DEFAULT, LOOP=0), dict(DEFAULT, BK=8), dict(DEFAULT, BM=128, BN=32, BK=16, TM=4),
                dict(DEFAULT, BM=32, BN=16, BK=4, TM=16)]
