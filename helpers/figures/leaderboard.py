"""The leaderboard page (book/13_leaderboard.md): every chapter's kernel against cuBLAS in one run.

Rows come from ``python -m helpers bench`` (:mod:`helpers.measure.bench`), live or
recorded: one row per (kernel, shape) with a ``suite`` tag ("sizes", "suite", "broad")
and a ``status``; rows of kernel ``"cublas"`` hold cuBLAS's own time. Every number on
the page is computed here from those rows and the device they were measured on.
"""
from __future__ import annotations

import math
import statistics

import plotly.graph_objects as go

from .. import settings
from ..measure import bench, datafile, mainline
from ..measure.bench import cell, cell_text, kernels_in, measured_ok, shapes_in, suite_score, summary
from ..measure import results as results_module
from ..measure.results import ResultSet, results
from ..models.roofline import intensity
from ..runtime.specs import get
from ..runtime.specs import final as final_spec
from ..shapes import broad_suite, flops
from ..shapes import label as shape_label
from ..tables import Table, Text
from . import final as final_figures
from . import results as result_figures
from . import style


def _pct(r: dict) -> float:
    return 100 * r["tflops"] / r["cublas_tflops"]


def _shape(r: dict) -> tuple:
    return (r["M"], r["N"], r["K"])


def title(kernel: str) -> str:
    if kernel == "cublas":
        return "cuBLAS (cupy.matmul, TF32 off)"
    try:
        return mainline.title(kernel)
    except KeyError:
        return kernel


VARIANT_GREY = "#b0b0b0"


def line_of(name: str) -> str:
    """"main" for a step of the main line, "variant" for the rest, "" for cuBLAS."""
    return "" if name == "cublas" else ("main" if mainline.is_main(name) else "variant")


# ------------------------------------------------------------------ the climb
def climb_rows(rs: ResultSet, sizes=(4096, 8192)) -> list[dict]:
    """One row per main-line step, then the variants: TFLOP/s at each size and the gain on the
    step before (main line only)."""
    out, before = [], {}
    for name in bench.kernels_in(rs.rows):
        d = {"step": name, "line": line_of(name)}
        for n in sizes:
            r = cell(rs.rows, name, (n, n, n))
            d[f"n={n}"] = cell_text(r, "tflops") or "–"
            if d["line"] == "main" and measured_ok(r):
                d[f"gain at {n}"] = f"{100 * (r['tflops'] / before[n] - 1):+.1f}%" if n in before else ""
                before[n] = r["tflops"]
            else:
                d[f"gain at {n}"] = ""
        out.append(d)
    return out


def climb_table(rs: ResultSet, sizes=(4096, 8192)) -> Table:
    """The main line in chapter order with each step's gain on the one before, then the variants apart."""
    rows = climb_rows(rs, sizes)
    return Table(rows, caption="TFLOP/s at n x n x n (same run); the main line (one kernel per chapter, each on "
                               "the fastest so far) with each step's gain on the step before it, then the variants")


def climb_figure(rs: ResultSet, sizes=(4096, 8192)) -> go.Figure:
    """Bars: the main line in chapter order, coloured, the variants apart in grey, cuBLAS as a
    dashed line; the menu picks n."""
    # a kernel measured at none of these sizes (too slow to run there) would be an empty place
    every = bench.kernels_in(rs.rows)
    names = [k for k in every if any(measured_ok(cell(rs.rows, k, (n, n, n))) for n in sizes)]
    left_out = [k for k in every if k not in names]
    top = max([r["tflops"] for r in rs.rows if r.get("suite") == "sizes" and r["M"] in sizes and measured_ok(r)]
              + [1.0]) * 1.15
    steps = []
    for n in sizes:
        traces = []
        cub = cell(rs.rows, "cublas", (n, n, n))
        for group in ("main", "variant"):
            sel = [k for k in names if line_of(k) == group]
            rows = [cell(rs.rows, k, (n, n, n)) for k in sel]
            ys = [r["tflops"] if measured_ok(r) else None for r in rows]
            # a value above its bar, or inside it at its top where cuBLAS's line would cross it
            where = ["inside" if y and result_figures.label_inside(y, cub and cub["tflops"], top) else "outside" for y in ys]
            traces.append(go.Bar(
                x=sel, y=ys, name="main line" if group == "main" else "variants (not on the main line)",
                marker_color=[style.colour(k) if group == "main" else VARIANT_GREY for k in sel],
                # the main line's bars have a colour each (the legend would show one of them)
                showlegend=group != "main",
                # upright and of one size inside a bar as above one (Plotly would turn a label on its
                # side, or shrink it, to fit a phone's narrow bars)
                text=[f"{y:.1f}" if y else "" for y in ys], textposition=where, insidetextanchor="end",
                textangle=0, constraintext="none", textfont=dict(size=style.FONT - 2), cliponaxis=False,
                hovertext=[result_figures.hover(r) if measured_ok(r) else f"{k}: {cell_text(r) or 'not run'}"
                           for k, r in zip(sel, rows)], hoverinfo="text"))
        if cub is not None:
            traces.append(go.Scatter(x=names, y=[cub["tflops"]] * len(names), mode="lines", name="cuBLAS",
                                     line=dict(color=style.CUBLAS, dash="dash")))
        steps.append((f"n = {n}", traces, f"The main line at n = {n}, and the variants"))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(range=[0, top])
    fig.update_xaxes(tickangle=-45)
    note = rs.source + (f"; not run at these sizes: {', '.join(left_out)}" if left_out else "")
    return style.finish(fig, fig.layout.title.text, None, "TFLOP/s", note, height=560)


