"""``python -m helpers bench``: every chapter's kernel against cuBLAS, in one run.

Each chapter's main kernel (its default config; for the final kernel the config
``helpers.final.choose_config`` picks for each shape) is checked and timed with
:func:`helpers.bench.measure` next to cuBLAS, over square sizes
n = 1024, 2048, 4096, 8192 and a suite of awkward shapes (thin, wide, odd, not
multiples of any tile). The table gives TFLOP/s, % of cuBLAS, % of the FP32
peak, the relative error, and per kernel the geometric mean of % of cuBLAS over
the suite.

A kernel is not run at a shape where one launch would take longer than
``--max-ms`` (200 ms by default), estimated from its previous, smaller
measurement: the naive kernel at n = 8192 would need half a minute for nothing.
The table says which cells were skipped and why.

``python -m helpers bench --record`` (or ``python -m helpers record --chapter
leaderboard``) stores the same rows, from the same code, for the chapter
"Leaderboard" (book/13_leaderboard.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from .record import table_recorder

SIZES = (1024, 2048, 4096, 8192)
SUITE = ((1000, 3000, 777), (4097, 4097, 4097), (8192, 128, 8192), (128, 8192, 8192),
         (2048, 2048, 8192), (3000, 3000, 3000), (512, 512, 512))
QUICK_SIZES = (1024, 2048)
QUICK_MAX_FLOPS = 2 * 2048 ** 3  # --quick keeps the suite shapes no bigger than n = 2048
MAX_LAUNCH_MS = 200.0
TARGET_S = 0.3  # seconds of timed launches per measurement (0.1 with --quick)
# A first guess of TFLOP/s before a kernel's first (smallest) measurement; later
# estimates use what was measured.
PRIOR_TFLOPS = {"naive": 0.3}
DEFAULT_PRIOR_TFLOPS = 2.0
# Kernels measured besides one per chapter: steps the final kernel builds on.
EXTRA_KERNELS = ("double_buffering_async",)


# ------------------------------------------------------------------ the plan
def main_kernels() -> list[str]:
    """One kernel per chapter, in book order: the chapter module's ``SPEC``, never a broken one."""
    from .registry import all_specs
    from .specs import MODULES

    module_main = {getattr(m, "SPEC").name for m in MODULES.values() if getattr(m, "SPEC", None) is not None}
    by_chapter: dict = {}
    for spec in all_specs():  # sorted by file, i.e. book order
        if spec.broken:
            continue
        cur = by_chapter.get(spec.chapter)
        if cur is None or (spec.name in module_main and cur.name not in module_main):
            by_chapter[spec.chapter] = spec
    names = [s.name for s in by_chapter.values()]
    for extra in EXTRA_KERNELS:
        if extra not in names and any(s.name == extra and not s.broken for s in all_specs()):
            names.append(extra)
    order = {s.name: i for i, s in enumerate(all_specs())}
    return sorted(names, key=lambda n: order[n])


def shapes(quick: bool = False) -> list[tuple[tuple[int, int, int], str]]:
    """(shape, tag) pairs: tag "sizes" for the square n x n x n, "suite" for the awkward shapes."""
    sizes = QUICK_SIZES if quick else SIZES
    out = [((n, n, n), "sizes") for n in sizes]
    for s in SUITE:
        if not quick or flops(*s) <= QUICK_MAX_FLOPS:
            if (s, "sizes") not in out:
                out.append((s, "suite"))
    return out


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def plan(kernels: list[str], items: list) -> list[tuple[str, tuple, str]]:
    """(kernel, shape, tag), each kernel's shapes from the cheapest to the dearest.

    The order matters: the time of the next shape is estimated from the last one.
    """
    ordered = sorted(items, key=lambda it: (flops(*it[0]), it[0]))
    return [(k, shape, tag) for k in kernels for shape, tag in ordered]


def estimate_ms(M: int, N: int, K: int, tflops: float) -> float:
    """Milliseconds one launch takes at ``tflops``."""
    return flops(M, N, K) / (tflops * 1e12) * 1e3


