"""``python -m helpers bench``: every chapter's kernel against cuBLAS, in one run.

Each chapter's main kernel (its defaults; the final kernel the config it chooses for
each shape) is checked and timed with :func:`helpers.runtime.timing.measure` next to
cuBLAS, over square sizes and the shape suite (:mod:`helpers.shapes`). A kernel is not
run at a shape where one launch would take longer than ``max_launch_ms``, estimated
from its previous, smaller measurement: the naive kernel at n = 8192 would need half a
minute for nothing. Rows say which cells were skipped and why.

``--suite broad`` runs the final kernel alone over the broad suite instead
(:func:`helpers.shapes.broad_suite`): random shapes. ``--suite layouts`` runs
the library call :func:`helpers.sgemm` with A and B as given or as transposed views (the
layouts NN, NT, TN, TT) against ``cupy.matmul`` on the same views.
"""
from __future__ import annotations

import math
import time

from .. import hardware
from ..shapes import QUICK_SIZES, SIZES, SUITE, broad_suite, flops
from ..runtime.spec import ConfigError
from ..runtime.specs import ALL, get
from ..runtime.specs.final import LAYOUTS as LAYOUT_FLAGS
from ..runtime.timing import measure, measure_cublas, tflops
from . import mainline

QUICK_MAX_FLOPS = 2 * 2048 ** 3  # quick runs keep the suite shapes no bigger than n = 2048
MAX_LAUNCH_MS = 200.0
TARGET_S = 0.3                   # seconds of timed launches per measurement (0.1 quick)
FIRST_GUESS_TFLOPS = 2.0         # a kernel's speed before its first (smallest) measurement
EXTRA_KERNELS = mainline.EXTRA  # measured besides the main line: a step the final kernel builds on
LAYOUTS = tuple(LAYOUT_FLAGS)       # op(A), op(B): N as stored row-major, T a transposed view (X.T)
LAYOUT_SIZES = (2048, 4096, 4097, 8192)


# ------------------------------------------------------------------ the plan
def main_kernels() -> list[str]:
    """The kernels the leaderboard runs, once each, in book order: those of the main line
    (:mod:`helpers.measure.mainline`) and the variants it adds (:data:`EXTRA_KERNELS`)."""
    names = list(dict.fromkeys(mainline.kernel_of(e) for e in mainline.entries()))
    order = [s.name for s in ALL]
    return sorted(names, key=order.index)


def entries() -> list[str]:
    """The leaderboard's row names: the main line in chapter order, then the variants."""
    return mainline.entries()


def plan_config(entry: str, M: int, N: int, K: int, device) -> tuple[dict | None, str]:
    """(config, where it comes from) of one leaderboard row; None where there is none (the
    reason instead of where)."""
    spec = get(mainline.kernel_of(entry))
    if entry == mainline.TUNED:
        return mainline.tuned_params(device.name)
    return spec.config_for(M, N, K, device), "chosen for the shape" if spec.choose else "defaults"


def shapes(quick: bool = False, suite: str = "default") -> list[tuple[tuple[int, int, int], str]]:
    """(shape, tag): "sizes" for the square n x n x n, "suite" for the awkward ones, "broad" for the broad suite."""
    if suite == "broad":
        return [(s, "broad") for s in broad_suite()]
    out = [((n, n, n), "sizes") for n in (QUICK_SIZES if quick else SIZES)]
    out += [(s, "suite") for s in SUITE if not quick or flops(*s) <= QUICK_MAX_FLOPS]
    return out


def estimate_ms(M: int, N: int, K: int, tf: float) -> float:
    return flops(M, N, K) / (tf * 1e12) * 1e3


class Capper:
    """Decides which (kernel, shape) are too slow to run, from each kernel's last measured speed."""

    def __init__(self, max_launch_ms: float = MAX_LAUNCH_MS):
        self.max_launch_ms = max_launch_ms
        self.seen: dict = {}  # kernel -> (TFLOP/s, shape) of its last measurement

    def observe(self, kernel: str, shape, tf: float) -> None:
        if tf and tf > 0 and math.isfinite(tf):
            self.seen[kernel] = (tf, tuple(shape))

    def skip_reason(self, kernel: str, shape) -> str:
        """Empty when the shape should run; otherwise why not."""
        rate = self.seen.get(kernel, (FIRST_GUESS_TFLOPS, None))[0]
        est = estimate_ms(*shape, rate)
        if est <= self.max_launch_ms:
            return ""
        basis = (f"it ran at {rate:.2g} TFLOP/s at {'x'.join(map(str, self.seen[kernel][1]))}"
                 if kernel in self.seen else f"a first guess of {rate:.2g} TFLOP/s")
        return f"too slow: one launch would take about {est:,.0f} ms ({basis}; the cap is {self.max_launch_ms:g} ms)"


