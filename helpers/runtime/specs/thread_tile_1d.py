"""kernels/05_thread_tile_1d.cu: TM results per thread in a column (chapter "1D thread tiles")."""
from ..rules import divides
from ..spec import KernelSpec, Param, Tiles, cdiv


def threads(p: dict) -> int:
    """One thread per TM results of the BM x BN tile."""
    return p["BM"] * p["BN"] // p["TM"]


def loads(p: dict) -> tuple[int, int]:
    """(A loads, B loads) per thread per k-slice: the tiles split over the threads."""
    t = threads(p)
    return cdiv(p["BM"] * p["BK"], t), cdiv(p["BK"] * p["BN"], t)


def registers(p: dict) -> int:
    """Registers a thread needs: a linear fit to the offline compile of every config the other
    rules allow (scripts/calibrate_registers.py). TM accumulators; the loads in flight (the
    compiler issues a whole k-slice's loads before storing any); with k outer (LOOP=1) the
    compiler also keeps values of A across a slice, about TM * BK / 8. Plus 8 for safety,
    except for 1024-thread blocks: the compiler then fits the kernel into its 64 registers by
    recomputing addresses, and spills a few words at most where the fit says it is short."""
    reuse = p["TM"] * p["BK"] / 8 if p["LOOP"] else p["TM"]
    margin = 0 if threads(p) == 1024 else 8
    return round(1.63 * p["TM"] + 2.59 * sum(loads(p)) + 0.23 * reuse + 29) + margin


SPEC = KernelSpec(
    name="thread_tile_1d",
    file="05_thread_tile_1d.cu",
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
    grid=lambda p, M, N, K, device: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
    tiles=lambda p: Tiles(p["BM"], p["BN"], p["BK"], p["TM"], 1),
    static_smem=lambda p: 4 * (p["BM"] + p["BN"]) * p["BK"],
    registers=registers,
    rules=(divides("TM", "BM"),),
    label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} TM={p['TM']}" + ("" if p["LOOP"] else " dot-order"),
    summary="each thread computes TM results in a column; B values reused from a register",
)
SPECS = [SPEC]

D = SPEC.defaults()
N4096 = (4096, 4096, 4096)
SWEEP = (
    # the default against the previous chapter and cuBLAS
    [(SPEC, D, (n, n, n)) for n in (512, 1024, 2048)]
    # results per thread x k-slice on the 64 x 64 block tile (includes the default)
    + [(SPEC, dict(D, TM=tm, BK=bk), N4096) for tm in (4, 8, 16) for bk in (8, 16, 32, 64)]
    # the loop order the compiler sees
    + [(SPEC, dict(D, LOOP=0, BK=bk), N4096) for bk in (8, 16, 32, 64)]
    # taller and wider block tiles
    + [(SPEC, dict(D, BM=128, BN=64, BK=16, TM=16), N4096),
       (SPEC, dict(D, BM=128, BN=64, BK=32, TM=16), N4096),
       (SPEC, dict(D, BM=128, BN=128, BK=8, TM=32), N4096)]
)
TEST_CONFIGS = [(SPEC, dict(D, LOOP=0)), (SPEC, dict(D, BK=8)), (SPEC, dict(D, BM=128, BN=32, BK=16, TM=4)),
                (SPEC, dict(D, BM=32, BN=16, BK=4, TM=16))]