def _lower_first(title: str) -> str:
    """A step's title inside a sentence ("Float4 loads, transposed A tile" -> "float4 loads, transposed A tile")."""
    return title[:1].lower() + title[1:]


def climb_text(rs: ResultSet, sizes=(4096, 8192)) -> Text:
    """Whether the main line rises at every step at each size, or where it waits for a record."""
    awaiting = mainline.awaiting_record(rs.rows)
    if awaiting:
        return Text("*This run predates the current main line:* " + "; ".join(awaiting)
                    + ". The climb below is the recorded one; the next record of the leaderboard measures the "
                      "main line as it is now.")
    parts = []
    for n in sizes:
        fall = mainline.falls(rs.rows, n)
        climb = [(name, tf) for name, tf in mainline.climb(rs.rows, n) if tf]
        if not climb:
            parts.append(f"this run has no measurement at n = {n}")
            continue
        if fall:
            parts.append(f"at n = {n} it does not rise at " + ", ".join(f"{b} ({100 * (x - 1):+.1f}% on {a})"
                                                                       for a, b, x in fall))
            continue
        # every step within mainline.TIE of the one before, whether its chapter explains a tie or it simply rises
        close = [(b, y / x) for (_, x), (b, y) in zip(climb, climb[1:]) if abs(y / x - 1) <= mainline.TIE]
        near = ("" if not close else "; " + ", ".join(f"{_lower_first(mainline.title(b))} ({100 * (x - 1):+.1f}%)"
                                                      for b, x in close) + " within 1% of the step before")
        parts.append(f"at n = {n} no step falls below the one before, up to {climb[-1][1]:.1f} TFLOP/s{near}")
    why = [f"{mainline.title(s.name)}: {s.tie}" for s in mainline.STEPS
           if s.tie and any(b == s.name for n in sizes for _, b, _ in mainline.level(rs.rows, n))]
    return Text("The main line: " + "; ".join(parts) + "." + (
        " A step may be level with the one before (within 1%) only where its chapter says why ("
        + "; ".join(why) + "); every other step must be faster." if why else ""))


# ------------------------------------------------------------------ the data
def recorded(chapter: str = "leaderboard") -> ResultSet:
    """A data source's recorded rows, in live mode too (the intro quotes the recorded run)."""
    return results_module.recorded(chapter)


def overview(rs: ResultSet) -> Text:
    rows = rs.rows
    shapes = {_shape(r) for r in rows}
    return Text(f"{len(kernels_in(rows))} kernels and cuBLAS at {len(shapes)} shapes, "
                f"{sum(r.get('status') == 'measured' for r in rows)} measurements, {rs.source}; "
                f"FP32 peak of the {rs.device.label}: {rs.device.fp32_tflops:.1f} TFLOP/s.")


def outlier_shapes(rows: list[dict], kernel: str = "final", tag: str = "suite") -> list[tuple]:
    """Suite shapes where ``kernel``'s % of cuBLAS lies outside Tukey's fences of its own
    suite results (:func:`helpers.figures.final.outliers`): left out of the second mean."""
    good = [r for r in rows if bench.name(r) == kernel and r.get("suite") == tag and measured_ok(r)]
    return [_shape(r) for r in final_figures.outliers(good)]


def score_without(rows: list[dict], kernel: str, skip, tag: str = "suite") -> tuple[float, int]:
    """(geometric mean of % of cuBLAS, shapes counted) over the suite without the ``skip`` shapes."""
    good = [r for r in rows if bench.name(r) == kernel and r.get("suite") == tag and measured_ok(r)
            and _shape(r) not in set(skip)]
    return (bench.geomean(_pct(r) for r in good), len(good)) if good else (math.nan, 0)


