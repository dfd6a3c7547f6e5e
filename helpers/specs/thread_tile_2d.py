"""Spec for kernels/05_thread_tile_2d.cu (chapter "2D thread tiles")."""
from ..registry import KernelSpec, Param, cdiv, divides, register

SIZES = (16, 32, 64, 128, 256)


def threads_of(p) -> int:
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def register_budget(threads: int) -> int:
    """Registers a thread may use: blocks of up to 256 threads ask for 2 blocks per SM
    (``__launch_bounds__(threads, 2)``), larger ones for 1; 65536 per SM, at most 255."""
    min_blocks = 2 if threads <= 256 else 1
    return min(255, 65536 // (threads * min_blocks) // 8 * 8)


def _smem_rule(p):
    b = 4 * (p["BM"] + p["BN"]) * p["BK"]
    return f"static shared memory {b} B exceeds the 48 KB limit" if b > 48 * 1024 else None


def loads_per_thread(p: dict, vector: bool) -> tuple[int, int]:
    """(A loads, B loads) one thread issues per k-slice: the threads sweep each tile
    row by row, ``width`` consecutive threads per row (width in floats, or float4)."""
    threads, w = threads_of(p), (4 if vector else 1)
    a_step = max(1, threads // (p["BK"] // w))
    b_step = max(1, threads // (p["BN"] // w))
    return -(-p["BM"] // a_step), -(-p["BK"] // b_step)


def register_parts(p: dict, vector: bool = False) -> dict:
    """What a thread keeps in registers, by kind (a model, checked against the compiler).

    * ``accumulators``: TM * TN results;
    * ``operands``: the values of A and B one k step multiplies. Kernel 06 reads TM + TN.
      Kernel 05 stores A untransposed, and the compiler reads four consecutive k of each
      of the TM rows with one LDS.128: 4 * TM values of A stay live, plus TN of B;
    * ``in flight``: loaded from global memory, waiting to be stored to shared memory
      (06: every float4; 05: at most about 12 floats, the compiler stores some before
      it loads the rest);
    * ``other``: indices, addresses, the loop counter (16 for 06, 10 for 05).

    Calibrated against the offline compile of every config the rules allow: none spills.
    """
    a, b = loads_per_thread(p, vector)
    return {"accumulators": p["TM"] * p["TN"],
            "operands": p["TM"] + p["TN"] if vector else 4 * p["TM"] + p["TN"],
            "in flight": 4 * (a + b) if vector else min(a + b, 12),
            "other": 16 if vector else 10}


def registers_needed(p: dict, vector: bool = False) -> int:
    """A lower bound on the registers a thread needs: the sum of :func:`register_parts`."""
    return sum(register_parts(p, vector).values())


def _regs_rule_for(vector: bool):
    def rule(p):
        if p["BM"] % p["TM"] or p["BN"] % p["TN"]:
            return None                      # the divisibility rules already complain
        threads = threads_of(p)
        parts = register_parts(p, vector)
        need = sum(parts.values())
        budget = register_budget(threads)
        if need > budget:
            return (f"a {p['TM']}x{p['TN']} thread tile needs about {need} registers per thread "
                    f"({parts['accumulators']} accumulators, {parts['operands']} operands, "
                    f"{parts['in flight']} loaded values in flight, addresses), but with {threads} threads "
                    f"per block a thread may use at most {budget} (the rest would spill to local memory)")
        return None
    return rule


_regs_rule = _regs_rule_for(vector=False)


def _loads_rule(p):
    # The block's threads sweep B's BK x BN tile row by row: a sweep must cover whole rows.
    if p["BM"] % p["TM"] or p["BN"] % p["TN"]:
        return None
    threads = threads_of(p)
    if threads % p["BN"]:
        return (f"the {threads} threads of a block load the B tile a row at a time, "
                f"so BN={p['BN']} columns must not exceed them")
    return None


SPEC = register(
    KernelSpec(
        name="thread_tile_2d",
        file="05_thread_tile_2d.cu",
        function="sgemm_thread_tile_2d",
        title="2D thread tiles",
        chapter="thread_tile_2d",
        params=(
            Param("BM", 128, SIZES, "rows of C per block"),
            Param("BN", 128, SIZES, "columns of C per block"),
            Param("BK", 16, (4, 8, 16, 32), "k-slice staged per step"),
            Param("TM", 8, (1, 2, 4, 8, 16), "rows per thread"),
            Param("TN", 8, (1, 2, 4, 8, 16), "columns per thread"),
        ),
        block=lambda p: (threads_of(p), 1, 1),
        grid=lambda p, M, N, K: (cdiv(N, p["BN"]), cdiv(M, p["BM"]), 1),
        rules=(divides("TM", "BM"), divides("TN", "BN"), _smem_rule, _regs_rule, _loads_rule),
        label=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}",
        tile=lambda p: (p["BM"], p["BN"]),
        summary="each thread computes a TM x TN tile from registers (outer products)",
    )
)

D = SPEC.defaults()
N4 = (4096, 4096, 4096)
SWEEP = (
    [(D, (n, n, n)) for n in (512, 1024, 2048, 4096)]
    # thread tile sizes on 64x64 and 128x128 blocks
    + [(dict(D, BM=64, BN=64, TM=t, TN=t), N4) for t in (2, 4, 8)]
    + [(dict(D, TM=4, TN=4), N4), (dict(D, TM=8, TN=4), N4), (dict(D, TM=4, TN=8), N4),
       (dict(D, TM=16, TN=8), N4)]
    # block tile and k-slice
    + [(dict(D, BM=64, BN=128), N4), (dict(D, BM=128, BN=64), N4)]
    + [(dict(D, BK=bk), N4) for bk in (4, 8, 32)]
    # the same config on a shape that is not a multiple of anything
    + [(D, (4095, 4095, 4095))]
)
TEST_CONFIGS = [dict(D, BM=64, BN=64, BK=16, TM=4, TN=4), dict(D, BM=128, BN=64, BK=8, TM=8, TN=4),
                dict(D, BM=64, BN=64, BK=8, TM=2, TN=2), dict(D, BK=32, TM=16, TN=8)]