class Capper:
    """Decides which (kernel, shape) are too slow to run, from each kernel's last measured speed."""

    def __init__(self, max_launch_ms: float = MAX_LAUNCH_MS, prior: dict | None = None):
        self.max_launch_ms = max_launch_ms
        self.prior = dict(PRIOR_TFLOPS, **(prior or {}))
        self.seen: dict = {}  # kernel -> (TFLOP/s, shape) of its last measurement

    def observe(self, kernel: str, shape, tflops: float):
        if tflops and tflops > 0 and math.isfinite(tflops):
            self.seen[kernel] = (tflops, tuple(shape))

    def rate(self, kernel: str) -> float:
        if kernel in self.seen:
            return self.seen[kernel][0]
        return self.prior.get(kernel, DEFAULT_PRIOR_TFLOPS)

    def skip_reason(self, kernel: str, shape) -> str:
        """Empty when the shape should run; otherwise why not."""
        M, N, K = shape
        rate = self.rate(kernel)
        est = estimate_ms(M, N, K, rate)
        if est <= self.max_launch_ms:
            return ""
        if kernel in self.seen:
            ref = "x".join(map(str, self.seen[kernel][1]))
            basis = f"it ran at {rate:.2g} TFLOP/s at {ref}"
        else:
            basis = f"a first guess of {rate:.2g} TFLOP/s"
        return f"too slow: one launch would take about {est:,.0f} ms ({basis}; the cap is {self.max_launch_ms:g} ms)"


def params_for(kernel: str, M: int, N: int, K: int) -> tuple[dict, str]:
    """(config, where it came from): ``choose_config`` for the final kernel, else the default."""
    from .registry import get

    spec = get(kernel)
    if kernel == "final":
        try:
            from .final import choose_config
        except ImportError:
            return spec.defaults(), "default (helpers.final.choose_config is not available)"
        return spec.resolve(dict(choose_config(M, N, K))), "choose_config"
    return spec.defaults(), "default"


# ------------------------------------------------------------------- running
def _clean(x):
    return x if (x is None or isinstance(x, (int, bool)) or math.isfinite(x)) else None