# ------------------------------------------------------------------ tables
def table(rs: ResultSet) -> Table:
    """One row per kernel: TFLOP/s (% of cuBLAS) at each square size, % of the FP32 peak at
    its best size, the suite's geometric mean (shapes counted if not all), the largest error."""
    rows = rs.rows
    sizes = shapes_in(rows, "sizes")
    out = []
    for s in summary(rows, rs.device.fp32_tflops):
        k = s["kernel"]
        d = {"kernel": k}
        for sz in sizes:
            d[shape_label(sz)] = cell_text(cell(rows, k, sz))
        d["% of peak"] = f"{s['pct_peak']:.0f}%" if s["pct_peak"] is not None else "–"
        if k == "cublas":
            d["suite"], d["max error"] = "100%", "reference"
        else:
            counted = "" if s["suite_counted"] == s["suite_total"] else f" ({s['suite_counted']}/{s['suite_total']})"
            d["suite"] = "–" if not s["suite_counted"] else f"{s['suite_geomean']:.0f}%" + counted
            d["max error"] = (f"{s['max_rel_err']:.0e}" if s["max_rel_err"] is not None else "–") + (
                f", {s['wrong']} wrong" if s["wrong"] else "")
        out.append(d)
    return Table(out, caption="TFLOP/s (% of cuBLAS, same run) at n x n x n; % of the FP32 peak at the best n; "
                              "geometric mean of % of cuBLAS over the suite; largest relative error")


def plain_table(rs: ResultSet) -> Text:
    """The table exactly as ``python -m helpers bench`` prints it (a scrolling code block)."""
    return Text("```text\n" + bench.format_table(rs.rows, rs.device.fp32_tflops) + "\n```")


def scores_table(rows: list[dict]) -> Table:
    """Per kernel: the suite's geometric mean, with and without the outlier shapes, and its lowest shape."""
    skip = outlier_shapes(rows)
    out = []
    for k in kernels_in(rows):
        score, counted, total = suite_score(rows, k)
        without, n_without = score_without(rows, k, skip)
        low = bench.lowest(rows, k)
        out.append({"kernel": k, "geometric mean": f"{score:.1f}%" if counted else "–",
                    "shapes": f"{counted}/{total}",
                    "without " + (", ".join(shape_label(s) for s in skip) or "outliers"):
                        f"{without:.1f}%" if n_without else "–",
                    "lowest": f"{_pct(low):.0f}% at {shape_label(_shape(low))}" if low else "–"})
    return Table(out, caption="% of cuBLAS over the suite (geometric mean of correct results); outliers: "
                              "shapes outside 1.5 interquartile ranges of the final kernel's results")


# ------------------------------------------------------------------ sentences
def headline(rs: ResultSet) -> Text:
    """The fastest kernel, how close it gets to cuBLAS and the peak, and how far it came from the first."""
    rows = rs.rows
    summ = {s["kernel"]: s for s in summary(rows, rs.device.fp32_tflops)}
    ranked = [s for k, s in summ.items() if k != "cublas" and s["best_tflops"]]
    if not ranked:
        return Text("No kernel was measured.")
    top = max(ranked, key=lambda s: s["best_tflops"])
    first = summ[kernels_in(rows)[0]]
    text = (f"Fastest kernel: **{top['kernel']}**, {top['best_tflops']:.1f} TFLOP/s at {top['best_at']}, "
            f"{top['pct_cublas']:.0f}% of cuBLAS in the same run and {top['pct_peak']:.0f}% of the FP32 peak.")
    if first["best_tflops"] and first is not top:
        text += (f" The first kernel, {first['kernel']}, peaked at {first['best_tflops']:.2g} TFLOP/s: "
                 f"{top['best_tflops'] / first['best_tflops']:.0f} times slower.")
    return Text(text)


def closeness(rs: ResultSet, kernel: str = "final") -> Text:
    """How close ``kernel`` gets to cuBLAS in the rows: at the two largest squares, and over the
    suite with and without outliers (the leaderboard chapter has every size and shape). The
    book's introduction quotes it."""
    rows = rs.rows
    sq = sorted((r for r in rows if bench.name(r) == kernel and r.get("suite") == "sizes" and measured_ok(r)),
                key=lambda r: r["M"])
    if not sq:
        return Text(f"The recorded leaderboard has no square-size result for the {kernel} kernel.")
    big = sq[-2:]                  # the largest sizes: the ones a fast kernel is judged by
    text = (f"In the leaderboard run ({rs.source}) the {kernel} kernel reaches "
            + " and ".join(f"**{_pct(r):.0f}%** of cuBLAS at n = {r['M']}" for r in big))
    score, counted, _ = suite_score(rows, kernel)
    if counted:
        skip = outlier_shapes(rows, kernel)
        text += f". Over the {counted} shapes of the suite the geometric mean is {score:.0f}%"
        if skip:
            without, n = score_without(rows, kernel, skip)
            moves = "lifts" if without < score else "lowers"
            text += (f"; without {', '.join(shape_label(s) for s in skip)} (at "
                     + ", ".join(f"{_pct(cell(rows, kernel, s)):.0f}%" for s in skip)
                     + f" it {moves} the mean), it is {without:.0f}% over {n} shapes")
    return Text(text + ".")


