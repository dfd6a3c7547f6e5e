"""Figures of timing rows, live or recorded: throughput over n, configs side by side,
one step against the last, the roofline.

Every builder takes rows (dicts in the :class:`helpers.runtime.timing.Result` format) and a
``source`` ("recorded on NVIDIA H200, 2026-11-22" or "measured live on ..."), which the
figure states, so a reader always knows where a number came from. Interactivity uses
Plotly's own sliders and menus: it works in the static book with no kernel behind the page.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go

from ..hardware import Device
from ..runtime.specs import get
from ..shapes import label as shape_label
from . import style


def join_sources(sources) -> str:
    """Several rows' sources as one note, each once: the dates of one device's records
    together ("recorded on NVIDIA H200, 2026-11-24 and 2026-11-25")."""
    parts, dates = [], {}
    for src in dict.fromkeys(sources):
        m = re.fullmatch(r"recorded on (.+), (\d{4}-\d{2}-\d{2})", src)
        if m is None:
            parts.append(src)
        else:
            if m.group(1) not in dates:
                dates[m.group(1)] = []
                parts.append(m.group(1))
            dates[m.group(1)].append(m.group(2))
    return "; ".join(f"recorded on {p}, {' and '.join(sorted(dates[p]))}" if p in dates else p for p in parts)


def config_label(r: dict) -> str:
    try:
        return get(r["kernel"]).label(r["params"])
    except KeyError:
        return ",".join(f"{k}={v}" for k, v in r["params"].items())


def kernel_title(name: str) -> str:
    try:
        return get(name).title
    except KeyError:
        return name


def percent_of_cublas(r: dict) -> float:
    return 100 * r["tflops"] / r["cublas_tflops"]


def hover(r: dict) -> str:
    status = "correct" if r["ok"] else f"WRONG (relative error {r['rel_err']})"
    return (f"{r['kernel']} {config_label(r)}<br>{shape_label((r['M'], r['N'], r['K']))}<br>"
            f"{r['tflops']:.2f} TFLOP/s ({percent_of_cublas(r):.0f}% of cuBLAS)<br>"
            f"median {r['ms']:.3f} ms [{r['ms_p20']:.3f}, {r['ms_p80']:.3f}]<br>{status}")


def band(rows: list[dict]) -> dict:
    """Error bars: the 20th-80th percentile band of the time, in TFLOP/s."""
    up, down = [], []
    for r in rows:
        f = 2 * r["M"] * r["N"] * r["K"] / 1e12
        up.append(f / (r["ms_p20"] * 1e-3) - r["tflops"])
        down.append(r["tflops"] - f / (r["ms_p80"] * 1e-3))
    return dict(type="data", symmetric=False, array=up, arrayminus=down, thickness=1, width=3)


def round_sizes(rows: list[dict]) -> list[dict]:
    """Square rows at sizes that are multiples of 64 (odd sizes like 4095 are compared
    separately: on a line over n they would make it zigzag)."""
    return [r for r in rows if r["M"] == r["N"] == r["K"] and r["M"] % 64 == 0]


def tflops_vs_size(rows: list[dict], source: str, title: str = "Throughput vs matrix size",
                   cublas: bool = True, log_y: bool = False) -> go.Figure:
    """TFLOP/s against n (square shapes), one line per (kernel, config), plus cuBLAS."""
    rows = round_sizes(rows)
    fig = go.Figure()
    series: dict = {}
    for r in rows:
        series.setdefault((r["kernel"], config_label(r)), []).append(r)
    for i, ((kernel, label), sel) in enumerate(series.items()):
        sel.sort(key=lambda r: r["M"])
        fig.add_trace(go.Scatter(
            x=[r["M"] for r in sel], y=[r["tflops"] for r in sel], name=f"{kernel_title(kernel)} {label}",
            mode="lines+markers", line=dict(color=style.colour(kernel, i) if len(series) <= 2 else style.PALETTE[i % 16]),
            marker=dict(symbol=["circle" if r["ok"] else "x" for r in sel], size=8),
            error_y=band(sel), hovertext=[hover(r) for r in sel], hoverinfo="text"))
    if cublas and rows:
        best = {r["M"]: r["cublas_tflops"] for r in rows}
        xs = sorted(best)
        fig.add_trace(go.Scatter(x=xs, y=[best[x] for x in xs], name="cuBLAS (cupy.matmul)", mode="lines+markers",
                                 line=dict(color=style.CUBLAS, dash="dash")))
    style.log_axis(fig, "x", [r["M"] for r in rows], exact=True)
    if log_y:
        style.log_axis(fig, "y", [r["tflops"] for r in rows] + [r["cublas_tflops"] for r in rows], cover=True)
    return style.finish(fig, title, "n (M = N = K)", "TFLOP/s", source)


def configs_by_size(rows: list[dict], source: str, title: str = "Configurations", xlabel: str = "config") -> go.Figure:
    """Horizontal bars of TFLOP/s per config, fastest first, with cuBLAS at the same shape marked;
    a menu or slider over the shapes. Each bar's config is written above it (not as an axis
    label), so the bars keep the figure's whole width on a narrow screen; each shape sets the
    figure's height to fit its own bars, with rows of the same height, so a bar keeps its
    thickness from one shape to the next. It opens on the shape with the most configs."""
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows})
    top = max([r["tflops"] for r in rows] + [r["cublas_tflops"] for r in rows]) * 1.18
    steps = []
    for shape in shapes:
        sel = sorted((r for r in rows if (r["M"], r["N"], r["K"]) == shape), key=lambda r: -r["tflops"])
        labels = [config_label(r) for r in sel]
        ys = list(range(len(sel)))
        fills = [style.colour(r["kernel"]) if r["ok"] else style.WRONG for r in sel]
        steps.append((shape_label(shape), [
            go.Bar(y=ys, x=[r["tflops"] for r in sel], orientation="h", name="kernel", width=0.42, offset=0.02,
                   marker_color=fills, hovertext=[hover(r) for r in sel], hoverinfo="text"),
            go.Scatter(y=ys, x=[0] * len(sel), mode="text", text=labels, textposition="top right",
                       textfont=dict(size=style.FONT - 1), showlegend=False, hoverinfo="skip"),
            # each bar's value just past its end, or inside it where cuBLAS's tick would fall on the
            # value there (value_label)
            values_trace([value_label(r["tflops"], r["cublas_tflops"], top, fill)
                          for r, fill in zip(sel, fills)], [y + 0.23 for y in ys]),
            go.Scatter(y=[y + 0.23 for y in ys], x=[r["cublas_tflops"] for r in sel], name="cuBLAS, same shape",
                       mode="markers", marker=dict(symbol="line-ns-open", size=22, color=style.CUBLAS, line=dict(width=3)),
                       hovertext=[f"cuBLAS {r['cublas_tflops']:.1f} TFLOP/s" for r in sel], hoverinfo="text")]))
    sizes = [sum(1 for r in rows if (r["M"], r["N"], r["K"]) == s) for s in shapes]
    fullest = max(range(len(shapes)), key=lambda i: (sizes[i], i))    # most configs; then the largest shape
    # each shape's figure as tall as its own bars need (a shape with 1 config of 20 would leave
    # the plot empty below it), every row as tall in every shape; with the mode bar's strip, which
    # finish adds to the figure's own height only
    layouts = [{"height": sweep_height(k) + style.MODEBAR_PX, "yaxis.range": [max(k, SWEEP_MIN_ROWS) - 0.4, -0.6]}
               for k in sizes]
    fig = style.steps_figure(steps, active=fullest, prefix="shape: ", layouts=layouts)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_xaxes(range=[0, top])
    return style.finish(fig, title, "TFLOP/s", None, source, height=sweep_height(sizes[fullest]))


SWEEP_ROW_PX, SWEEP_MIN_ROWS = 46, 4      # a config's row in configs_by_size; the fewest rows its plot has
LABEL_SPAN = 0.1     # the share of a bar chart's axis a value label may cover right of its bar


VALUE_INK = "#222222"


def value_label(value: float, tick: float, top: float, fill: str) -> dict:
    """A horizontal bar's value label (``top``: the axis's end): just past the bar's end, unless a
    tick at ``tick`` (cuBLAS's) falls within the label's span there; then inside the bar's end, in
    ink that reads on the bar's ``fill``, so that the value is not read as the tick's; a bar too
    short to hold it has it just past the tick."""
    text = f"{value:.1f}"
    if label_inside(value, tick, top):
        if value >= LABEL_SPAN * top:
            return dict(x=value, text=text + "  ", position="middle left", ink=style.ink(fill))
        return dict(x=tick, text="  " + text, position="middle right", ink=VALUE_INK)
    return dict(x=value, text="  " + text, position="middle right", ink=VALUE_INK)


def values_trace(labels: list[dict], ys: list[float]) -> go.Scatter:
    """The text trace of bars' value labels (:func:`value_label`) at heights ``ys``."""
    return go.Scatter(y=ys, x=[v["x"] for v in labels], mode="text", name="values", text=[v["text"] for v in labels],
                      textposition=[v["position"] for v in labels], cliponaxis=False,
                      textfont=dict(size=style.FONT - 1, color=[v["ink"] for v in labels]), showlegend=False,
                      hoverinfo="skip")


def label_inside(value: float, line: float | None, top: float) -> bool:
    """Whether a bar's value label goes inside its bar, at its end, rather than past it: where a
    line across the bars at ``line`` (cuBLAS's) would run through the label (``top``: the axis's
    extent)."""
    return line is not None and 0 <= line - value <= LABEL_SPAN * top


def sweep_height(configs: int) -> int:
    """The height of configs_by_size's figure for a shape with ``configs`` bars: the plot area,
    plus title, menu or slider, x axis and legend."""
    return 260 + SWEEP_ROW_PX * max(configs, SWEEP_MIN_ROWS)


BAR_WIDTH = 0.45         # of a category's height: the rest is room for the name above the bar


def compare_steps(named_rows: dict, source: str, title: str = "Each step at the same size") -> go.Figure:
    """Horizontal bars of TFLOP/s for named rows (each chapter's kernel), with cuBLAS of the same run.

    Each bar's name is written above it and its value beside it (not as axis labels), so the
    plot keeps the figure's whole width on a narrow screen.
    """
    names = list(named_rows)
    rows = [named_rows[n] for n in names]
    top = max([r["cublas_tflops"] for r in rows] + [r["tflops"] for r in rows]) * 1.08
    fig = go.Figure()
    fig.add_trace(go.Bar(
        y=names, x=[r["tflops"] for r in rows], orientation="h", name="kernel", width=BAR_WIDTH, showlegend=False,
        marker_color=[style.colour(r["kernel"], i) for i, r in enumerate(rows)],
        # short, in the bar where it fits, after it where the bar is too short (the axis runs to cuBLAS and beyond)
        text=[f"<b>{r['tflops']:.1f}</b> ({percent_of_cublas(r):.0f}%)" for r in rows], textfont=dict(size=style.FONT),
        **style.bar_labels([style.colour(r["kernel"], i) for i, r in enumerate(rows)]),
        hovertext=[hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(y=names, x=[r["cublas_tflops"] for r in rows], mode="markers", name="cuBLAS, same run",
                             marker=dict(symbol="line-ns-open", size=30, color=style.CUBLAS, line=dict(width=3)),
                             hovertext=[f"cuBLAS {r['cublas_tflops']:.1f} TFLOP/s" for r in rows], hoverinfo="text"))
    for i, name in enumerate(names):    # the kernel's name above its bar (category i spans i +- 0.5): any width
        fig.add_annotation(x=0, y=i - BAR_WIDTH / 2, xref="x", yref="y", text=name, showarrow=False,
                           xanchor="left", yanchor="bottom", yshift=2, font=dict(size=style.FONT))
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(range=[0, top])
    return style.finish(fig, title, "TFLOP/s (% of cuBLAS)", None, source, height=220 + 100 * len(rows))


MARKERS = ("circle", "diamond", "square", "triangle-up")   # the 1st, 2nd... point of the same kernel


ROOF_CLEARANCE = 2.5     # a point within this factor under its roof has its label below it (log axes)


def roofline(points: list[dict], device: Device, source: str, title: str = "Roofline") -> go.Figure:
    """Measured TFLOP/s against arithmetic intensity, under the device's two roofs.

    ``points``: dicts with ``name``, ``intensity`` (FLOP/byte) and ``tflops``, optionally
    ``kernel`` (for its colour), ``short`` (a label written next to it), ``textposition`` (where
    that label goes, instead of above the point or below it near the roof), ``symbol`` (the
    marker's), and, for a point drawn beside others of the same intensity, ``true_intensity`` and
    ``note`` (both in the hover).
    """
    lo = min([p["intensity"] for p in points] + [0.1]) / 2
    hi = max([p["intensity"] for p in points] + [device.ridge * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[device.attainable(x) for x in xs], mode="lines", line=dict(color=style.CUBLAS),
                             name=f"roof: {device.bandwidth_tbs:.2f} TB/s, {device.fp32_tflops:.1f} TFLOP/s FP32"))
    seen: dict = {}
    for i, p in enumerate(points):
        # two configs of one kernel share its colour: a symbol of their own tells them apart in the legend
        k = p.get("kernel", "")
        nth, seen[k] = seen.get(k, 0), seen.get(k, 0) + 1
        x = p.get("true_intensity", p["intensity"])          # where it is, not where it is drawn
        # a label above its point, or below it where the roof above is near enough to cross it
        near_roof = p["tflops"] * ROOF_CLEARANCE > device.attainable(p["intensity"])
        symbol = p.get("symbol", MARKERS[nth % len(MARKERS)])
        fig.add_trace(go.Scatter(
            x=[p["intensity"]], y=[p["tflops"]], mode="markers+text", name=p["name"], text=[p.get("short", "")],
            textposition=p.get("textposition", "bottom center" if near_roof else "top center"),
            marker=dict(size=17 if symbol.endswith("-open") else 11, color=style.colour(k, i + 1), symbol=symbol,
                        line=dict(width=3) if symbol.endswith("-open") else None),
            hovertext=f"{p['name']}<br>{x:.2f} FLOP/byte<br>{p['tflops']:.2f} TFLOP/s "
                      f"(roof: {device.attainable(x):.1f})" + (f"<br>{p['note']}" if p.get("note") else ""),
            hoverinfo="text"))
    style.log_axis(fig, "x", [lo, hi], "arithmetic intensity (FLOP per byte of global traffic)")
    style.log_axis(fig, "y", [min(p["tflops"] for p in points) / 2, device.fp32_tflops * 1.2], "TFLOP/s")
    return style.finish(fig, title, source=f"{source}; roofs of {device.label} ({device.source})", height=520)


def configs_measured(rows: list[dict], source: str, title: str = "Your runs") -> go.Figure:
    """Bars of TFLOP/s for each measured (config, shape), next to cuBLAS at that shape (the live panel)."""
    labels = [f"{config_label(r)} · {shape_label((r['M'], r['N'], r['K']))}" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[r["tflops"] for r in rows], name="kernel",
                         marker_color=[style.colour(r["kernel"]) if r["ok"] else style.WRONG for r in rows],
                         text=[f"{r['tflops']:.2f}" for r in rows], textposition="outside", cliponaxis=False,
                         hovertext=[hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=labels, y=[r["cublas_tflops"] for r in rows], name="cuBLAS, same shape",
                             mode="markers", marker=dict(symbol="line-ew-open", size=28, color=style.CUBLAS,
                                                         line=dict(width=3))))
    return style.finish(fig, title, "config · shape", "TFLOP/s", source, height=420)