def run(kernels: list[str] | None = None, quick: bool = False, max_launch_ms: float = MAX_LAUNCH_MS,
        target_s: float | None = None, log=print) -> list[dict]:
    """Measure every (kernel, shape) of the plan; returns rows, one per cell plus cuBLAS per shape.

    Rows have the :class:`helpers.bench.Result` fields plus ``suite`` ("sizes" or
    "suite"), ``status`` ("measured", "skipped", "refused" or "failed"),
    ``reason``, ``config_from`` and ``pct_cublas``. Rows of kernel ``"cublas"``
    hold cuBLAS's own time at each shape.
    """
    from .bench import measure, measure_cublas, tflops as to_tflops
    from .registry import ConfigError

    kernels = list(kernels or main_kernels())
    target_s = target_s or (0.1 if quick else TARGET_S)
    items = shapes(quick)
    todo = plan(kernels, items)
    capper = Capper(max_launch_ms)
    t0 = time.time()
    rows, cache = [], {}
    log(f"benchmark: {len(kernels)} kernels x {len(items)} shapes, cuBLAS timed at each shape first")
    for (M, N, K), tag in sorted(items, key=lambda it: flops(*it[0])):
        tc = measure_cublas(M, N, K, target_s=target_s)
        cache[(M, N, K)] = tc
        tf = to_tflops(M, N, K, tc.ms)
        rows.append({"kernel": "cublas", "params": {}, "M": M, "N": N, "K": K, "ms": tc.ms, "ms_p20": tc.ms_p20,
                     "ms_p80": tc.ms_p80, "tflops": tf, "cublas_ms": tc.ms, "cublas_tflops": tf, "rel_err": 0.0,
                     "ok": True, "reps": tc.reps, "buffers": tc.buffers, "suite": tag, "status": "measured",
                     "reason": "", "config_from": "cupy.matmul", "pct_cublas": 100.0})
        log(f"  cuBLAS {M}x{N}x{K}: {tf:6.2f} TFLOP/s")
    for i, (kernel, (M, N, K), tag) in enumerate(todo, 1):
        base = {"kernel": kernel, "M": M, "N": N, "K": K, "suite": tag,
                "cublas_tflops": to_tflops(M, N, K, cache[(M, N, K)].ms), "cublas_ms": cache[(M, N, K)].ms}
        head = f"[{i}/{len(todo)}] {kernel} {M}x{N}x{K}:"
        try:
            params, origin = params_for(kernel, M, N, K)
        except Exception as exc:
            params, origin = {}, f"no config ({exc})"
        base.update(params=params, config_from=origin)
        why = capper.skip_reason(kernel, (M, N, K))
        if why:
            rows.append(dict(base, status="skipped", reason=why))
            log(f"{head} skipped, {why}")
            continue
        try:
            r = measure(kernel, M, N, K, params, cublas_cache=cache, target_s=target_s)
        except ConfigError as exc:
            rows.append(dict(base, status="refused", reason=str(exc).splitlines()[0]))
            log(f"{head} refused: {str(exc).splitlines()[0]}")
            continue
        except Exception as exc:
            lines = [l for l in str(exc).splitlines() if l.strip()] or [type(exc).__name__]
            rows.append(dict(base, status="failed", reason=f"{type(exc).__name__}: {lines[0][:200]}"))
            log(f"{head} FAILED: {type(exc).__name__}: {lines[0][:200]}")
            continue
        row = dict(r.as_dict(), suite=tag, status="measured", reason="", config_from=origin)
        row["rel_err"] = _clean(row["rel_err"])
        row["pct_cublas"] = 100 * row["tflops"] / row["cublas_tflops"]
        capper.observe(kernel, (M, N, K), row["tflops"])
        rows.append(row)
        flag = "ok" if row["ok"] else f"WRONG (relative error {row['rel_err'] if row['rel_err'] is not None else 'inf'})"
        log(f"{head} {row['tflops']:6.2f} TFLOP/s, {row['pct_cublas']:5.1f}% of cuBLAS  {flag}  "
            f"({time.time() - t0:.0f} s)")
    log(f"benchmark done in {time.time() - t0:.0f} s")
    return rows


@table_recorder("leaderboard")
def record_rows() -> list[dict]:
    """``python -m helpers record --chapter leaderboard``: the full ``bench`` run (about 3 minutes)."""
    return run()