# ------------------------------------------------------------------ figures
def sizes_figure(rows: list[dict], source: str, title_text: str = "Every kernel against cuBLAS") -> go.Figure:
    """TFLOP/s over n for every kernel and cuBLAS (log-log); the menu switches to % of cuBLAS."""
    kernels = kernels_in(rows) + ["cublas"]
    steps, values = [], []
    for metric, label in (("tflops", "TFLOP/s"), ("pct", "% of cuBLAS")):
        traces = []
        for k in kernels:
            sel = sorted((r for r in rows if bench.name(r) == k and r.get("suite") == "sizes" and measured_ok(r)),
                         key=lambda r: r["M"])
            if not sel or (metric == "pct" and k == "cublas"):
                continue
            ys = [r["tflops"] if metric == "tflops" else _pct(r) for r in sel]
            values += ys
            traces.append(go.Scatter(
                x=[r["M"] for r in sel], y=ys, name=k, mode="lines+markers",
                line=dict(color=style.colour(k), dash="dash" if k == "cublas" else "solid", width=2),
                marker=dict(size=7), hoverinfo="text",
                hovertext=[(f"cuBLAS n={r['M']}: {r['tflops']:.2f} TFLOP/s" if k == "cublas"
                            else result_figures.hover(r)) for r in sel]))
        if metric == "pct":
            ns = sorted({r["M"] for r in rows if r.get("suite") == "sizes"})
            traces.append(go.Scatter(x=ns, y=[100] * len(ns), mode="lines", name="cuBLAS = 100%",
                                     line=dict(color=style.CUBLAS, dash="dash")))
        steps.append((label, traces, f"{title_text}: {label}"))
    fig = style.steps_figure(steps, active=0)
    for button, (label, _, _) in zip(fig.layout.updatemenus[0].buttons, steps):
        button.args = [button.args[0], dict(button.args[1], **{"yaxis.title.text": label})]
    ns = sorted({r["M"] for r in rows if r.get("suite") == "sizes"})
    style.log_axis(fig, "x", ns, "n (M = N = K)", exact=True)
    style.log_axis(fig, "y", values + [100], "TFLOP/s")
    return style.finish(fig, fig.layout.title.text, source=source, height=560)


SUITE_GROUPS = (("all kernels", None), ("the main line's last four", 4), ("final and cuBLAS", 1))


def suite_figure(rows: list[dict], source: str, title_text: str = "The suite, % of cuBLAS") -> go.Figure:
    """Horizontal bars: one group per suite shape, one bar per kernel, a line at 100%; the menu
    picks all kernels, the main line's last four, or the final kernel alone. Missing bars say why
    in the hover."""
    kernels = kernels_in(rows)
    suite = shapes_in(rows, "suite")
    labels = [shape_label(s) for s in suite]
    most = max([_pct(r) for r in rows if r["kernel"] != "cublas" and r.get("suite") == "suite" and measured_ok(r)]
               + [100])
    steps = []
    main = [k for k in kernels if line_of(k) == "main"]
    for name, last in SUITE_GROUPS:
        chosen = kernels if last is None else main[-last:]      # the last steps of the main line, no variant
        traces = []
        for k in chosen:
            xs, hover = [], []
            for s in suite:
                r = cell(rows, k, s)
                ok = measured_ok(r)
                xs.append(_pct(r) if ok else None)
                hover.append(result_figures.hover(r) if ok else f"{k} {shape_label(s)}: {cell_text(r) or 'not run'}"
                             + (f"<br>{r['reason'][:90]}" if r is not None and r.get("reason") else ""))
            traces.append(go.Bar(y=labels, x=xs, name=k, orientation="h", marker_color=style.colour(k),
                                 hovertext=hover, hoverinfo="text",
                                 text=[f"{x:.0f}%" if x is not None else "" for x in xs] if len(chosen) <= 4 else None,
                                 # past the bar, or inside its end where the line at 100% would cross it
                                 textposition=["inside" if x is not None and result_figures.label_inside(
                                     x, 100.0, most * 1.18) else "outside" for x in xs],
                                 insidetextanchor="end", constraintext="none", cliponaxis=False))
        traces.append(go.Scatter(x=[100] * len(labels), y=labels, mode="lines", name="cuBLAS = 100%",
                                 line=dict(color=style.CUBLAS, dash="dash")))
        steps.append((name, traces, f"{title_text}: {name}"))
    fig = style.steps_figure(steps, active=1 if len(kernels) > 4 else 0)
    fig.update_layout(barmode="group", bargap=0.18)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, most * 1.18])
    return style.finish(fig, fig.layout.title.text, "% of cuBLAS (same run)", None, source, height=720)


