"""Plotly figures built from result rows, live or recorded.

Every builder takes rows (dicts in the :class:`helpers.bench.Result` format) and a
``source`` string, and writes that source on the figure ("recorded on NVIDIA H100
80GB HBM3, 2026-11-22" or "measured live on ..."), so a reader always knows
where a number came from. Interactivity uses Plotly's own sliders and menus, so
it works in the static book with no kernel behind the page.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import plotly.graph_objects as go

CUBLAS_COLOUR = "#222222"
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"]
TEMPLATE = "plotly_white"


# ----------------------------------------------------------------------- show
def show(fig: go.Figure):
    """Display a figure in Jupyter *and* in the built book.

    The output carries Plotly's own JSON (JupyterLab renders it) and an HTML div
    that the built book renders with the plotly.js it ships in ``_static``.
    """
    from IPython.display import display

    html = fig.to_html(full_html=False, include_plotlyjs=False,
                       config={"displaylogo": False, "responsive": True})
    bundle = {"application/vnd.plotly.v1+json": fig.to_plotly_json(), "text/html": html}
    display(bundle, raw=True)


def label_source(fig: go.Figure, source: str) -> go.Figure:
    """Write where the data came from under the plot."""
    fig.add_annotation(text=source, xref="paper", yref="paper", x=1, y=-0.22, xanchor="right",
                       yanchor="top", showarrow=False, font=dict(size=11, color="#555"))
    fig.update_layout(margin=dict(b=110))
    return fig


def _layout(fig, title, xtitle, ytitle, source, height=460):
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title=xtitle, yaxis_title=ytitle,
                      height=height, legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return label_source(fig, source)


def _size_label(r: dict) -> str:
    if r["M"] == r["N"] == r["K"]:
        return f"n={r['M']}"
    return f"{r['M']}x{r['N']}x{r['K']}"


def _config_label(r: dict) -> str:
    from .registry import get

    try:
        return get(r["kernel"]).label_of(r["params"])
    except KeyError:
        return ",".join(f"{k}={v}" for k, v in r["params"].items())


def _kernel_title(name: str) -> str:
    from .registry import get

    try:
        return get(name).title
    except KeyError:
        return name


def _hover(r: dict) -> str:
    pct = 100 * r["tflops"] / r["cublas_tflops"]
    status = "correct" if r["ok"] else f"WRONG (rel. error {r['rel_err']:.1e})"
    return (f"{r['kernel']} {_config_label(r)}<br>{r['M']}x{r['N']}x{r['K']}<br>"
            f"{r['tflops']:.2f} TFLOP/s ({pct:.0f}% of cuBLAS)<br>"
            f"median {r['ms']:.3f} ms [{r['ms_p20']:.3f}, {r['ms_p80']:.3f}]<br>{status}")


# ------------------------------------------------------------ TFLOP/s vs size
def tflops_vs_size(rows: list[dict], source: str, title: str = "Throughput vs matrix size",
                   series=None, cublas: bool = True) -> go.Figure:
    """Lines of TFLOP/s against n (square shapes), one per series, plus cuBLAS.

    ``series`` maps a legend name to a predicate on rows; by default one series
    per (kernel, config).
    """
    rows = [r for r in rows if r["M"] == r["N"] == r["K"]]
    if series is None:
        series = OrderedDict()
        for r in rows:
            key = f"{_kernel_title(r['kernel'])} {_config_label(r)}"
            series.setdefault(key, (lambda k, c: lambda x: x["kernel"] == k and x["params"] == c)(r["kernel"], r["params"]))
    fig = go.Figure()
    for i, (name, pred) in enumerate(series.items()):
        sel = sorted((r for r in rows if pred(r)), key=lambda r: r["M"])
        if not sel:
            continue
        fig.add_trace(go.Scatter(
            x=[r["M"] for r in sel], y=[r["tflops"] for r in sel], name=name, mode="lines+markers",
            line=dict(color=PALETTE[i % len(PALETTE)]),
            marker=dict(symbol=["circle" if r["ok"] else "x" for r in sel], size=8),
            error_y=_band(sel), hovertext=[_hover(r) for r in sel], hoverinfo="text"))
    if cublas and rows:
        best = {}
        for r in rows:
            best.setdefault(r["M"], r["cublas_tflops"])
        xs = sorted(best)
        fig.add_trace(go.Scatter(x=xs, y=[best[x] for x in xs], name="cuBLAS (cupy.matmul)",
                                 mode="lines+markers", line=dict(color=CUBLAS_COLOUR, dash="dash")))
    fig.update_xaxes(type="log", tickvals=sorted({r["M"] for r in rows}))
    return _layout(fig, title, "n (M = N = K)", "TFLOP/s", source)


def _band(sel):
    """Error bars from the 20th/80th percentile of the time (inverted into TFLOP/s)."""
    up, down = [], []
    for r in sel:
        f = 2 * r["M"] * r["N"] * r["K"] / 1e12
        up.append(f / (r["ms_p20"] * 1e-3) - r["tflops"])
        down.append(r["tflops"] - f / (r["ms_p80"] * 1e-3))
    return dict(type="data", symmetric=False, array=up, arrayminus=down, thickness=1, width=3)


# ------------------------------------------------------- configs with a slider
def configs_by_size(rows: list[dict], source: str, title: str = "Configurations",
                    xlabel: str = "config") -> go.Figure:
    """Bars of TFLOP/s per config, with a slider over the recorded sizes.

    Each slider step shows one shape's bars and cuBLAS at that shape.
    """
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows})
    steps = []
    for M, N, K in shapes:
        sel = [r for r in rows if (r["M"], r["N"], r["K"]) == (M, N, K)]
        sel.sort(key=lambda r: (r["kernel"], _config_label(r)))
        label = _size_label(sel[0])
        bars = go.Bar(x=[_config_label(r) for r in sel], y=[r["tflops"] for r in sel], name="kernel",
                      marker_color=[PALETTE[0] if r["ok"] else "#d62728" for r in sel],
                      hovertext=[_hover(r) for r in sel], hoverinfo="text",
                      text=[f"{r['tflops']:.1f}" for r in sel], textposition="outside")
        cub = go.Scatter(x=[_config_label(r) for r in sel], y=[sel[0]["cublas_tflops"]] * len(sel),
                         name="cuBLAS", mode="lines", line=dict(color=CUBLAS_COLOUR, dash="dash"))
        steps.append((label, [bars, cub]))
    fig = with_slider(steps, prefix="size: ")
    return _layout(fig, title, xlabel, "TFLOP/s", source)


def with_slider(steps: list, prefix: str = "", active: int | None = None) -> go.Figure:
    """A figure whose slider shows one group of traces at a time.

    ``steps`` is a list of (label, [traces]). All traces are added once; each
    slider step sets which are visible, so the figure needs no Python to move.
    """
    fig = go.Figure()
    owner = []
    for i, (_, traces) in enumerate(steps):
        for t in traces:
            fig.add_trace(t)
            owner.append(i)
    active = len(steps) - 1 if active is None else active
    for t, o in zip(fig.data, owner):
        t.visible = o == active
    if len(steps) > 1:
        fig.update_layout(sliders=[dict(
            active=active, currentvalue=dict(prefix=prefix), pad=dict(t=50),
            steps=[dict(label=label, method="update",
                        args=[{"visible": [o == i for o in owner]}])
                   for i, (label, _) in enumerate(steps)])])
    return fig


def with_menu(steps: list, active: int = 0, x: float = 1.0) -> go.Figure:
    """Like :func:`with_slider`, with a drop-down menu instead of a slider."""
    fig = go.Figure()
    owner = []
    for i, (_, traces) in enumerate(steps):
        for t in traces:
            fig.add_trace(t)
            owner.append(i)
    for t, o in zip(fig.data, owner):
        t.visible = o == active
    fig.update_layout(updatemenus=[dict(
        active=active, x=x, xanchor="right", y=1.18, yanchor="top",
        buttons=[dict(label=label, method="update", args=[{"visible": [o == i for o in owner]}])
                 for i, (label, _) in enumerate(steps)])])
    return fig


# ------------------------------------------------------------------- roofline
def roofline(points: list[dict], ceilings, source: str, title: str = "Roofline") -> go.Figure:
    """Measured TFLOP/s against arithmetic intensity, under the two roofs.

    ``points``: dicts with ``name``, ``intensity`` (FLOP/byte) and ``tflops``.
    """
    lo = min([p["intensity"] for p in points] + [0.1]) / 2
    hi = max([p["intensity"] for p in points] + [ceilings.ridge * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[ceilings.attainable(x) for x in xs], mode="lines",
                             name=f"roof: {ceilings.bandwidth_tbs:g} TB/s, {ceilings.fp32_tflops:.1f} TFLOP/s FP32",
                             line=dict(color=CUBLAS_COLOUR)))
    for i, p in enumerate(points):
        fig.add_trace(go.Scatter(
            x=[p["intensity"]], y=[p["tflops"]], mode="markers+text", name=p["name"],
            text=[p.get("short", "")], textposition="top center",
            marker=dict(size=11, color=PALETTE[i % len(PALETTE)]),
            hovertext=f"{p['name']}<br>{p['intensity']:.2f} FLOP/byte<br>{p['tflops']:.2f} TFLOP/s"
                      f" (roof: {ceilings.attainable(p['intensity']):.1f})", hoverinfo="text"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per byte of global traffic)")
    fig.update_yaxes(type="log", title="TFLOP/s")
    fig.update_layout(template=TEMPLATE, title=title, height=480,
                      legend=dict(orientation="h", y=-0.3, yanchor="top"))
    return label_source(fig, f"{source}; roofs from the {ceilings.source} of {ceilings.name}")


def percent_of_cublas(r: dict) -> float:
    return 100 * r["tflops"] / r["cublas_tflops"] if r["cublas_tflops"] > 0 else math.nan


# ------------------------------------------------------------ live panel runs
def configs_measured(rows: list[dict], source: str, title: str = "Your runs") -> go.Figure:
    """Bars of TFLOP/s for each measured (config, size), next to cuBLAS at that size.

    Used by :func:`helpers.widgets.kernel_panel`; a wrong result shows as a red bar.
    """
    labels = [f"{_config_label(r)} · {_size_label(r)}" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[r["tflops"] for r in rows], name="kernel",
                         marker_color=[PALETTE[0] if r["ok"] else "#d62728" for r in rows],
                         text=[f"{r['tflops']:.2f}" for r in rows], textposition="outside",
                         hovertext=[_hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=labels, y=[r["cublas_tflops"] for r in rows], name="cuBLAS, same size",
                             mode="markers", marker=dict(symbol="line-ew-open", size=28,
                                                         color=CUBLAS_COLOUR, line=dict(width=3))))
    return _layout(fig, title, "config · size", "TFLOP/s", source, height=400)


# ------------------------------------------------------------ thread mapping
def warp_map(shapes=((32, 32), (16, 16), (8, 32), (4, 64)), rows: int = 32, cols: int = 64,
             row_major_threads: bool = False) -> go.Figure:
    """Which elements of C the first warp of block (0, 0) computes, per block shape.

    The naive mapping puts threadIdx.x on rows (``row_major_threads=False``), so a
    warp is a strip down a column of C; a menu switches block shape (BX, BY).
    """
    steps = []
    for bx, by in shapes:
        z, text = [], []
        for r in range(rows):
            zr, tr = [], []
            for c in range(cols):
                if row_major_threads:   # threadIdx.x walks columns
                    tx, ty = c, r
                else:                   # threadIdx.x walks rows (the naive kernel)
                    tx, ty = r, c
                inside = tx < bx and ty < by
                lin = ty * bx + tx if inside else -1       # linear thread id in block (0, 0)
                warp = lin // 32 if inside else -1
                zr.append(2 if warp == 0 else (1 if inside else 0))
                tr.append(f"C[{r}][{c}]<br>" + (f"thread ({tx}, {ty}), warp {warp}" if inside
                                                 else "another block"))
            z.append(zr)
            text.append(tr)
        heat = go.Heatmap(z=z, hovertext=text, hoverinfo="text", showscale=False, zmin=0, zmax=2,
                          colorscale=[[0, "#f3f3f3"], [0.5, "#bcd3ea"], [1, "#d62728"]], xgap=1, ygap=1)
        steps.append((f"block {bx}x{by}", [heat]))
    fig = with_menu(steps)
    fig.update_yaxes(autorange="reversed", title="row of C (i)", scaleanchor="x")
    fig.update_xaxes(title="column of C (j)", side="top")
    fig.update_layout(template=TEMPLATE, height=420, margin=dict(t=90),
                      title="Block (0, 0) in blue; its first warp in red")
    return fig


# ------------------------------------------------------- one step against the last
def compare_steps(named_rows: dict, source: str, title: str = "Each step at the same size") -> go.Figure:
    """Horizontal bars of TFLOP/s for named rows (e.g. each chapter's default at n=4096), plus cuBLAS."""
    names = list(named_rows)
    rows = [named_rows[n] for n in names]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=[r["tflops"] for r in rows], orientation="h", name="kernel",
                         marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(rows))],
                         text=[f"{r['tflops']:.1f} TFLOP/s ({percent_of_cublas(r):.0f}% of cuBLAS)" for r in rows],
                         textposition="auto", hovertext=[_hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(y=names, x=[r["cublas_tflops"] for r in rows], mode="markers", name="cuBLAS, same run",
                             marker=dict(symbol="line-ns-open", size=22, color=CUBLAS_COLOUR, line=dict(width=3))))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, "TFLOP/s", "", source, height=120 + 60 * len(rows))


def default_row(rs, kernel: str, n: int = 4096) -> dict:
    """The row of a kernel's default config at n x n x n in a ResultSet."""
    from .registry import get

    spec = get(kernel)
    d = spec.defaults()
    square = [r for r in rs.rows if r["kernel"] == kernel and r["params"] == d and r["M"] == r["N"] == r["K"]]
    for r in square:
        if r["M"] == n:
            return r
    if rs.live and square:  # a quick live run measures small sizes only: take the largest
        return max(square, key=lambda r: r["M"])
    raise KeyError(f"no row for {kernel} {d} at n={n} in {rs.source}")
