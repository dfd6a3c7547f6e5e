"""``python -m helpers bench --suite calls``: helpers.sgemm called from Python in a loop, against cupy.matmul.

A product's time on the GPU is one cost of a library call; the host's time to issue it is
another, and for small products the larger one. Per shape, each call is checked on fresh
random data, then timed three ways, for ``helpers.sgemm`` and for ``cupy.matmul`` (cuBLAS,
TF32 off) on the same operands:

* GPU time: CUDA events around each call, queued back to back (:func:`helpers.runtime.timing.time_fn`);
* host time per call: a loop of ``CALLS`` calls over 8 rotating operand sets, queued while the
  GPU waits (:func:`helpers.runtime.timing.hold_gpu`), so that only the host's work is counted
  (its clock started after ``LEAD`` calls: the first calls after a synchronisation cost more);
* loop time per call: the same loop with nothing held and one synchronisation at the end: what
  a program that calls it in a loop gets: about the larger of the two times above (it can be a
  little less than the GPU time, which counts the events between calls too).

Each of the last two is the median of ``ROUNDS`` loops, after a warm-up loop, the two libraries'
loops taking turns. The shapes: small and medium products, a few large ones, and batches (3-D
operands, one of them 2-D in some: used by every product).

Beside these, two numbers of helpers.sgemm alone: its first call of a new shape (choice and plan
included, :func:`first_call_ms`), and the least a launch costs this machine's host
(:func:`launch_floors`), which varies from machine to machine and bounds what any call costs,
and beside it what an empty kernel launched on its own costs.
"""
from __future__ import annotations

import math
import statistics
import time

from .. import hardware
from ..runtime.specs import final

CALLS = 200          # calls per timed loop
ROUNDS = 11          # timed loops per measurement (the median is kept)
SETS = 8             # operand sets a loop rotates through
LEAD = 10            # calls of a loop with the GPU held before its clock starts (see loop_us)
# (batch or None, M, N, K, B broadcast): the five small products the leaderboard's section
# discusses, a few more sizes, and batches
SHAPES = [
    (None, 128, 128, 128, False), (None, 1209, 86, 1898, False), (None, 451, 434, 319, False),
    (None, 64, 50000, 64, False), (None, 33, 4096, 4096, False), (None, 256, 256, 256, False),
    (None, 64, 64, 8192, False), (None, 1000, 1000, 1000, False), (None, 4096, 4096, 4096, False),
    (64, 128, 128, 128, False), (256, 64, 64, 64, False), (16, 512, 512, 512, False),
    (32, 256, 256, 256, True), (8, 1024, 1024, 1024, False),
]


def shape_label(batch, M, N, K, broadcast=False) -> str:
    out = f"{M}x{N}x{K}"
    return out if batch is None else f"{batch} x {out}" + (" (B shared)" if broadcast else "")


def path_of(plan) -> str:
    """What a call launches: 'batched', 'packed', 'slabs', 'split-K', 'stream-K' or 'plain'."""
    p = plan.params
    if plan.call.batch > 1:
        return "batched" + (" split-K" if p["SPLITK"] > 1 else "")
    if p["PACK_A"] or p["PACK_B"]:
        return "packed"
    if p["REDUCE"]:
        return "slabs"
    return "split-K" if p["SPLITK"] > 1 else "stream-K" if p["STREAMK"] else "plain"


def launches_of(plan) -> int:
    """Kernels per call (launched one by one, or as one graph)."""
    return len(plan.packs) + len(plan.launches) + (plan.reduce is not None)


def operand_sets(batch, M, N, K, broadcast, rng, sets: int = SETS, b_t: bool = False) -> list:
    """(A, B, C) sets of random operands, C NaN; ``b_t``: B a transposed view (2-D only)."""
    import cupy

    def rand(*shape):
        return rng.uniform(-1.0, 1.0, size=shape, dtype=cupy.float32)

    out = []
    for _ in range(sets):
        if batch is None:
            out.append((rand(M, K), rand(N, K).T if b_t else rand(K, N),
                        cupy.full((M, N), math.nan, dtype=cupy.float32)))
        else:
            out.append((rand(batch, M, K), rand(K, N) if broadcast else rand(batch, K, N),
                        cupy.full((batch, M, N), math.nan, dtype=cupy.float32)))
    return out