CUBLAS_TILE = final_figures.CUBLAS_TILE


def roofline_points(rows: list[dict], n: int = 4096, cublas: bool = True) -> list[dict]:
    """Each kernel at n x n x n (or the largest square size below it that it ran), at its tile's intensity."""
    pts = []
    for k in kernels_in(rows):
        sel = [r for r in rows if bench.name(r) == k and r.get("suite") == "sizes" and measured_ok(r) and r["M"] <= n]
        if not sel:
            continue
        r = max(sel, key=lambda r: r["M"])
        pts.append({"name": f"{k} (n={r['M']})", "kernel": k, "short": k,
                    "intensity": intensity(r["kernel"], r["params"], *_shape(r)), "tflops": r["tflops"]})
    cub = [r for r in rows if r["kernel"] == "cublas" and r.get("suite") == "sizes" and r["M"] <= n]
    if cublas and cub:
        r = max(cub, key=lambda r: r["M"])
        bm, bn = CUBLAS_TILE
        M, N, K = _shape(r)
        ai = flops(M, N, K) / (4 * M * N * K * (1 / bm + 1 / bn) + 4 * M * N)
        pts.append({"name": f"cuBLAS (n={r['M']}, intensity of a {bm}x{bn} tile)", "kernel": "cublas",
                    "short": "cuBLAS", "intensity": ai, "tflops": r["tflops"]})
    return declutter(spread(pts))


SPREAD_DECADES = 0.035   # how far apart, on the log intensity axis, points of one intensity are drawn


def spread(points: list[dict], close: float = 0.02) -> list[dict]:
    """Points at (nearly) one intensity, say every kernel of a 128 x 128 tile, drawn side by side
    in order of speed, SPREAD_DECADES apart, so that none hides another (cuBLAS and the final
    kernel share a tile); the hover keeps each point's own intensity (``true_intensity``)."""
    groups: list[list[dict]] = []
    for p in sorted(points, key=lambda p: p["intensity"]):
        if groups and math.log10(p["intensity"]) - math.log10(groups[-1][0]["intensity"]) < close:
            groups[-1].append(p)
        else:
            groups.append([p])
    for g in groups:
        for j, p in enumerate(sorted(g, key=lambda p: p["tflops"])):
            p["true_intensity"] = p["intensity"]
            if len(g) > 1:
                p["intensity"] *= 10 ** (SPREAD_DECADES * (j - (len(g) - 1) / 2))
                p["note"] = f"drawn beside {style.plural(len(g) - 1, 'other')} of this intensity"
    return points


def declutter(points: list[dict], min_distance: float = 0.3) -> list[dict]:
    """Keep a point's text label only if no faster labelled point is within ``min_distance``
    decades (both axes); the legend and the hover still name every point."""
    kept = []
    for p in sorted(points, key=lambda p: -p["tflops"]):
        x, y = math.log10(p["intensity"]), math.log10(max(p["tflops"], 1e-9))
        if any(math.hypot(x - kx, y - ky) < min_distance for kx, ky in kept):
            p["short"] = ""
        else:
            kept.append((x, y))
    return points


def roofline_figure(rs: ResultSet, n: int = 4096) -> go.Figure:
    """Every kernel on the roofline of the device its rows were measured on."""
    points = roofline_points(rs.rows, n)
    fig = result_figures.roofline(points, rs.device, rs.source, title="Every chapter's kernel on the roofline")
    fig.update_layout(height=720)
    symbols = ("circle", "diamond", "square", "triangle-up", "x", "star", "triangle-down", "cross", "hexagon")
    for i, t in enumerate(t for t in fig.data if t.mode and "markers" in t.mode):
        name = (t.name or "").split(" (")[0]
        grey = line_of(name) == "variant"
        t.update(marker=dict(symbol=symbols[i % len(symbols)], size=12, line=dict(width=1, color="#222"),
                             **({"color": VARIANT_GREY} if grey else {})))
    return zoom_menu(final_figures.tidy_roofline(fig, points, rs.device), points)


ZOOM_SHARE = 4          # the zoomed view holds the points within this factor of the fastest