# ------------------------------------------------------------------- running
def failure_reason(exc: Exception) -> str:
    """One line for a row that failed: the exception's type and its first non-empty line."""
    lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    return f"{type(exc).__name__}: {lines[0][:200]}"


def run(kernels: list[str] | None = None, quick: bool = False, suite: str = "default",
        max_launch_ms: float = MAX_LAUNCH_MS, target_s: float | None = None, log=print, on_row=None) -> list[dict]:
    """Measure every (kernel, shape); one row per cell plus cuBLAS per shape.

    Rows have the :class:`helpers.runtime.timing.Result` fields plus ``suite`` (the tag),
    ``status`` ("measured", "skipped", "refused" or "failed"), ``reason``,
    ``config_from`` and ``pct_cublas``. Rows of kernel ``"cublas"`` hold cuBLAS's own
    time at each shape. ``on_row(rows)`` is called after every row (to save progress).
    """
    device = hardware.current()
    kernels = list(kernels or (["final"] if suite == "broad" else entries()))
    target_s = target_s or (0.1 if quick else TARGET_S)
    items = sorted(shapes(quick, suite), key=lambda it: (flops(*it[0]), it[0]))
    capper, rows, cache = Capper(max_launch_ms), [], {}
    t0 = time.time()

    def add(row):
        rows.append(row)
        if on_row:
            on_row(rows)

    log(f"benchmark on {device.label}: {len(kernels)} kernel(s) x {len(items)} shapes, cuBLAS timed at each shape first")
    for (M, N, K), tag in items:
        tc = measure_cublas(M, N, K, target_s=target_s)
        cache[(M, N, K)] = tc
        tf = tflops(M, N, K, tc.ms)
        add({"kernel": "cublas", "params": {}, "M": M, "N": N, "K": K, "ms": tc.ms, "ms_p20": tc.ms_p20,
             "ms_p80": tc.ms_p80, "tflops": tf, "cublas_ms": tc.ms, "cublas_tflops": tf, "rel_err": 0.0,
             "ok": True, "reps": tc.reps, "buffers": tc.buffers, "queued": tc.queued, "suite": tag, "status": "measured",
             "reason": "", "config_from": "cupy.matmul", "pct_cublas": 100.0, "source_hash": ""})
        log(f"  cuBLAS {M}x{N}x{K}: {tf:6.2f} TFLOP/s")
    todo = [(k, shape, tag) for k in kernels for shape, tag in items]
    for i, (entry, (M, N, K), tag) in enumerate(todo, 1):
        spec = get(mainline.kernel_of(entry))
        base = {"kernel": spec.name, "entry": entry, "M": M, "N": N, "K": K, "suite": tag,
                "cublas_ms": cache[(M, N, K)].ms, "cublas_tflops": tflops(M, N, K, cache[(M, N, K)].ms),
                "source_hash": spec.source_hash()}
        head = f"[{i}/{len(todo)}] {entry} {M}x{N}x{K}:"
        params, where = plan_config(entry, M, N, K, device)
        if params is None:
            add(dict(base, params={}, config_from="", status="refused", reason=where))
            log(f"{head} refused: {where}")
            continue
        base.update(params=params, config_from=where)
        why = capper.skip_reason(entry, (M, N, K))
        if why:
            add(dict(base, status="skipped", reason=why))
            log(f"{head} skipped, {why}")
            continue
        try:
            r = measure(spec, M, N, K, params, cublas_cache=cache, target_s=target_s)
        except ConfigError as exc:
            add(dict(base, status="refused", reason=str(exc).splitlines()[0]))
            log(f"{head} refused: {rows[-1]['reason']}")
            continue
        except Exception as exc:       # a launch failure is a row, not the end of the run
            add(dict(base, status="failed", reason=failure_reason(exc)))
            log(f"{head} FAILED: {rows[-1]['reason']}")
            continue
        row = dict(base, **r.as_dict(), status="measured", reason="")
        row["pct_cublas"] = 100 * row["tflops"] / row["cublas_tflops"]
        capper.observe(entry, (M, N, K), row["tflops"])
        add(row)
        flag = "ok" if row["ok"] else f"WRONG (relative error {row['rel_err']})"
        log(f"{head} {row['tflops']:6.2f} TFLOP/s, {row['pct_cublas']:5.1f}% of cuBLAS  {flag}  ({time.time() - t0:.0f} s)")
    log(f"benchmark done in {time.time() - t0:.0f} s")
    return rows


