"""What each CPU variant's inner loop moves, where the data it reuses lives, and what each
step should and did gain (chapter "On the CPU", book/01_cpu.md).

Pure functions of a *plan* (the tiled kernels' block sizes and register tile, from
:func:`helpers.runtime.cpu.plan`), the caches the machine reports, and timing rows
(:func:`helpers.runtime.cpu.benchmark`, recorded or live: :mod:`helpers.measure.cpu`).
Nothing here assumes a machine.
"""
from __future__ import annotations

from ..runtime.cpu import VARIANTS

FLOAT = 4
# The steps of the chapter, each against the one before.
STEPS = (("ijk", "ikj (reordered)"), ("ikj (reordered)", "ikj, k unrolled x4"),
         ("ikj, k unrolled x4", "4x4 register block"), ("4x4 register block", "tiled, packed B"),
         ("tiled, packed B", "tiled, parallel"))


def traffic(variant: str, n: int, plan: dict, line: int = 64) -> dict:
    """What ``variant``'s inner loop moves per multiply-add at n x n x n.

    ``loads_per_fma`` / ``stores_per_fma``: values loaded and stored per multiply-add
    (counting each SIMD lane as one value). ``bytes_per_flop``: bytes the loop reads or
    writes per FLOP (2 per multiply-add), a whole ``line`` for a strided access.
    ``b_bytes_per_fma``: bytes of B brought in per multiply-add. ``reuse_b``: multiply-adds
    fed by each value of B loaded. ``reuse_bytes``: how much data goes by between two
    uses of the same value (or line) of B, its *reuse distance*: a cache must hold that
    much for the second use to hit. ``plan`` gives MR, NR, KC and NC of the tiled kernels.
    """
    mr, nr, kc, nc = plan["MR"], plan["NR"], plan["KC"], plan["NC"]
    if variant == "ijk":
        # per multiply-add: A[i, k] (stride 1), B[k, j] (stride n: a whole line each)
        loads, stores, touched, b_bytes, reuse_b = 2, 0, FLOAT + line, line, 1
        reuse_bytes = n * line              # B[k, j+1] shares B[k, j]'s line: a column of lines later
    elif variant == "ikj (reordered)":
        # per multiply-add: B[k, j], C[i, j] loaded, C[i, j] stored; all stride 1
        loads, stores, touched, b_bytes, reuse_b = 2, 1, 3 * FLOAT, FLOAT, 1
        reuse_bytes = FLOAT * n * n         # B[k, j] is used again by the next row of C: all of B later
    elif variant == "ikj, k unrolled x4":
        # per 4 multiply-adds: 4 values of B, one C loaded and stored
        loads, stores, touched, b_bytes, reuse_b = 5 / 4, 1 / 4, FLOAT * 6 / 4, FLOAT, 1
        reuse_bytes = FLOAT * n * n
    elif variant == "4x4 register block":
        # per 16 multiply-adds: 4 values of B, 4 of C loaded and stored (A sits in 16 registers)
        loads, stores, touched, b_bytes, reuse_b = 8 / 16, 4 / 16, FLOAT * 12 / 16, FLOAT / 4, 4
        reuse_bytes = FLOAT * n * n         # used again by the next 4 rows: all of B later
    elif variant in ("tiled, packed B", "tiled, parallel"):
        # per MR x NR multiply-adds: MR values of A, NR of B; C stays in registers for KC values of k
        per = mr * nr
        loads, stores, touched, b_bytes, reuse_b = (mr + nr) / per, 0, FLOAT * (mr + nr) / per, FLOAT / mr, mr
        reuse_bytes = FLOAT * min(n, kc) * min(n, nc)   # one packed block
    else:
        raise KeyError(f"no traffic model for {variant!r}; variants: {list(VARIANTS)}")
    return {"variant": variant, "loads_per_fma": loads, "stores_per_fma": stores, "bytes_per_flop": touched / 2,
            "b_bytes_per_fma": b_bytes, "reuse_b": reuse_b, "reuse_bytes": reuse_bytes}


def level(nbytes: float, caches: dict) -> str:
    """The smallest cache level that holds ``nbytes`` ("L1", "L2", ...), or "memory"."""
    for name in sorted(k for k in caches if k.startswith("L") and k[1:].isdigit()):
        if nbytes <= caches[name]:
            return name
    return "memory"