def zoom_menu(fig: go.Figure, points: list[dict]) -> go.Figure:
    """A menu between the whole roofline and the fastest kernels spread out: at the whole roofline's
    scale they crowd its top right corner, their labels over each other's markers."""
    top = max(p["tflops"] for p in points)
    near = [p for p in points if p["tflops"] >= top / ZOOM_SHARE]
    xs, ys = [p["intensity"] for p in near], [p["tflops"] for p in near]
    whole = {"xaxis.range": list(fig.layout.xaxis.range), "yaxis.range": list(fig.layout.yaxis.range)}
    zoom = {"xaxis.range": [math.log10(min(xs) / 1.5), math.log10(max(xs) * 1.5)],
            "yaxis.range": [math.log10(min(ys) / 1.15), math.log10(max(ys) * 1.15)]}
    fig.update_layout(updatemenus=[dict(
        active=0, type="dropdown", x=0, xanchor="left", y=1.0, yanchor="bottom", pad=dict(b=8),
        buttons=[dict(label="every kernel", method="relayout", args=[whole]),
                 dict(label=f"the {len(near)} fastest, spread out", method="relayout", args=[zoom])])])
    fig.layout.margin.t += 40                # room for the menu above the plot, as finish() gives one
    fig.layout.height += 40
    return fig


# ------------------------------------------------------------------ the broad suite
HOST_BOUND_US = 35      # below this a product's time from Python is mostly the call's host time (about 20 us),
                        # unless the launches were queued behind a wait on the GPU (rows with "queued")
BROAD_KINDS = ("drawn freely", "skinny (M or N at most 256)", "long K (K about 8 max(M, N) or more)")


def broad_kind(shape) -> str:
    """Which third of :func:`helpers.shapes.broad_suite` a shape was drawn in."""
    listed = broad_suite()
    if tuple(shape) in listed:
        return BROAD_KINDS[listed.index(tuple(shape)) % 3]
    M, N, K = shape
    if min(M, N) <= 256:
        return BROAD_KINDS[1]
    return BROAD_KINDS[2] if K >= 8 * max(M, N) else BROAD_KINDS[0]


def broad_results() -> ResultSet | Text:
    """The broad suite's rows (data source ``broad_suite``), or a sentence saying they are missing."""
    try:
        return results("broad_suite")
    except (datafile.DataError, KeyError) as exc:
        return Text(f"*The broad suite has not been recorded here yet* ({exc}).")


def broad_rows(rows: list[dict], kernel: str = "final") -> list[dict]:
    return [r for r in rows if bench.name(r) == kernel and r.get("suite") == "broad" and measured_ok(r)]


def broad_figure(rs: ResultSet | Text, kernel: str = "final") -> go.Figure | Text:
    """% of cuBLAS against the product's size for every broad-suite shape, by how it was drawn."""
    if isinstance(rs, Text):
        return rs
    good = broad_rows(rs.rows, kernel)
    if not good:
        return Text("No correct broad-suite measurement in these rows.")
    fig = go.Figure()
    for i, kind in enumerate(BROAD_KINDS):
        sel = [r for r in good if broad_kind(_shape(r)) == kind]
        if not sel:
            continue
        fig.add_trace(go.Scatter(
            x=[flops(*_shape(r)) / 1e9 for r in sel], y=[_pct(r) for r in sel], mode="markers", name=kind,
            marker=dict(size=10, color=style.PALETTE[(2 * i + 1) % len(style.PALETTE)],
                        symbol=("circle", "diamond", "square")[i], line=dict(width=1, color="#333")),
            hovertext=[result_figures.hover(r) for r in sel], hoverinfo="text"))
    xs = [flops(*_shape(r)) / 1e9 for r in good]
    fig.add_trace(go.Scatter(x=[min(xs), max(xs)], y=[100, 100], mode="lines", name="cuBLAS = 100%",
                             line=dict(color=style.CUBLAS, dash="dash")))
    style.log_axis(fig, "x", xs, "size of the product (GFLOP, log scale)")
    fig.update_yaxes(title="% of cuBLAS (same run)")
    return style.finish(fig, f"The {kernel} kernel on {len(good)} random shapes", source=rs.source,
                        height=500)