def layout_buffers(M: int, N: int, K: int, layout: str, rng=None) -> list:
    """(A, B, C) sets of fresh random operands in a layout: a "T" operand is the transposed
    view of a row-major matrix (column-major, no copy); C is row-major and NaN."""
    import cupy
    import numpy as np

    from ..runtime.check import random_matrix
    from ..runtime.timing import buffer_count

    rng = rng or cupy.random.default_rng()
    count = buffer_count(M, N, K, hardware.gpu().l2_bytes, cupy.cuda.Device().mem_info[0])
    a_t, b_t = LAYOUT_FLAGS[layout]
    return [(random_matrix(K, M, rng).T if a_t else random_matrix(M, K, rng),
             random_matrix(N, K, rng).T if b_t else random_matrix(K, N, rng),
             cupy.full((M, N), np.nan, dtype=cupy.float32)) for _ in range(count)]


def run_layouts(sizes=LAYOUT_SIZES, target_s: float | None = None, log=print, on_row=None) -> list[dict]:
    """``helpers.sgemm`` in the four layouts at n x n x n against ``cupy.matmul`` on the same
    views: one row per (size, layout), checked on fresh random data, both timed in one run."""
    import cupy

    from ..runtime import gemm
    from ..runtime.check import compare, require_fp32_cublas
    from ..runtime.specs.final import SPEC
    from ..runtime.timing import time_fn

    require_fp32_cublas()
    target_s = target_s or TARGET_S
    rows, t0 = [], time.time()
    log(f"helpers.sgemm in {len(LAYOUTS)} layouts on {hardware.current().label}, cupy.matmul on the same views")
    for n in sizes:
        for lay in LAYOUTS:
            base = {"kernel": "final", "M": n, "N": n, "K": n, "layout": lay, "suite": "layouts",
                    "config_from": "helpers.sgemm", "source_hash": SPEC.source_hash()}
            try:
                bufs = layout_buffers(n, n, n, lay)
                A, B, C = bufs[0]
                gemm.sgemm(A, B, C)
                c = compare(C, cupy.matmul(A, B), A, B)
                t = time_fn(lambda A, B, C: gemm.sgemm(A, B, C), bufs, target_s=target_s)
                tc = time_fn(lambda A, B, C: cupy.matmul(A, B, out=C), bufs, target_s=target_s)
                row = dict(base, params=gemm.chosen(A, B, C), ms=t.ms, ms_p20=t.ms_p20, ms_p80=t.ms_p80,
                           tflops=tflops(n, n, n, t.ms), cublas_ms=tc.ms, cublas_ms_p20=tc.ms_p20,
                           cublas_ms_p80=tc.ms_p80, cublas_tflops=tflops(n, n, n, tc.ms),
                           rel_err=c.rel_err if math.isfinite(c.rel_err) else None, ok=bool(c.ok), reps=t.reps,
                           buffers=t.buffers, queued=t.queued and tc.queued, status="measured", reason="")
                row["pct_cublas"] = 100 * row["tflops"] / row["cublas_tflops"]
                del bufs, A, B, C
            except Exception as exc:       # a failure is a row, not the end of the run
                row = dict(base, status="failed", reason=failure_reason(exc))
            rows.append(row)
            if on_row:
                on_row(rows)
            log(f"  n = {n} {lay}: " + (f"{row['tflops']:6.2f} TFLOP/s, cuBLAS {row['cublas_tflops']:6.2f}: "
                                       f"{row['pct_cublas']:5.1f}%  {'ok' if row['ok'] else 'WRONG'}"
                                       if row["status"] == "measured" else f"FAILED: {row['reason']}")
                + f"  ({time.time() - t0:.0f} s)")
    return rows