# ---------------------------------------------------------------- reporting
def geomean(values) -> float:
    """Geometric mean of positive numbers (nan for none)."""
    vals = [float(v) for v in values]
    if not vals:
        return math.nan
    if any(v <= 0 for v in vals):
        raise ValueError(f"geometric mean needs positive numbers, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def suite_score(rows: list[dict], kernel: str) -> tuple[float, int, int]:
    """(geometric mean of % of cuBLAS over the suite, shapes counted, shapes in the suite).

    Only correct measurements count: a skipped, refused or wrong cell is left out
    and the count says so.
    """
    suite = [r for r in rows if r["kernel"] == kernel and r.get("suite") == "suite"]
    good = [r for r in suite if r.get("status") == "measured" and r.get("ok")]
    return geomean(100 * r["tflops"] / r["cublas_tflops"] for r in good), len(good), len(suite)


def kernels_in(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if r["kernel"] != "cublas" and r["kernel"] not in out:
            out.append(r["kernel"])
    return out


def shapes_in(rows: list[dict], tag: str) -> list[tuple]:
    """The shapes with the given tag, square sizes by n, the suite in its listed order."""
    found = {(r["M"], r["N"], r["K"]) for r in rows if r.get("suite") == tag}
    listed = [s for s in SUITE if s in found] if tag == "suite" else []
    return listed + sorted(found - set(listed), key=lambda s: (flops(*s), s))


def shape_label(s) -> str:
    M, N, K = s
    return f"n={M}" if M == N == K else f"{M}x{N}x{K}"


def cell(rows: list[dict], kernel: str, shape) -> dict | None:
    for r in rows:
        if r["kernel"] == kernel and (r["M"], r["N"], r["K"]) == tuple(shape):
            return r
    return None


def cell_text(r: dict | None, what: str = "both") -> str:
    """'45.1 (88%)', 'skip', 'refused', 'failed', 'WRONG' or '' for one cell."""
    if r is None:
        return ""
    st = r.get("status")
    if st != "measured":
        return {"skipped": "skip", "refused": "refused", "failed": "failed"}.get(st, st or "?")
    if not r.get("ok"):
        return "WRONG"
    pct = 100 * r["tflops"] / r["cublas_tflops"]
    if what == "pct":
        return f"{pct:.0f}%"
    if what == "tflops":
        return f"{r['tflops']:.1f}"
    return f"{r['tflops']:.1f} ({pct:.0f}%)"


def summary(rows: list[dict], peak_tflops: float) -> list[dict]:
    """One dict per kernel: best square-size result, % of cuBLAS and of the FP32 peak, errors, suite score."""
    out = []
    for k in kernels_in(rows) + ["cublas"]:
        mine = [r for r in rows if r["kernel"] == k]
        measured = [r for r in mine if r.get("status") == "measured"]
        square = [r for r in measured if r.get("suite") == "sizes" and r.get("ok")]
        best = max(square, key=lambda r: r["tflops"]) if square else None
        errs = [r["rel_err"] for r in measured if r.get("rel_err") is not None]
        score, counted, total = suite_score(rows, k) if k != "cublas" else (100.0, 0, 0)
        out.append({
            "kernel": k,
            "best_tflops": best["tflops"] if best else None,
            "best_at": shape_label((best["M"], best["N"], best["K"])) if best else "",
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


def format_table(rows: list[dict], peak_tflops: float) -> str:
    """The leaderboard as plain text: square sizes, the shape suite, and a per-kernel summary."""
    kernels = kernels_in(rows)
    width = max([len(k) for k in kernels] + [8]) + 2
    out = []
    sizes = shapes_in(rows, "sizes")
    if sizes:
        out.append("TFLOP/s (% of cuBLAS) at n x n x n")
        out.append("kernel".ljust(width) + "".join(shape_label(s).rjust(16) for s in sizes))
        for k in kernels + ["cublas"]:
            out.append(k.ljust(width) + "".join(cell_text(cell(rows, k, s)).rjust(16) for s in sizes))
        out.append("")
    suite = shapes_in(rows, "suite")
    if suite:
        out.append("% of cuBLAS over the shape suite (M x N x K), and its geometric mean")
        out.append("kernel".ljust(width) + "".join(shape_label(s).rjust(16) for s in suite) + "geomean".rjust(14))
        for k in kernels:
            score, counted, total = suite_score(rows, k)
            gm = f"{score:.0f}%" + (f" ({counted}/{total})" if counted != total else "") if counted else "–"
            out.append(k.ljust(width) + "".join(cell_text(cell(rows, k, s), "pct").rjust(16) for s in suite)
                       + gm.rjust(14))
        out.append("cublas".ljust(width) + "".join(cell_text(cell(rows, "cublas", s), "tflops").rjust(16)
                                                    for s in suite) + "  (TFLOP/s)")
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
        out.append("")
        out.append("not run:")
        for r in notes:
            out.append(f"  {r['kernel']} {shape_label((r['M'], r['N'], r['K']))}: {r['status']}, {r['reason']}")
    return "\n".join(out)


def html_table(rows: list[dict], peak_tflops: float) -> str:
    """The per-kernel summary and the square sizes as one compact HTML table, for the book."""
    import html

    sizes = shapes_in(rows, "sizes")
    summ = {s["kernel"]: s for s in summary(rows, peak_tflops)}
    right = "style='text-align:right'"
    head = ("<tr><th>kernel</th>" + "".join(f"<th {right}>{shape_label(s)}</th>" for s in sizes)
            + f"<th {right}>% peak</th><th {right}>suite</th><th {right}>max err</th></tr>")

    def td(r):
        text = cell_text(r)
        if r is not None and r.get("status") == "measured" and r.get("ok"):
            pct = 100 * r["tflops"] / r["cublas_tflops"]
            return f"<td {right}><b>{r['tflops']:.1f}</b><br><small>{pct:.0f}%</small></td>"
        why = html.escape(r.get("reason", "") or "") if r is not None else ""
        return f"<td {right} title='{why}'>{html.escape(text)}</td>"

    body = []
    for k in kernels_in(rows) + ["cublas"]:
        s = summ[k]
        if k == "cublas":
            gm, err = "100%", "reference"
        else:
            gm = (f"{s['suite_geomean']:.0f}%" + (f"<br><small>{s['suite_counted']}/{s['suite_total']}</small>"
                                                 if s["suite_counted"] != s["suite_total"] else "")
                  if s["suite_counted"] else "–")
            err = _fmt(s["max_rel_err"], ".0e") + (f"<br><small>{s['wrong']} wrong</small>" if s["wrong"] else "")
        body.append(f"<tr><td title='{html.escape(_title(k))}'><b>{html.escape(k)}</b></td>"
                    + "".join(td(cell(rows, k, sz)) for sz in sizes)
                    + f"<td {right}>{_fmt(s['pct_peak'], '.0f')}%</td><td {right}>{gm}</td><td {right}>{err}</td></tr>")
    return ("<div style='overflow-x:auto'><table class='table leaderboard' style='font-size:0.85em'>"
            "<caption>TFLOP/s at n x n x n with the % of cuBLAS in the same run below it; % of the FP32 peak "
            "at the best n; geometric mean of the % of cuBLAS over the shape suite (shapes counted, if not all); "
            "largest relative error. Hover a kernel for its chapter's title, a skipped cell for the reason."
            "</caption>"
            f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table></div>")


def _title(kernel: str) -> str:
    if kernel == "cublas":
        return "cuBLAS (cupy.matmul, TF32 off)"
    try:
        from .registry import get

        return get(kernel).title
    except KeyError:
        return ""


# ------------------------------------------------------------------ figures
def sizes_figure(rows: list[dict], source: str, title: str = "Every chapter's kernel against cuBLAS"):
    """TFLOP/s over n for every kernel and cuBLAS; a menu switches to % of cuBLAS."""
    import plotly.graph_objects as go

    from . import plots

    kernels = kernels_in(rows) + ["cublas"]
    fig = go.Figure()
    owner = []
    for which, metric in enumerate(("tflops", "pct")):
        for i, k in enumerate(kernels):
            sel = sorted((r for r in rows if r["kernel"] == k and r.get("suite") == "sizes"
                          and r.get("status") == "measured" and r.get("ok")), key=lambda r: r["M"])
            if not sel or (metric == "pct" and k == "cublas"):
                continue
            ys = [r["tflops"] if metric == "tflops" else 100 * r["tflops"] / r["cublas_tflops"] for r in sel]
            colour = plots.CUBLAS_COLOUR if k == "cublas" else plots.PALETTE[i % len(plots.PALETTE)]
            fig.add_trace(go.Scatter(
                x=[r["M"] for r in sel], y=ys, name=_title(k) if k == "cublas" else k, mode="lines+markers",
                line=dict(color=colour, dash="dash" if k == "cublas" else "solid"),
                hovertext=[plots._hover(r) if k != "cublas" else f"cuBLAS n={r['M']}: {r['tflops']:.2f} TFLOP/s"
                           for r in sel], hoverinfo="text", visible=which == 0))
            owner.append(which)
    fig.update_layout(updatemenus=[dict(
        active=0, x=1.0, xanchor="right", y=1.2, yanchor="top",
        buttons=[dict(label="TFLOP/s", method="update",
                      args=[{"visible": [o == 0 for o in owner]}, {"yaxis.title.text": "TFLOP/s"}]),
                 dict(label="% of cuBLAS", method="update",
                      args=[{"visible": [o == 1 for o in owner]}, {"yaxis.title.text": "% of cuBLAS"}])])])
    ns = sorted({r["M"] for r in rows if r.get("suite") == "sizes"})
    fig.update_xaxes(type="log", tickvals=ns, ticktext=[str(n) for n in ns])
    fig.update_yaxes(type="log")
    fig.update_layout(template=plots.TEMPLATE, title=title, xaxis_title="n (M = N = K)", yaxis_title="TFLOP/s",
                      height=500, legend=dict(orientation="v", x=1.02, y=1), margin=dict(t=110))
    return plots.label_source(fig, source)


def suite_figure(rows: list[dict], source: str, title: str = "% of cuBLAS over the shape suite"):
    """Grouped bars: one group per suite shape, one bar per kernel; a menu picks which kernels."""
    import plotly.graph_objects as go

    from . import plots

    kernels = kernels_in(rows)
    suite = shapes_in(rows, "suite")
    labels = [shape_label(s) for s in suite]

    def traces(selected):
        out = []
        for i, k in enumerate(kernels):
            if k not in selected:
                continue
            ys, hover = [], []
            for s in suite:
                r = cell(rows, k, s)
                ok = r is not None and r.get("status") == "measured" and r.get("ok")
                ys.append(100 * r["tflops"] / r["cublas_tflops"] if ok else None)
                hover.append(plots._hover(r) if ok else f"{k} {shape_label(s)}: {cell_text(r) or 'not run'}"
                             + (f"<br>{r['reason'][:90]}" if r is not None and r.get("reason") else ""))
            out.append(go.Bar(x=labels, y=ys, name=k, marker_color=plots.PALETTE[i % len(plots.PALETTE)],
                              hovertext=hover, hoverinfo="text"))
        out.append(go.Scatter(x=labels, y=[100] * len(labels), mode="lines", name="cuBLAS = 100%",
                              line=dict(color=plots.CUBLAS_COLOUR, dash="dash")))
        return out

    last = kernels[-4:]
    steps = [("all kernels", traces(kernels)), ("the last four steps", traces(last))]
    steps += [(k, traces([k])) for k in kernels]
    fig = plots.with_menu(steps, active=1 if len(kernels) > 4 else 0)
    fig.update_layout(template=plots.TEMPLATE, title=title, barmode="group", xaxis_title="M x N x K",
                      yaxis_title="% of cuBLAS (same run)", height=500, margin=dict(t=110))
    return plots.label_source(fig, source)


def roofline_points(rows: list[dict], n: int = 4096, cublas: bool = True) -> list[dict]:
    """Each kernel at n x n x n (the largest square size it ran at, if not n), for plots.roofline."""
    from . import model

    pts = []
    for k in kernels_in(rows):
        sel = [r for r in rows if r["kernel"] == k and r.get("suite") == "sizes" and r.get("status") == "measured"
               and r.get("ok") and r["M"] <= n]
        if not sel:
            continue
        r = max(sel, key=lambda r: r["M"])
        try:
            ai = model.intensity(k, r["params"], r["M"], r["N"], r["K"])
        except Exception:
            continue
        pts.append({"name": f"{k} (n={r['M']})", "short": k, "intensity": ai, "tflops": r["tflops"]})
    cub = [r for r in rows if r["kernel"] == "cublas" and r.get("suite") == "sizes" and r["M"] <= n]
    if cublas and cub:
        r = max(cub, key=lambda r: r["M"])
        # For large square products on sm_90 cuBLAS launches a kernel with 256 x 128 block tiles.
        ai = model.flops(r["M"], r["N"], r["K"]) / model.tiled_bytes(r["M"], r["N"], r["K"], 256, 128)
        pts.append({"name": f"cuBLAS (n={r['M']}, 256x128 tiles)", "short": "cuBLAS", "intensity": ai,
                    "tflops": r["tflops"]})
    return declutter(pts)


def declutter(points: list[dict], min_distance: float = 0.45) -> list[dict]:
    """Keep a point's text label only if no faster labelled point is within ``min_distance``
    (in decades of both axes); the legend and the hover text still name every point."""
    kept = []
    for p in sorted(points, key=lambda p: -p["tflops"]):
        x, y = math.log10(p["intensity"]), math.log10(max(p["tflops"], 1e-9))
        if any(math.hypot(x - kx, y - ky) < min_distance for kx, ky in kept):
            p["short"] = ""
        else:
            kept.append((x, y))
    return points


# ------------------------------------------------------------- for the page
def results():
    """The leaderboard rows: measured now with a GPU (``SGEMM_BOOK_QUICK`` shrinks it), else recorded."""
    from .data import ResultSet, load
    from .mode import device_name, is_live, quick

    if is_live():
        return ResultSet(run(quick=quick()), f"measured live on {device_name()}", True)
    rec = load()
    return ResultSet(rec.rows("leaderboard"), rec.label("leaderboard"), False)


def ceilings_for(rs):
    """Roofline ceilings of the GPU the rows come from (the live one, or the recorded device)."""
    from .data import load
    from .model import ceilings

    return ceilings() if rs.live else ceilings(load().device)


# ---------------------------------------------------------------------- CLI
def parse_args(argv=None) -> argparse.Namespace:
    from .mode import quick as quick_env

    ap = argparse.ArgumentParser(prog="python -m helpers bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"only n = {', '.join(map(str, QUICK_SIZES))} and the suite shapes no bigger, "
                         "with shorter timing (also set by SGEMM_BOOK_QUICK=1)")
    ap.add_argument("--kernels", nargs="+", metavar="NAME",
                    help="kernels to run (default: one per chapter); cuBLAS always runs")
    ap.add_argument("--json", metavar="PATH", help="also write the rows to this JSON file")
    ap.add_argument("--record", action="store_true",
                    help="also store the rows as the chapter \"Leaderboard\" in book/data/<device>.json, "
                         "so the page shows the very run whose table this prints (not with --quick or --kernels)")
    ap.add_argument("--max-ms", type=float, default=MAX_LAUNCH_MS,
                    help=f"skip a kernel at a shape where one launch would take longer (default {MAX_LAUNCH_MS:g})")
    args = ap.parse_args(argv)
    args.quick = args.quick or quick_env()
    if args.max_ms <= 0:
        ap.error("--max-ms must be positive")
    if args.record and (args.quick or args.kernels or args.max_ms != MAX_LAUNCH_MS):
        ap.error("--record stores the full default run only: drop --quick, --kernels and --max-ms "
                 "(and unset SGEMM_BOOK_QUICK)")
    return args


def check_kernels(names: list[str]) -> list[str]:
    """The names, or SystemExit listing the registered kernels."""
    from .registry import REGISTRY, all_specs

    all_specs()
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise SystemExit(f"unknown kernel(s) {unknown}; registered: {sorted(REGISTRY)}")
    return names


def main(argv=None) -> int:
    args = parse_args(argv)
    from .mode import gpu_available

    if not gpu_available():
        print("bench needs a CUDA GPU (cupy.cuda.is_available() is False); the recorded leaderboard "
              "is in the book's chapter \"Leaderboard\"", file=sys.stderr)
        return 2
    kernels = check_kernels(args.kernels) if args.kernels else main_kernels()
    from .model import ceilings

    rows = run(kernels, quick=args.quick, max_launch_ms=args.max_ms)
    peak = ceilings().fp32_tflops
    print()
    print(format_table(rows, peak))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"\nrows written to {args.json}")
    if args.record:
        from .record import save_chapter

        cmd = "python -m helpers bench --record" + (f" --json {args.json}" if args.json else "")
        print(f"\nleaderboard saved to {save_chapter('leaderboard', rows, kind='table', command=cmd)}")
    wrong = [r for r in rows if r.get("status") == "measured" and not r.get("ok")]
    failed = [r for r in rows if r.get("status") == "failed"]
    return 1 if wrong or failed else 0