def broad_text(rs: ResultSet | Text, kernel: str = "final", worst: int = 3) -> Text:
    """The broad suite in numbers: geometric mean, median, range, per kind, the worst shapes."""
    if isinstance(rs, Text):
        return rs
    all_rows = [r for r in rs.rows if bench.name(r) == kernel and r.get("suite") == "broad"]
    good = broad_rows(rs.rows, kernel)
    if not good:
        return Text("No correct broad-suite measurement in these rows.")
    pct = sorted(_pct(r) for r in good)
    low = sorted(good, key=_pct)[:worst]
    text = (f"{len(good)} of {len(all_rows)} shapes measured and correct. Geometric mean **{bench.geomean(pct):.1f}%** "
            f"of cuBLAS, median {statistics.median(pct):.1f}%, from {pct[0]:.0f}% to {pct[-1]:.0f}%; "
            f"{sum(p >= 100 for p in pct)} shapes at or above cuBLAS, {sum(p < 90 for p in pct)} below 90%. By kind: "
            + "; ".join(f"{kind}: {bench.geomean(_pct(r) for r in sel):.0f}% over {len(sel)}"
                        for kind in BROAD_KINDS if (sel := [r for r in good if broad_kind(_shape(r)) == kind]))
            + ". Lowest: " + ", ".join(f"{r['M']}x{r['N']}x{r['K']} ({_pct(r):.0f}%)" for r in low) + ".")
    short = [r for r in good if flops(*_shape(r)) / (r["cublas_tflops"] * 1e12) * 1e6 < HOST_BOUND_US]
    if all(r.get("queued") for r in good):
        if short:
            text += (f" {len(short)} shapes take cuBLAS under {HOST_BOUND_US:g} µs; their launches were timed queued "
                     "behind a wait on the GPU, so both sides' times are the GPU's, without the host's time of a "
                     "call from Python.")
    elif short and len(short) < len(good):
        rest = [_pct(r) for r in good if r not in short]
        text += (f" {len(short)} shapes take cuBLAS under {HOST_BOUND_US:g} µs: there the host time of a call from "
                 "Python is most of what both sides measure, and the ratio moves from run to run. Without them the "
                 f"geometric mean is {bench.geomean(rest):.1f}% over {len(rest)} shapes.")
    return Text(text)


def tile_cover(r: dict) -> float:
    """The area the block tiles of a row's config cover over the output's own: a tile that crosses
    an edge of C still costs a whole tile's work."""
    p = r["params"]
    return final_spec.tiles_of(p, r["M"], r["N"]) * p["BM"] * p["BN"] / (r["M"] * r["N"])


def broad_cover_text(rs: ResultSet | Text, kernel: str = "final") -> Text:
    """How much more than the output the chosen tiles cover, on the lowest and the highest third."""
    if isinstance(rs, Text):
        return rs
    good = sorted(broad_rows(rs.rows, kernel), key=_pct)
    third = len(good) // 3
    if third < 2:
        return Text("Too few broad-suite shapes here to compare the lowest and the highest third.")
    low, high = good[:third], good[-third:]
    cover = {name: bench.geomean(tile_cover(r) for r in part) for name, part in (("low", low), ("high", high))}
    pct = {name: bench.geomean(_pct(r) for r in part) for name, part in (("low", low), ("high", high))}
    measured = (f"over the lowest third of the shapes ({third}, at {pct['low']:.0f}% of cuBLAS) the chosen block "
                f"tiles cover {cover['low']:.2f} times the output's area, against {cover['high']:.2f} times over the "
                f"highest third (at {pct['high']:.0f}%)")
    if cover["low"] > 1.05 * cover["high"]:
        return Text("Part of the gap is the tiles. A tile that crosses an edge of C costs a whole tile's work, and "
                    + measured + ". Smaller tiles would throw less work away there, but each value they load "
                    "feeds fewer multiply-adds; cuBLAS has many kernels to choose from for such shapes.")
    return Text("The tiles do not explain the gap: " + measured + ", so the lowest shapes do not throw away "
                "more of their work on tiles that cross an edge of C.")


def broad_view(rs: ResultSet | Text, kernel: str = "final") -> Text | None:
    """Show the broad-suite figure, or return the sentence that says why there is none."""
    fig = broad_figure(rs, kernel)
    if isinstance(fig, Text):
        return fig
    style.show(fig)
    return None


# ------------------------------------------------------------------ every recorded GPU
def devices_rows(kernel: str = "final", sizes=(4096, 8192)) -> list[dict]:
    """Per recorded GPU (every device file, the reference first): ``kernel``'s % of cuBLAS at the
    square ``sizes`` of its leaderboard and over its broad suite; GPUs with neither are left out."""
    reference = settings.reference_device()
    out = []
    for name, path in sorted(datafile.device_files().items(), key=lambda kv: kv[0] != reference):
        chapters = datafile.read(path)["chapters"]
        board = chapters.get("leaderboard", {}).get("rows", [])
        squares = {r["M"]: _pct(r) for r in board if bench.name(r) == kernel and r.get("suite") == "sizes"
                   and measured_ok(r) and r["M"] == r["N"] == r["K"] and r["M"] in sizes}
        broad = [_pct(r) for r in broad_rows(chapters.get("broad_suite", {}).get("rows", []), kernel)]
        if not squares and not broad:
            continue
        dates = sorted({chapters[c]["recorded"][:10] for c in ("leaderboard", "broad_suite") if c in chapters})
        out.append(dict(device=name, reference=name == reference, recorded=" and ".join(dates),
                        squares=squares, broad=broad))
    return out