def kib(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MB" if nbytes >= 2**20 else f"{nbytes / 1024:g} KB"


# ------------------------------------------------------------ measured steps
def band(r: dict) -> tuple[float, float]:
    """The 20th-80th percentile band of a timing row, in GFLOP/s."""
    return r.get("gflops_p20", r["gflops"]), r.get("gflops_p80", r["gflops"])


def compare(prev: dict, this: dict) -> str:
    """"faster", "slower", or "no clear difference" (the two bands overlap)."""
    (p_lo, p_hi), (t_lo, t_hi) = band(prev), band(this)
    if t_lo > p_hi:
        return "faster"
    if t_hi < p_lo:
        return "slower"
    return "no clear difference"


def _why(prev: dict, this: dict, n: int, plan: dict, caches: dict, facts: dict) -> str:
    """Why a step did not gain at n, from what the run measured; or that none of the causes it checks applies."""
    if compare(prev, this) == "no clear difference" and this["gflops"] >= prev["gflops"]:
        (p_lo, p_hi), (t_lo, t_hi) = band(prev), band(this)
        return (f"faster in the median, but the calls varied too much to tell: their 20-80% bands overlap "
                f"({p_lo:.3g}-{p_hi:.3g} and {t_lo:.3g}-{t_hi:.3g} GFLOP/s)")
    b_all = FLOAT * n * n
    name = this["name"]
    if name == "ikj, k unrolled x4" and level(b_all, caches) != "L1":
        return (f"unrolling removes three of every four loads and stores of C, which hit the L1 anyway, but every "
                f"multiply-add still loads its own value of B, and all of B ({kib(b_all)}) does not fit in the "
                f"{kib(caches['L1'])} L1: B comes from the {level(b_all, caches)} at the same rate as before")
    if name == "tiled, packed B":
        tile = facts.get("tile", {})
        reasons = []
        if tile.get("spill_loads") or tile.get("spill_stores"):
            reasons.append(f"its compiled loop keeps values on the stack ({tile['spill_loads']} loads and "
                           f"{tile['spill_stores']} stores per iteration)")
        if level(b_all, caches) in ("L1", "L2"):
            w = tile.get("floats_per_vector") or 1
            iters = max(min(n, plan["KC"]) // w, 1)
            where = level(b_all, caches)
            reasons.append(f"all of B ({kib(b_all)}) already fits in the {kib(caches[where])} {where}, so the "
                           f"register block's reads of B hit the {where} too and packing has little to save, while its costs "
                           f"remain: copying B, and adding up the {w} lanes of each of the {plan['MR'] * plan['NR']} "
                           f"sums of a tile after only {iters} iterations of its loop")
        if reasons:
            return "; ".join(reasons)
    if name == "tiled, parallel":
        t_seq, t_par = prev["s"], this["s"]
        over = facts.get("parallel_overhead_s") or 0.0
        cores = facts.get("cores", 1)
        load = facts.get("load_average")
        if cores < 2:
            return "this process may run on one core only, so there is nothing to share"
        # the fixed cost explains a missing gain only where it is a sizable part of a call, and a
        # loss only up to about itself: a parallel call far slower than that waited for something else
        if over >= 0.25 * t_seq / cores and t_par <= 2 * (t_seq + over):
            return (f"a sequential call takes only {1e3 * t_seq:.2g} ms, and handing work to the threads and "
                    f"waiting for them costs {1e6 * over:.0f} µs per call (measured with an empty parallel loop)")
        if load is not None and load > cores:
            return (f"the machine had other work: its load average was {load:.1f} runnable processes on {cores} "
                    "cores, and a parallel call waits for its slowest thread")
    return ("none of the causes checked here applies (spills, B already in a cache, the threads' start-up cost, "
            "other work on the machine); the bands show how much repeated calls varied")


def steps(rows: list[dict], plan: dict, caches: dict, facts: dict | None = None) -> list[dict]:
    """Each step of :data:`STEPS` at each n where both variants were timed: the two speeds,
    the ratio, the verdict (:func:`compare`) and, where the step did not gain, why."""
    facts = facts or {}
    by = {(r["name"], r["n"]): r for r in rows}
    out = []
    for prev_name, name in STEPS:
        for n in sorted({r["n"] for r in rows}):
            prev, this = by.get((prev_name, n)), by.get((name, n))
            if not prev or not this:
                continue
            verdict = compare(prev, this)
            out.append({"step": name, "previous": prev_name, "n": n, "previous GFLOP/s": prev["gflops"],
                        "GFLOP/s": this["gflops"], "ratio": this["gflops"] / prev["gflops"], "verdict": verdict,
                        "why": "" if verdict == "faster" else _why(prev, this, n, plan, caches, facts)})
    return out


def fastest(rows: list[dict], exclude=("NumPy (BLAS)",)) -> dict[int, dict]:
    """Per n, the fastest variant's row (NumPy left out)."""
    best: dict = {}
    for r in rows:
        if r["name"] not in exclude and (r["n"] not in best or r["gflops"] > best[r["n"]]["gflops"]):
            best[r["n"]] = r
    return dict(sorted(best.items()))