def loop_us(fns: tuple, sets: list, calls: int = CALLS, rounds: int = ROUNDS, hold: bool = False) -> list[float]:
    """Median microseconds per call of each function of ``fns``: loops of ``calls`` calls over
    ``sets`` with one synchronisation at the end; ``hold``: the host's time only, the calls queued
    behind a wait on the GPU and the clock stopped before the GPU runs them. There the clock
    starts after ``LEAD`` calls: the first few calls after a synchronisation cost the host several
    times what the later ones do, for every library alike, and a program calling in a loop does
    not synchronise between calls. The functions take turns round by round, so that a slow spell
    of the host (another process, a clock change) falls on all of them alike."""
    import cupy

    from ..runtime.timing import hold_gpu

    stream = cupy.cuda.get_current_stream()
    times = [[] for _ in fns]
    for r in range(rounds + 1):                          # the first round warms up
        for i, fn in enumerate(fns):
            stream.synchronize()
            lead = 0
            if hold:
                hold_gpu(0.05)
                for lead in range(1, LEAD + 1):
                    fn(*sets[lead % len(sets)])
            t0 = time.perf_counter()
            for c in range(lead, lead + calls):
                fn(*sets[c % len(sets)])
            t1 = time.perf_counter()
            stream.synchronize()
            t2 = time.perf_counter()
            if r:
                times[i].append((t1 - t0 if hold else t2 - t0) / calls * 1e6)
    return [statistics.median(t) for t in times]


def first_call_ms(call) -> float:
    """The first call of a new shape, ms from the host's start to the product's end: the
    dispatcher's choice, the plan and the product. Every plan and choice is forgotten first, so
    that this call makes its own; its kernels are compiled already (one call before this one), so
    that the time is what every new shape costs, not the compiling a config needs once per machine
    (CuPy keeps the compiled kernels on disk)."""
    import cupy

    from ..runtime import gemm

    call()
    gemm.clear_plans()
    final.clear_choices()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    call()
    cupy.cuda.Device().synchronize()
    return 1e3 * (time.perf_counter() - t0)


EMPTY = r'extern "C" __global__ void empty(int n, float* p) { if (n < 0) p[0] = 0.0f; }'


def launch_floors(calls: int = CALLS, rounds: int = ROUNDS) -> tuple[float, float]:
    """The host's time to launch an empty kernel, in a loop with the GPU held, two ways, taking
    turns: the way helpers.sgemm launches (its parameters ready in a structure; a graph of one
    kernel, its parameters set, launched, where the driver has graphs), and on its own (one
    ``cuLaunchKernel``). The first is the least a call costs the host on this machine: a call's
    other kernels add the setting of their parameters, and its own work comes on top. Returns
    (that way, on its own)."""
    import cupy

    from ..runtime import gemm, graphs

    fn = cupy.RawKernel(EMPTY, "empty")
    out = cupy.zeros(1, dtype=cupy.float32)
    launch = gemm.Launch(fn.kernel, (1, 1, 1), (32, 1, 1), 0, (("n", "int"), ("p", "ptr")), n=1, p=out.data.ptr)
    stream = cupy.cuda.get_current_stream()
    direct = lambda: launch.launch(stream)      # noqa: E731
    if not (gemm.USE_GRAPHS and graphs.available()):
        floor = loop_us((direct,), [()], calls, rounds, hold=True)[0]
        return floor, floor
    graph = graphs.LaunchGraph([launch], stream.ptr)
    as_graph, on_its_own = loop_us((graph.launch, direct), [()], calls, rounds, hold=True)
    return as_graph, on_its_own


def launches_graph(plan) -> bool:
    """Whether the plan's calls on the current stream launch their kernels as one graph."""
    import cupy

    return bool(plan.graphs.get(cupy.cuda.get_current_stream().ptr))


def measure_shape(batch, M, N, K, broadcast=False, calls: int = CALLS, rounds: int = ROUNDS,
                  target_s: float = 0.2, params: dict | None = None, b_t: bool = False) -> dict:
    """One row: helpers.sgemm and cupy.matmul on one shape, checked, then timed three ways
    (``params``: a config instead of the dispatcher's; ``b_t``: B a transposed view)."""
    import cupy

    from ..runtime import gemm
    from ..runtime.check import compare, require_fp32_cublas
    from ..runtime.timing import time_fn

    require_fp32_cublas()
    rng = cupy.random.default_rng(M + N + K + (batch or 0))
    sets = operand_sets(batch, M, N, K, broadcast, rng, b_t=b_t)
    ours = lambda A, B, C: gemm.sgemm(A, B, C, params=params)   # noqa: E731
    cublas = lambda A, B, C: cupy.matmul(A, B, out=C)      # noqa: E731
    A, B, C = sets[0]
    first = first_call_ms(lambda: ours(A, B, C))
    C.fill(math.nan)
    ours(A, B, C)
    ref = cupy.matmul(A, B)
    if batch is None:
        c = compare(C, ref, A, B)
        rel, ok = c.rel_err, c.ok
    else:
        found = [compare(C[z], ref[z], A[z], B if broadcast else B[z]) for z in range(batch)]
        rel, ok = max(c.rel_err for c in found), all(c.ok for c in found)
    plan = gemm.plan_for(A, B, C, params)
    t, tc = time_fn(ours, sets, target_s=target_s), time_fn(cublas, sets, target_s=target_s)
    host, cublas_host = loop_us((ours, cublas), sets, calls, rounds, hold=True)
    floor, direct = launch_floors(calls, rounds)
    loop, cublas_loop = loop_us((ours, cublas), sets, calls, rounds)
    row = dict(kernel="final", suite="calls", batch=batch, M=M, N=N, K=K, broadcast=bool(broadcast),
               shape=shape_label(batch, M, N, K, broadcast), params=dict(plan.params), label=final.label(plan.params),
               path=path_of(plan), launches=launches_of(plan), graph=launches_graph(plan), ms=t.ms, cublas_ms=tc.ms,
               host_us=host, cublas_host_us=cublas_host, loop_us=loop, cublas_loop_us=cublas_loop,
               first_call_ms=first, launch_floor_us=floor, direct_launch_us=direct,
               rel_err=rel if math.isfinite(rel) else None, ok=bool(ok), status="measured", reason="",
               source_hash=final.SPEC.source_hash())
    row["pct_gpu"] = 100 * row["cublas_ms"] / row["ms"]
    row["pct_loop"] = 100 * row["cublas_loop_us"] / row["loop_us"]
    return row