def devices_table(kernel: str = "final", sizes=(4096, 8192)) -> Table | Text:
    """The big squares and the broad suite on every recorded GPU, % of cuBLAS in the same run."""
    rows = devices_rows(kernel, sizes)
    if not rows:
        return Text("*No GPU has a recorded leaderboard or broad suite here yet.*")
    out = []
    for d in rows:
        row = {"GPU": d["device"] + (" (reference)" if d["reference"] else ""), "recorded": d["recorded"]}
        for n in sizes:
            row[f"{n}³"] = f"{d['squares'][n]:.1f}%" if n in d["squares"] else "–"
        b = d["broad"]
        row["broad suite"] = f"{bench.geomean(b):.1f}% over {len(b)}" if b else "–"
        row["lowest"] = f"{min(b):.0f}%" if b else "–"
        row["under 80%"] = str(sum(p < 80 for p in b)) if b else "–"
        out.append(row)
    return Table(out, caption=f"{title(kernel)}, % of cuBLAS in the same run: at n³, and the broad suite's "
                              "geometric mean, lowest shape and shapes under 80%, on each GPU with recorded data "
                              "(reference: the GPU of the other figures)")


# ------------------------------------------------------------------ the four layouts
LAYOUT_WORDS = {"NN": "A and B row-major", "NT": "B a transposed view", "TN": "A a transposed view",
                "TT": "both transposed views"}


def layouts_results() -> ResultSet | Text:
    """The layouts run's rows (data source ``layouts``), or a sentence saying they are missing."""
    try:
        return results("layouts")
    except (datafile.DataError, KeyError) as exc:
        return Text(f"*The four layouts have not been recorded here yet* ({exc}).")


def layouts_table(rs: ResultSet | Text) -> Table | Text:
    """A row per layout: TFLOP/s and % of cuBLAS on the same views at each size."""
    if isinstance(rs, Text):
        return rs
    sizes = bench.layout_sizes(rs.rows)
    out = [{"layout": lay, "operands": LAYOUT_WORDS[lay],
            **{f"n = {n}": cell_text(bench.layout_cell(rs.rows, n, lay)) for n in sizes}} for lay in bench.LAYOUTS]
    return Table(out, caption="helpers.sgemm: TFLOP/s (% of cupy.matmul on the same views, same run); "
                              f"{rs.source}")


def layouts_text(rs: ResultSet | Text) -> Text:
    """How many calls were correct, and per size the lowest and the highest layout."""
    if isinstance(rs, Text):
        return rs
    rows = [r for r in rs.rows if r.get("suite") == "layouts"]
    good = [r for r in rows if measured_ok(r)]
    if not good:
        return Text("No correct measurement of the four layouts in these rows.")
    parts = []
    for n in bench.layout_sizes(good):
        at = sorted((r for r in good if r["M"] == n), key=_pct)
        parts.append(f"n = {n}: {_pct(at[0]):.1f}% ({at[0]['layout']}) to {_pct(at[-1]):.1f}% ({at[-1]['layout']})")
    low = min(good, key=_pct)
    n = max(bench.layout_sizes(good))
    cub = sorted((r for r in good if r["M"] == n), key=lambda r: r["cublas_tflops"])
    return Text(f"{len(good)} of {len(rows)} calls measured and correct. From the slowest layout to the fastest, "
                "as % of cuBLAS on the same views: " + "; ".join(parts) + ". The lowest of all is "
                f"{low['layout']} at n = {low['M']}, {_pct(low):.1f}%. cuBLAS runs a kernel of its own for each "
                f"layout, so the denominator moves too: at n = {n} it ran at {cub[0]['cublas_tflops']:.1f} TFLOP/s "
                f"({cub[0]['layout']}) to {cub[-1]['cublas_tflops']:.1f} ({cub[-1]['layout']}).")


def cap_text(rs: ResultSet) -> Text:
    """Which cells the run skipped as too slow, refused or lost to a failure, and why."""
    skipped = [r for r in rs.rows if r.get("status") == "skipped"]
    other = [r for r in rs.rows if r.get("status") in ("refused", "failed")]
    text = (f"A kernel is not run at a shape where one launch would take longer than {bench.MAX_LAUNCH_MS:g} ms, "
            "estimated from its own speed at the previous, smaller shape. ")
    if skipped:
        text += (f"In this run {style.plural(len(skipped), 'cell')} {'was' if len(skipped) == 1 else 'were'} skipped that way: "
                 + ", ".join(f"{r['kernel']} at {shape_label(_shape(r))}" for r in skipped) + ".")
    else:
        text += "In this run no cell was skipped."
    if other:
        text += " Not run for other reasons: " + "; ".join(
            f"{r['kernel']} at {shape_label(_shape(r))}, {r['status']}: {r.get('reason', '')}" for r in other) + "."
    return Text(text)