def record_rows() -> list[dict]:
    """``python -m helpers record --chapter leaderboard``: the full ``bench`` run (a few minutes)."""
    return run()


def record_broad() -> list[dict]:
    """``python -m helpers record --chapter broad_suite``: the final kernel over the broad suite."""
    return run(suite="broad")


def record_layouts() -> list[dict]:
    """``python -m helpers record --chapter layouts``: helpers.sgemm in the four layouts."""
    return run_layouts()


# ---------------------------------------------------------------- reporting
def geomean(values) -> float:
    """Geometric mean of positive numbers (nan for none)."""
    vals = [float(v) for v in values]
    if not vals:
        return math.nan
    if any(v <= 0 for v in vals):
        raise ValueError(f"geometric mean needs positive numbers, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def measured_ok(r: dict | None) -> bool:
    return r is not None and r.get("status") == "measured" and bool(r.get("ok"))


def suite_score(rows: list[dict], kernel: str, tag: str = "suite") -> tuple[float, int, int]:
    """(geometric mean of % of cuBLAS over the suite, shapes counted, shapes in the suite).

    Only correct measurements count: a skipped, refused or wrong cell is left out and
    the count says so.
    """
    suite = [r for r in rows if name(r) == kernel and r.get("suite") == tag]
    good = [r for r in suite if measured_ok(r)]
    return geomean(100 * r["tflops"] / r["cublas_tflops"] for r in good), len(good), len(suite)


def lowest(rows: list[dict], kernel: str, tag: str = "suite") -> dict | None:
    """The kernel's correct row with the lowest % of cuBLAS in a suite (the first listed on a tie)."""
    good = [r for r in rows if name(r) == kernel and r.get("suite") == tag and measured_ok(r)]
    return min(good, key=lambda r: r["tflops"] / r["cublas_tflops"], default=None)


def name(r: dict) -> str:
    """A row's name on the leaderboard: its main-line entry (rows recorded before entries
    existed: the kernel's name)."""
    return r.get("entry") or r["kernel"]


def kernels_in(rows: list[dict]) -> list[str]:
    """The row names in the rows: the main line first, in chapter order, then the others."""
    found = list(dict.fromkeys(name(r) for r in rows if r["kernel"] != "cublas"))
    main = [e for e in mainline.names() if e in found]
    return main + [e for e in found if e not in main]


def shapes_in(rows: list[dict], tag: str) -> list[tuple]:
    """The shapes with the given tag: square sizes by n, suites in their listed order."""
    found = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in rows if r.get("suite") == tag))
    listed = [s for s in SUITE if s in found] if tag == "suite" else []
    return listed + sorted(set(found) - set(listed), key=lambda s: (flops(*s), s))


def cell(rows: list[dict], kernel: str, shape) -> dict | None:
    return next((r for r in rows if name(r) == kernel and (r["M"], r["N"], r["K"]) == tuple(shape)), None)


def cell_text(r: dict | None, what: str = "both") -> str:
    """'45.1 (88%)', 'skip', 'refused', 'failed', 'WRONG' or '' for one cell."""
    if r is None:
        return ""
    if r.get("status") != "measured":
        return {"skipped": "skip"}.get(r.get("status"), r.get("status") or "?")
    if not r.get("ok"):
        return "WRONG"
    pct = 100 * r["tflops"] / r["cublas_tflops"]
    return {"pct": f"{pct:.0f}%", "tflops": f"{r['tflops']:.1f}"}.get(what, f"{r['tflops']:.1f} ({pct:.0f}%)")


def summary(rows: list[dict], peak_tflops: float) -> list[dict]:
    """One dict per kernel: best square-size result, % of cuBLAS and of the FP32 peak, errors, suite score."""
    out = []
    for k in kernels_in(rows) + ["cublas"]:
        mine = [r for r in rows if name(r) == k]
        measured = [r for r in mine if r.get("status") == "measured"]
        square = [r for r in measured if r.get("suite") == "sizes" and r.get("ok")]
        best = max(square, key=lambda r: r["tflops"]) if square else None
        errs = [r["rel_err"] for r in measured if r.get("rel_err") is not None]
        score, counted, total = suite_score(rows, k) if k != "cublas" else (100.0, 0, 0)
        out.append({
            "kernel": k,
            "best_tflops": best["tflops"] if best else None,
            "best_at": f"n={best['M']}" if best else "",
            "pct_cublas": 100 * best["tflops"] / best["cublas_tflops"] if best else None,
            "pct_peak": 100 * best["tflops"] / peak_tflops if best and peak_tflops else None,
            "max_rel_err": max(errs) if errs else None,
            "all_correct": all(r.get("ok") for r in measured) and len(measured) == len(mine),
            "wrong": sum(1 for r in measured if not r.get("ok")),
            "not_run": sum(1 for r in mine if r.get("status") != "measured"),
            "suite_geomean": score, "suite_counted": counted, "suite_total": total,
        })
    return out