def run(shapes=SHAPES, calls: int = CALLS, rounds: int = ROUNDS, log=print, on_row=None) -> list[dict]:
    """Every shape of :data:`SHAPES`; a shape that fails is a row with its reason, not the end of the run."""
    from .bench import failure_reason

    rows, t0 = [], time.time()
    log(f"helpers.sgemm and cupy.matmul called in loops on {hardware.current().label}: {calls} calls over "
        f"{SETS} operand sets, median of {rounds}")
    # the host settles during its first seconds of calls (both libraries run slower then): one
    # untimed pass over the first shape first
    try:
        measure_shape(*shapes[0], calls=calls, rounds=2)
    except Exception:                                     # the first shape's own row says what went wrong
        pass
    for batch, M, N, K, broadcast in shapes:
        try:
            row = measure_shape(batch, M, N, K, broadcast, calls, rounds)
        except Exception as exc:                          # a failure is a row, not the end of the run
            row = dict(kernel="final", suite="calls", batch=batch, M=M, N=N, K=K, broadcast=bool(broadcast),
                       shape=shape_label(batch, M, N, K, broadcast), status="failed", reason=failure_reason(exc),
                       ok=False)
        rows.append(row)
        if on_row:
            on_row(rows)
        log(f"  {row['shape']:>28s}: " + (
            f"GPU {1e3 * row['ms']:7.1f} / {1e3 * row['cublas_ms']:7.1f} us, host {row['host_us']:5.1f} / "
            f"{row['cublas_host_us']:5.1f} us, loop {row['loop_us']:7.1f} / {row['cublas_loop_us']:7.1f} us per call "
            f"({row['pct_loop']:4.0f}% of cupy.matmul's throughput), {row['path']}, {row['launches']} kernel(s)"
            f"{' in one graph' if row['graph'] else ''} "
            f"(an empty launch: {row['launch_floor_us']:.1f} us), first call {row['first_call_ms']:.1f} ms"
            f"  {'ok' if row['ok'] else 'WRONG'}" if row["status"] == "measured" else f"FAILED: {row['reason']}")
            + f"  ({time.time() - t0:.0f} s)")
    return rows


def record_rows() -> list[dict]:
    """``python -m helpers record --chapter calls``."""
    return run()


def format_table(rows: list[dict]) -> str:
    """The run as plain text, a line per shape (ours / cupy.matmul)."""
    head = (f"{'shape':>28s} {'GPU us':>17s} {'host us/call':>14s} {'loop us/call':>17s} {'throughput':>10s}  "
            "path (kernels)")
    out = ["helpers.sgemm / cupy.matmul; throughput: % of cupy.matmul's calls per second in a loop", head]
    for r in rows:
        if r.get("status") != "measured":
            out.append(f"{r['shape']:>28s}  {r.get('status')}: {r.get('reason')}")
            continue
        out.append(f"{r['shape']:>28s} {1e3 * r['ms']:8.1f}/{1e3 * r['cublas_ms']:<8.1f} "
                   f"{r['host_us']:6.1f}/{r['cublas_host_us']:<7.1f} {r['loop_us']:8.1f}/{r['cublas_loop_us']:<8.1f} "
                   f"{r['pct_loop']:9.0f}%  {r['path']} ({r['launches']})" + ("" if r["ok"] else "  WRONG"))
    good = [r for r in rows if r.get("status") == "measured" and r.get("ok")]
    if good:
        from .bench import geomean

        out.append(f"geometric mean over {len(good)} shapes: {geomean(r['pct_loop'] for r in good):.0f}% of "
                   f"cupy.matmul's loop throughput; host time per call {min(r['host_us'] for r in good):.1f} to "
                   f"{max(r['host_us'] for r in good):.1f} us")
    return "\n".join(out)