def _fmt(v, spec: str, empty: str = "–") -> str:
    return empty if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def layout_cell(rows: list[dict], n: int, layout: str) -> dict | None:
    return next((r for r in rows if r.get("suite") == "layouts" and r["M"] == n and r.get("layout") == layout), None)


def layout_sizes(rows: list[dict]) -> list[int]:
    return sorted({r["M"] for r in rows if r.get("suite") == "layouts"})


def format_layouts(rows: list[dict]) -> str:
    """The layouts run as plain text: TFLOP/s (% of cuBLAS on the same layout), a row per layout."""
    sizes = layout_sizes(rows)
    out = ["helpers.sgemm, TFLOP/s (% of cupy.matmul on the same views) at n x n x n",
           "layout" + "".join(f"n={n}".rjust(16) for n in sizes)]
    out += [lay.ljust(6) + "".join(cell_text(layout_cell(rows, n, lay)).rjust(16) for n in sizes) for lay in LAYOUTS]
    return "\n".join(out)


def format_table(rows: list[dict], peak_tflops: float) -> str:
    """The leaderboard as plain text: square sizes, the shape suites, and a per-kernel summary."""
    kernels = kernels_in(rows)
    width = max([len(k) for k in kernels] + [8]) + 2
    out = []
    sizes = shapes_in(rows, "sizes")
    if sizes:
        out.append("TFLOP/s (% of cuBLAS) at n x n x n")
        out.append("kernel".ljust(width) + "".join(f"n={s[0]}".rjust(16) for s in sizes))
        for k in kernels + ["cublas"]:
            out.append(k.ljust(width) + "".join(cell_text(cell(rows, k, s)).rjust(16) for s in sizes))
        out.append("")
    for tag in ("suite", "broad"):
        suite = shapes_in(rows, tag)
        if not suite:
            continue
        out.append(f"% of cuBLAS over the {tag} shapes (M x N x K)")
        for k in kernels:
            score, counted, total = suite_score(rows, k, tag)
            cells = [(f"{s[0]}x{s[1]}x{s[2]}", cell_text(cell(rows, k, s), "pct")) for s in suite]
            low = lowest(rows, k, tag)
            low_text = f"{cell_text(low, 'pct')} at {low['M']}x{low['N']}x{low['K']}" if low else "-"
            out.append(f"{k}: geometric mean {_fmt(score, '.1f')}% over {counted}/{total} shapes; lowest {low_text}")
            out += [f"  {shape:>18s} {text:>8s}" for shape, text in cells]
        out.append("")
    out.append(f"best square size per kernel; FP32 peak {peak_tflops:.1f} TFLOP/s")
    out.append("kernel".ljust(width) + "TFLOP/s".rjust(10) + "at".rjust(9) + "% cuBLAS".rjust(10)
               + "% peak".rjust(9) + "max rel err".rjust(13) + "  correct")
    for s in summary(rows, peak_tflops):
        correct = "yes" if s["all_correct"] else (f"{s['wrong']} WRONG" if s["wrong"] else "yes, where run")
        out.append(s["kernel"].ljust(width) + _fmt(s["best_tflops"], ".1f").rjust(10) + s["best_at"].rjust(9)
                   + (_fmt(s["pct_cublas"], ".0f") + "%").rjust(10) + (_fmt(s["pct_peak"], ".0f") + "%").rjust(9)
                   + _fmt(s["max_rel_err"], ".1e").rjust(13) + "  " + correct)
    notes = [r for r in rows if r.get("status") in ("skipped", "refused", "failed")]
    if notes:
        out += ["", "not run:"] + [f"  {r['kernel']} {r['M']}x{r['N']}x{r['K']}: {r['status']}, {r['reason']}"
                                   for r in notes]
    return "\n".join(out)
