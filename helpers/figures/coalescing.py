"""Figures, tables and sentences of the chapters "The naive kernel" and "Global-memory
coalescing" (book/02_naive.md, book/03_coalescing.md).

Which elements of C a warp computes, what its loads move, the L1-line ceiling of each
block shape next to the measurements, the grid order (SWAP) and the block schedule.
Every measured number comes from the rows given; every device number from their device.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from ..hardware import WARP_SIZE, Device, is_live
from ..measure.results import ResultSet, step
from ..models import coalescing as model
from ..models.occupancy import of_config
from ..models.roofline import intensity, min_bytes
from ..runtime.check import check, tolerance
from ..runtime.specs import get
from ..shapes import flops
from ..tables import Table, Text
from . import results as generic
from . import style

SWAP_COLOURS = {0: style.PALETTE[0], 1: style.PALETTE[1]}


def _empty(title: str, source: str) -> go.Figure:
    """A figure that says the rows hold no sweep to draw (a quick live run measures fewer configs)."""
    fig = go.Figure()
    fig.add_annotation(text="no sweep of several block shapes in these rows", showarrow=False, x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return style.finish(fig, title, source=source, height=240, legend=False)


def sweep_n(fit: list[dict]) -> int:
    """The largest n at which several block shapes were timed (else the largest n)."""
    several = [f["n"] for f in fit if len({(g["BX"], g["BY"]) for g in fit if g["n"] == f["n"]}) > 1]
    return max(several or [f["n"] for f in fit])


def shape_key(bx: int, by: int) -> tuple:
    """Block shapes in numeric order: by BX, then BY."""
    return (bx, by)


def wide_key(bx: int, by: int) -> tuple:
    """Block shapes from narrow to wide: by BX / BY, then BX."""
    return (bx / by, bx)


def label(bx: int, by: int) -> str:
    return f"{bx}x{by}"


# ------------------------------------------------------------------ which threads, which elements
def warp_map(shapes=((32, 32), (16, 16), (8, 32), (4, 64)), mapping: str = "naive",
             rows: int = 32, cols: int = 64) -> go.Figure:
    """Which elements of C block (0, 0) computes (blue) and which its first warp computes
    (red), for each block shape (a menu); ``mapping`` is the kernel whose index math is drawn."""
    steps = []
    for bx, by in shapes:
        owner = {}
        for ty in range(by):
            for tx in range(bx):
                owner[model.element(mapping, tx, ty)] = (tx, ty, (ty * bx + tx) // WARP_SIZE)
        z, text = [], []
        for r in range(rows):
            zr, tr = [], []
            for c in range(cols):
                o = owner.get((r, c))
                zr.append(0 if o is None else (2 if o[2] == 0 else 1))
                tr.append(f"C[{r}][{c}]<br>" + (f"thread ({o[0]}, {o[1]}), warp {o[2]}" if o else "another block"))
            z.append(zr)
            text.append(tr)
        steps.append((f"block {label(bx, by)}", [go.Heatmap(
            z=z, hovertext=text, hoverinfo="text", showscale=False, zmin=0, zmax=2, xgap=1, ygap=1,
            colorscale=[[0, "#f3f3f3"], [0.5, "#bcd3ea"], [1, "#d62728"]])]))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(autorange="reversed", title="row of C (i)")
    fig.update_xaxes(title="column of C (j)")
    return style.finish(fig, "Which elements one warp computes", source="blue: block (0, 0); red: its first warp",
                        height=440, legend=False)


# ------------------------------------------------------------------ what a warp's load moves
def access_rows(cases) -> list[dict]:
    """:func:`helpers.models.coalescing.warp_access` for (mapping, BX, BY) cases, operands A, B, C."""
    return [model.warp_access(m, op, bx, by) for m, bx, by in cases for op in "ABC"]


def access_table(cases) -> Table:
    """One warp's load of A and B and store of C: addresses, sectors, lines, bytes used of moved."""
    rows = [{"kernel": r["mapping"], "block": r["block"],
             "access": "store of C" if r["operand"] == "C" else f"load of {r['operand']}",
             "addresses": r["distinct_addresses"], "32-byte sectors": r["sectors"], "128-byte lines": r["lines"],
             "bytes used": r["bytes_used"], "bytes moved": r["bytes_moved"], "used": f"{100 * r['efficiency']:.1f}%"}
            for r in access_rows(cases)]
    return Table(rows, caption="One warp, one step of k (matrices 4096 wide, rows starting on a line)")


def access_figure(blocks=((32, 32), (64, 4), (32, 8), (16, 16), (8, 8))) -> go.Figure:
    """Per warp and k: bytes moved (whole sectors) against bytes used, both mappings; a menu over block shapes."""
    steps = []
    for bx, by in blocks:
        rows = access_rows([("naive", bx, by), ("coalescing", bx, by)])
        ys = [f"{r['mapping']}: {'store C' if r['operand'] == 'C' else 'load ' + r['operand']}" for r in rows]
        hover = [f"{r['distinct_addresses']} distinct addresses, {r['sectors']} sectors, {r['lines']} lines<br>"
                 f"{r['bytes_used']} B used of {r['bytes_moved']} B moved: {100 * r['efficiency']:.1f}%" for r in rows]
        steps.append((f"block {label(bx, by)}", [
            go.Bar(y=ys, x=[r["bytes_moved"] for r in rows], orientation="h", name="bytes moved (whole sectors)",
                   marker_color=style.WRONG, hovertext=hover, hoverinfo="text", constraintext="none",
                   text=[f"{r['sectors']} sector{'s' if r['sectors'] > 1 else ''}" for r in rows], textposition="outside",
                   cliponaxis=False),
            go.Bar(y=ys, x=[r["bytes_used"] for r in rows], orientation="h", name="bytes the warp uses",
                   marker_color="#2ca02c", hovertext=hover, hoverinfo="text", constraintext="none",
                   text=[f"{100 * r['efficiency']:.0f}% used" for r in rows],
                   textposition="outside", cliponaxis=False)]))
    fig = style.steps_figure(steps, active=0)
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(range=[0, 1024 * 1.45])
    return style.finish(fig, "One warp, one k: bytes moved and used", "bytes per warp instruction", None,
                        "the sector model, no measurement", height=560)


def per_k_table(shapes, mapping: str = "coalescing") -> Table:
    """Per k, what one warp's two loads touch, for block shapes of one kernel."""
    rows = []
    for bx, by in shapes:
        s = model.per_k_step(mapping, bx, by)
        rows.append({"block": label(bx, by), "warp covers": f"{style.plural(s['rows'], 'row')} x {s['cols']} columns",
                     "sectors": s["sectors"], "lines": s["lines"], "bytes used": s["bytes_used"],
                     "bytes moved": s["bytes_moved"]})
    return Table(rows, caption=f"{get(mapping).title}: one warp's loads of A and B for one k")


# ------------------------------------------------------------------ measured block shapes
def shapes_figure(rows: list[dict], source: str, title: str) -> go.Figure:
    """TFLOP/s per block shape (numeric order, top to bottom), a menu or slider over the sizes."""
    rows = [r for r in rows if r["M"] == r["N"] == r["K"]]
    sizes = sorted({r["M"] for r in rows if sum(1 for x in rows if x["M"] == r["M"]) > 1})

    def text(r):                                  # short: it goes after the bar, and must fit there on a phone
        return f"{r['tflops']:.2f} ({generic.percent_of_cublas(r):.1f}%)"
    left = max(style.text_px(generic.config_label(r)) for r in rows) + 30       # tick labels and the axis title
    top = max(max(r["tflops"] for r in rows) * 1.05, style.label_room([r["tflops"] for r in rows],
                                                                     [text(r) for r in rows], left_px=left))
    steps, count = [], 1
    for n in sizes:
        sel = sorted((r for r in rows if r["M"] == n), key=lambda r: shape_key(r["params"]["BX"], r["params"]["BY"]))
        count = max(count, len(sel))
        steps.append((f"n = {n}", [go.Bar(
            y=[generic.config_label(r) for r in sel], x=[r["tflops"] for r in sel], orientation="h", name="measured",
            marker_color=[style.colour(r["kernel"]) if r["ok"] else style.WRONG for r in sel],
            text=[text(r) for r in sel], textposition="outside", cliponaxis=False, constraintext="none",
            hovertext=[generic.hover(r) for r in sel], hoverinfo="text")], f"{title}, n = {n}"))
    if not steps:
        return _empty(title, source)
    fig = style.steps_figure(steps, prefix="size: ")
    fig.update_yaxes(type="category", autorange="reversed", title="block BX x BY")
    fig.update_xaxes(range=[0, top])
    return style.finish(fig, steps[-1][2] if steps else title, "TFLOP/s (% of cuBLAS)", None, source,
                        height=200 + 34 * count, legend=False)


def shapes_text(rs: ResultSet) -> Text:
    """The fastest and slowest block shape at the largest size timed with several."""
    rows = [r for r in rs.rows if r["M"] == r["N"] == r["K"]]
    n = max(r["M"] for r in rows if sum(1 for x in rows if x["M"] == r["M"]) > 1)
    sel = [r for r in rows if r["M"] == n]
    hi, lo = max(sel, key=lambda r: r["tflops"]), min(sel, key=lambda r: r["tflops"])
    return Text(f"At n = {n} the fastest of the {len(sel)} block shapes, {generic.config_label(hi)}, runs at "
                f"{hi['tflops']:.3g} TFLOP/s, {hi['tflops'] / lo['tflops']:.1f}× the slowest, "
                f"{generic.config_label(lo)} ({lo['tflops']:.3g} TFLOP/s), and {generic.percent_of_cublas(hi):.1f}% "
                f"of cuBLAS in the same run.")


def ceiling_figure(rows: list[dict], device: Device, source: str, mapping: str, n: int | None = None,
                   order=shape_key) -> go.Figure:
    """Measured TFLOP/s per block shape (the better grid order where there are two) next to
    the ceiling of one 128-byte L1 line per cycle per SM; shapes sorted by ``order(BX, BY)``."""
    fit = model.ceiling_fit(rows, device, mapping)
    n = n or sweep_n(fit)
    best: dict = {}
    for f in fit:
        s = (f["BX"], f["BY"])
        if f["n"] == n and (s not in best or f["tflops"] > best[s]["tflops"]):
            best[s] = f
    shapes = sorted(best, key=lambda s: order(*s))
    ys = [f"{label(*s)} · {best[s]['lines']} lines" for s in shapes]
    fig = go.Figure()
    # the label after the ceiling's bar (the longer one, but for noise), short enough to fit there on a phone
    text = [f"{best[s]['tflops']:.2f} ({100 * best[s]['ratio']:.0f}%)" for s in shapes]
    fig.add_trace(go.Bar(y=ys, x=[best[s]["ceiling"] for s in shapes], orientation="h", width=0.8,
                         name="ceiling: one L1 line per cycle per SM", marker_color="#d9d9d9",
                         text=text, textposition="outside", cliponaxis=False, constraintext="none",
                         hovertext=[f"ceiling {best[s]['ceiling']:.2f} TFLOP/s" for s in shapes], hoverinfo="text"))
    fig.add_trace(go.Bar(y=ys, x=[best[s]["tflops"] for s in shapes], orientation="h", width=0.4,
                         name="measured (label: % of ceiling)", marker_color=style.colour(mapping),
                         hovertext=[f"measured {best[s]['tflops']:.2f} TFLOP/s" for s in shapes], hoverinfo="text"))
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(type="category", autorange="reversed")
    ends = [max(best[s]["ceiling"], best[s]["tflops"]) for s in shapes]
    fig.update_xaxes(range=[0, style.label_room(ends, text, left_px=max(style.text_px(y) for y in ys))])
    return style.finish(fig, f"L1-line ceiling and measured, n = {n}", "TFLOP/s", None, source,
                        height=220 + 40 * len(shapes))


def ceiling_table(rows: list[dict], device: Device, mapping: str, n: int | None = None) -> Table:
    """The ceiling figure's numbers."""
    fit = model.ceiling_fit(rows, device, mapping)
    n = n or sweep_n(fit)
    sel = sorted((f for f in fit if f["n"] == n), key=lambda f: (wide_key(f["BX"], f["BY"]), f["SWAP"] or 0))
    return Table([{"block": label(f["BX"], f["BY"]) + ("" if f["SWAP"] is None else f", SWAP={f['SWAP']}"),
                   "lines per k": f["lines"], "ceiling TFLOP/s": f["ceiling"], "measured": f["tflops"],
                   "% of ceiling": 100 * f["ratio"]} for f in sel], caption=f"n = {n}, {device.label}")


def naive_model_text(rs: ResultSet) -> Text:
    """How well the L1-line model predicts the naive kernel, from the rows."""
    fit = model.ceiling_fit(rs.rows, rs.device, "naive")
    n = sweep_n(fit)
    at = [f for f in fit if f["n"] == n]
    d = get("naive").defaults()
    default = next((f for f in at if (f["BX"], f["BY"]) == (d["BX"], d["BY"])), at[0])
    lo, hi = min(f["ratio"] for f in at), max(f["ratio"] for f in at)
    small = min(fit, key=lambda f: f["ratio"])
    text = (f"At n = {n} the {label(default['BX'], default['BY'])} block touches {default['lines']} lines "
            f"per k, so the model allows {default['ceiling']:.3f} TFLOP/s; it measured {default['tflops']:.3f}, "
            f"**{100 * default['ratio']:.0f}% of the ceiling**. Across the {len(at)} block shapes timed at that size "
            f"the measurement is {100 * lo:.0f}% to {100 * hi:.0f}% of the model's prediction")
    if small["n"] < n and small["ratio"] < lo - 0.05:
        spec = get("naive")
        p = {"BX": small["BX"], "BY": small["BY"]}
        gx, gy, gz = spec.grid(p, small["n"], small["n"], small["n"], rs.device)
        blocks = gx * gy * gz
        text += (f"; the furthest from it is n = {small['n']} ({label(small['BX'], small['BY'])}, "
                 f"{100 * small['ratio']:.0f}%)")
        text += (f", whose grid has only {blocks} blocks for the {rs.device.sm_count} SMs: most SMs have "
                 "nothing to do." if blocks < rs.device.sm_count else ".")
    else:
        text += "."
    return Text(text)


# ------------------------------------------------------------------ roofline (chapter 02)
def naive_roofline(rs: ResultSet) -> go.Figure:
    """The default and the fastest naive block shape at the largest n on the rows' device
    roofline, and cuBLAS placed at the highest intensity any kernel can have (each operand read once)."""
    n = max(r["M"] for r in rs.rows if r["M"] == r["N"] == r["K"])
    sel = [r for r in rs.rows if r["M"] == n and r["N"] == n and r["K"] == n]
    default = get("naive").defaults()
    picked = [r for r in sel if r["params"] == default] + [max(sel, key=lambda r: r["tflops"])]
    points = [{"name": f"naive {generic.config_label(r)}" + (" (default)" if r["params"] == default else " (fastest)"),
               "short": generic.config_label(r), "kernel": r["kernel"], "tflops": r["tflops"],
               "intensity": intensity(r["kernel"], r["params"], n, n, n)} for r in picked]
    points.append({"name": "cuBLAS, drawn where each operand is read once", "short": "cuBLAS",
                   "tflops": sel[0]["cublas_tflops"], "intensity": flops(n, n, n) / min_bytes(n, n, n)})
    fig = generic.roofline(points, rs.device, rs.source, title=f"Roofline, n = {n}")
    lo, hi = fig.data[0].x[0], fig.data[0].x[-1]
    decades = [10.0 ** e for e in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)]
    fig.update_xaxes(tickvals=decades, ticktext=[style.tick_text(v) for v in decades],
                     title="FLOP per byte of global traffic")
    fig.update_layout(title_subtitle_text=f"{rs.source}<br>roofs of the {rs.device.label}")
    return fig


def naive_roofline_text(rs: ResultSet) -> Text:
    """The roofs, the naive kernel's intensity, and which block shapes sit above its memory roof."""
    d = rs.device
    n = max(r["M"] for r in rs.rows if r["M"] == r["N"] == r["K"])
    ai = intensity("naive", None, n, n, n)
    roof = d.attainable(ai)
    sel = sorted((r for r in rs.rows if r["M"] == n and r["N"] == n and r["K"] == n), key=lambda r: -r["tflops"])
    above = [r for r in sel if r["tflops"] > roof]
    text = (f"The {d.label}'s roofs, {d.fp32_tflops:.1f} TFLOP/s FP32 and {d.bandwidth_tbs:.2f} TB/s, meet at "
            f"{d.ridge:.1f} FLOP/byte; at {ai:.2f} FLOP/byte the memory roof allows {roof:.2f} TFLOP/s.")
    if above:
        best = above[0]
        text += (f" Yet {len(above)} of the {len(sel)} block shapes at n = {n} run *above* it, the fastest "
                 f"({generic.config_label(best)}) at {best['tflops']:.2f}, {best['tflops'] / sel[-1]['tflops']:.1f}× "
                 "the slowest: impossible if every load went to device memory.")
    else:
        text += f" The {len(sel)} block shapes at n = {n} all stay under it."
    return Text(text)


def scale_text(rs: ResultSet, n: int = 4096) -> Text:
    """The work of an n^3 product and the device's time for it at its FP32 peak."""
    d = rs.device
    f = flops(n, n, n)
    return Text(f"For n = {n} that is {f / 1e9:,.0f} billion operations. The {d.label} the recorded data comes "
                f"from peaks at {d.fp32_tflops:.1f} TFLOP/s in FP32 ({d.sm_count} SMs × {d.fp32_lanes} lanes × 2 × "
                f"{d.clock_mhz} MHz, its boost clock: the book's peak assumes the SMs hold it, and a GPU that clocks down "
                f"under load reaches less), so in principle {1e3 * f / (d.fp32_tflops * 1e12):.1f} ms.")


def errors_text(rs: ResultSet) -> Text:
    """Which sizes agree with cuBLAS bit for bit, and the largest error elsewhere."""
    sizes = sorted({r["M"] for r in rs.rows})
    exact = [n for n in sizes if all(r["rel_err"] == 0 for r in rs.rows if r["M"] == n)]
    inexact = [n for n in sizes if n not in exact]
    text = f"{rs.correctness()}. "
    if exact:
        text += f"At n = {', '.join(map(str, exact))} every row has a relative error of exactly 0"
        text += (f"; at n = {', '.join(map(str, inexact))} the largest is "
                 f"{max(r['rel_err'] for r in rs.rows if r['M'] in inexact):.1e}." if inexact else ".")
    return Text(text)


# ------------------------------------------------------------------ chapter 03: the step and the sweep
def blocks_figure(rows: list[dict], source: str) -> go.Figure:
    """TFLOP/s per block shape (narrow to wide, top to bottom), one colour per grid order, a menu over n."""
    rows = [r for r in rows if "SWAP" in r["params"] and r["M"] == r["N"] == r["K"]]
    shapes_at = {n: {(r["params"]["BX"], r["params"]["BY"]) for r in rows if r["M"] == n} for n in {r["M"] for r in rows}}
    sizes = sorted(n for n, s in shapes_at.items() if len(s) > 1)
    steps = []
    for n in sizes:
        shapes = sorted(shapes_at[n], key=lambda s: wide_key(*s))
        ys = [label(*s) for s in shapes]
        traces = []
        for swap in (0, 1):
            by = {(r["params"]["BX"], r["params"]["BY"]): r for r in rows if r["M"] == n and r["params"]["SWAP"] == swap}
            xs = [by[s]["tflops"] if s in by else None for s in shapes]
            traces.append(go.Bar(y=ys, x=xs, orientation="h", marker_color=SWAP_COLOURS[swap],
                                 name=f"SWAP={swap}: blockIdx.x walks {'rows (M)' if swap else 'columns (N)'}",
                                 text=[f"{x:.2f}" if x else "" for x in xs], textposition="outside",
                                 cliponaxis=False, constraintext="none",
                                 hovertext=[generic.hover(by[s]) if s in by else "not measured" for s in shapes],
                                 hoverinfo="text"))
        steps.append((f"n = {n}", traces, f"Block shape and grid order, n = {n}"))
    if not steps:
        return _empty("Block shape and grid order", source)
    fig = style.steps_figure(steps)
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_yaxes(type="category", autorange="reversed", title="block BX x BY")
    fig.update_xaxes(range=[0, max(r["tflops"] for r in rows) * 1.2 if rows else 1])
    count = max((len(s) for s in shapes_at.values()), default=1)
    return style.finish(fig, steps[-1][2] if steps else "Block shape and grid order", "TFLOP/s", None, source,
                        height=220 + 48 * count)


def swap_figure(rows: list[dict], source: str) -> go.Figure:
    """Gain of SWAP=1 over SWAP=0 (%) per block shape, ordered by BX / BY (top to bottom); one colour per n."""
    gains = model.swap_gain(rows)
    if not gains:
        return _empty("Gain of SWAP=1 over SWAP=0", source)
    shapes = sorted({(g["BX"], g["BY"]) for g in gains}, key=lambda s: wide_key(*s))
    ys = [f"{label(*s)} · B/A {s[0] / s[1]:g}" for s in shapes]
    fig = go.Figure()
    for i, n in enumerate(sorted({g["n"] for g in gains})):
        by = {(g["BX"], g["BY"]): g for g in gains if g["n"] == n}
        xs = [by[s]["gain_pct"] if s in by else None for s in shapes]
        err = dict(type="data", symmetric=False, thickness=1, width=3,
                   array=[by[s]["gain_hi_pct"] - by[s]["gain_pct"] if s in by else 0 for s in shapes],
                   arrayminus=[by[s]["gain_pct"] - by[s]["gain_lo_pct"] if s in by else 0 for s in shapes])
        fig.add_trace(go.Bar(
            y=ys, x=xs, orientation="h", name=f"n = {n}", marker_color=style.PALETTE[(i + 2) % len(style.PALETTE)],
            error_x=err,
            # two spaces between the bar's end and its label, where the band's whisker runs
            text=[("" if x is None else f"{style.WHISKER_GAP}{x:+.1f}%" if x >= 0 else f"{x:+.1f}%{style.WHISKER_GAP}") for x in xs],
            textposition="outside", cliponaxis=False,
            constraintext="none",
            hovertext=[f"{label(*s)}, n = {n}: {by[s]['tflops_0']:.2f} → {by[s]['tflops_1']:.2f} TFLOP/s<br>"
                       f"gain {by[s]['gain_pct']:+.1f}% (over the time bands: {by[s]['gain_lo_pct']:+.1f}% to "
                       f"{by[s]['gain_hi_pct']:+.1f}%)" if s in by else "not measured" for s in shapes], hoverinfo="text"))
    fig.update_layout(barmode="group", bargap=0.2)
    vals = [g["gain_lo_pct"] for g in gains] + [g["gain_hi_pct"] for g in gains]
    lo, hi = min(0, min(vals)), max(0, max(vals))
    fig.update_xaxes(range=[lo - 0.3 * (hi - lo) - 1, hi + 0.3 * (hi - lo) + 1], zeroline=True, zerolinecolor="#999")
    fig.update_yaxes(type="category", autorange="reversed", title="block · B/A = BX / BY")
    return style.finish(fig, "Gain of SWAP=1 over SWAP=0", "gain (%), bars: time bands", None, source,
                        height=220 + 48 * len(shapes))


def _below(g: dict) -> str:
    b = g["below"]
    return (f"{label(g['BX'], g['BY'])} gains {g['gain_pct']:+.1f}%, below {label(b['BX'], b['BY'])}'s "
            f"{b['gain_pct']:+.1f}% although B is re-read {g['rereads_b_over_a']:g} times as often as A")


def _furthest(g: dict, n: int, fit: dict) -> str:
    """", and it is the shape furthest below its L1 ceiling in both orders (x% and y%)" where that holds."""
    mine = fit.get((n, g["BX"], g["BY"]), [])
    lines = model.per_k_step("coalescing", g["BX"], g["BY"])["lines"]
    others = [max(v) for (m, bx, by), v in fit.items()
              if m == n and (bx, by) != (g["BX"], g["BY"]) and model.per_k_step("coalescing", bx, by)["lines"] == lines]
    if len(mine) == 2 and others and max(mine) < min(others):
        return (f"; it is also the {lines}-line shape furthest below its L1 ceiling, in both orders "
                f"({100 * min(mine):.0f}% and {100 * max(mine):.0f}%): something the re-read count does not "
                "model holds it back whichever way the grid runs")
    return ""


def swap_text(rs: ResultSet) -> Text:
    """What the sweep says about the L2 argument: where the gain grows with BX / BY, where it
    vanishes, and which shapes contradict it."""
    d = rs.device
    fit: dict = {}
    for f in model.ceiling_fit(rs.rows, d):
        fit.setdefault((f["n"], f["BX"], f["BY"]), []).append(f["ratio"])
    out = []
    for a in model.swap_analysis(rs.rows, d):
        mb = a["operands_bytes"] / 2**20
        order = ", ".join(f"{label(g['BX'], g['BY'])} {g['gain_pct']:+.1f}%" for g in a["gains"])
        if a["fits_in_l2"]:
            out.append(f"- **n = {a['n']}**: A, B and C take {mb:.0f} MB, which fits in the {d.l2_bytes / 2**20:.0f} MB "
                       f"L2. The gains lie between {a['min_pct']:+.1f}% and {a['max_pct']:+.1f}% ({order}).")
            continue
        line = (f"- **n = {a['n']}**: A, B and C take {mb:.0f} MB, more than the {d.l2_bytes / 2**20:.0f} MB L2. In "
                f"order of BX / BY: {order}.")
        held = [g for g in a["gains"] if min(fit.get((a["n"], g["BX"], g["BY"]), [0])) >= 0.95]
        if held:
            line += (f" {', '.join(label(g['BX'], g['BY']) for g in held)} run at 95% or more of their L1-line "
                     "ceiling in either order: the lines per k hold them, not L2.")
        clear = [g for g in a["against"] if not g["within_spread"]]
        noisy = [g for g in a["against"] if g["within_spread"]]
        if clear:
            line += (" **The data contradict the simple prediction**, by more than the spread of the launches: "
                     + "; ".join(
                         f"{_below(g)}" + _furthest(g, a["n"], fit) for g in clear) + ".")
        for g in noisy:
            line += (f" **In the median, {label(g['BX'], g['BY'])} contradicts the prediction**: {_below(g)}. But its "
                     f"launches varied (20-80%: {g['ms_0'][0]:.1f}-{g['ms_0'][1]:.1f} ms with SWAP=0, "
                     f"{g['ms_1'][0]:.1f}-{g['ms_1'][1]:.1f} ms with SWAP=1), so its gain lies anywhere from "
                     f"{g['gain_lo_pct']:+.1f}% to {g['gain_hi_pct']:+.1f}%: within that spread this sweep cannot tell"
                     + _furthest(g, a["n"], fit) + ".")
        if not a["against"]:
            line += " No shape gains less than one with a smaller BX / BY (by more than a point)."
        out.append(line)
    return Text("\n".join(out) or "These rows hold no block shape timed in both grid orders.")


def swap_summary(rs: ResultSet) -> Text:
    """The two predictions of the L2 argument, each held against the sweep: the order matters
    little where the operands fit in L2; where they do not, wide blocks gain more than square ones."""
    out = []
    for a in model.swap_analysis(rs.rows, rs.device):
        if a["fits_in_l2"]:
            worst = max(abs(g["gain_pct"]) for g in a["gains"])
            out.append(f"At n = {a['n']}, where the matrices fit in L2, the order changes the time by at most "
                       f"{worst:.1f}%" + (", as predicted." if worst <= 3 else
                                          ": more than the argument predicts for data that stays in L2."))
            continue
        square = [g["gain_pct"] for g in a["gains"] if g["rereads_b_over_a"] == 1]
        wide = [g for g in a["gains"] if g["rereads_b_over_a"] >= 4]
        if not square or not wide:
            continue
        top = max(wide, key=lambda g: g["gain_pct"])
        verdict = "as predicted" if top["gain_pct"] > max(square) else "against the prediction"
        out.append(f"At n = {a['n']}, where they do not fit, the square blocks gain {min(square):+.1f}% to "
                   f"{max(square):+.1f}% and the wide ones up to {top['gain_pct']:+.1f}% "
                   f"({label(top['BX'], top['BY'])}), {verdict}" +
                   ("; but the gain does not keep growing with BX / BY." if a["against"] else "."))
    return Text(" ".join(out) or "These rows hold no block shape timed in both grid orders.")


# ------------------------------------------------------------------ occupancy
def _device_name(d: Device) -> str:
    return d.label if d.emulated else f"{d.label} ({d.arch})"


def occupancy_table(kernel: str, params: dict, devices: list[Device]) -> Table:
    """Registers (compiled offline for each device) and resident blocks and warps per SM."""
    rows = []
    for d in devices:
        res, occ = of_config(kernel, params, device=d)
        rows.append({"device": _device_name(d), "threads per block": get(kernel).threads(params),
                     "registers per thread": res.registers, "blocks per SM": occ.blocks_per_sm,
                     "block limit per SM": d.max_blocks_per_sm,
                     "warps per SM": f"{occ.active_warps} of {occ.max_warps}",
                     "occupancy": f"{100 * occ.fraction:.0f}%", "limited by": occ.limiter})
    return Table(rows, caption=f"{get(kernel).title} {get(kernel).label(params)}: occupancy from the compiler's "
                               "register count and the device's limits")


def occupancy_text(kernel: str, params: dict, devices: list[Device]) -> Text:
    """The occupancy comparison in one sentence per device."""
    parts = []
    for d in devices:
        res, occ = of_config(kernel, params, device=d)
        verdict = ("the SM's full capacity" if occ.active_warps == occ.max_warps
                   else f"{100 * occ.fraction:.0f}% of the SM, limited by {occ.limiter}")
        parts.append(f"on {_device_name(d)} {occ.blocks_per_sm} blocks of {get(kernel).threads(params)} threads "
                     f"are resident per SM, {occ.active_warps} of {occ.max_warps} warps: {verdict}")
    text = "; ".join(parts)
    return Text(text[:1].upper() + text[1:] + ".")


# ------------------------------------------------------------------ launching and checking
def launch_table(kernel: str, shapes, device: Device, params: dict | None = None) -> Table:
    """How a config is compiled and launched for some shapes on ``device``: the C++ instantiation, block
    and grid."""
    spec = get(kernel)
    p = spec.resolve(params)
    return Table([{"instantiation": spec.name_expression(p), "block (x, y, z)": str(spec.block(p)),
                   "M x N x K": "x".join(map(str, s)), "grid (x, y, z)": str(spec.grid(p, *s, device))}
                  for s in shapes])


def tolerance_table(Ks=(1, 777, 4096)) -> Table:
    """The relative error a correct float32 result may have, for some K."""
    return Table([{"K": K, "tolerance 8·eps·sqrt(K)": tolerance(K)} for K in Ks])


def live_checks(kernel: str, shapes, variants=({},)) -> Table | Text:
    """On a GPU: each config checked against cuBLAS on each shape. Without one: a sentence."""
    if not is_live():
        return Text("*No GPU here*: this cell checks the kernel against cuBLAS on these shapes when one is present "
                    f"({', '.join('x'.join(map(str, s)) for s in shapes)}).")
    rows = []
    for p in variants:
        for s in shapes:
            r = check(kernel, *s, params=p)
            rows.append({"config": get(kernel).label(r.params), "M x N x K": "x".join(map(str, s)),
                         "relative error": r.rel_err, "tolerance": r.tol, "unwritten": r.unwritten,
                         "wrong elements": r.wrong, "correct": r.ok})
    return Table(rows, caption="Checked against cupy.matmul (cuBLAS, TF32 off) on fresh random data")


# ------------------------------------------------------------------ correctness of the grid order
def write_table(cases) -> Table:
    """For (params, M, N) cases: is every element of C written exactly once?"""
    rows = []
    for p, M, N in cases:
        hits = model.write_counts(p, M, N)
        rows.append({"config": get("coalescing").label(p), "SWAP": p["SWAP"], "C": f"{M} x {N}",
                     "written once": int((hits == 1).sum()), "never": int((hits == 0).sum()),
                     "twice or more": int((hits > 1).sum())})
    return Table(rows, caption="Writes per element of C, block by block, as the index math says (no GPU)")


# ------------------------------------------------------------------ the block schedule
def _sched_label(r: dict) -> str:
    p = r["params"]
    return f"{label(p['BX'], p['BY'])} SWAP={p['SWAP']}"


def schedule_table(rows: list[dict]) -> Table:
    """Medians over the run of the traced kernel: blocks in flight and the strips they cover."""
    out = []
    for r in rows:
        m = r["median"]
        out.append({"config": _sched_label(r), "blocks in flight": m["in_flight"], "row strips (A)": m["row_strips"],
                    "A in flight, MB": m["a_mb"], "column strips (B)": m["col_strips"], "B in flight, MB": m["b_mb"],
                    "blocks per SM": m["sm_blocks"], "column strips per SM": m["sm_col_strips"],
                    "row strips per SM": m["sm_row_strips"], "traced run, ms": r.get("kernel_ms")})
    return Table(out, caption="Medians over snapshots of the run (thread 0 of each block wrote its SM and clock)")


def schedule_figure(rows: list[dict], source: str) -> go.Figure:
    """Per SM: blocks resident and the distinct column strips (B) and row strips (A) they read."""
    ys = [_sched_label(r) for r in rows]
    fig = go.Figure()
    for key, name, c in (("sm_blocks", "blocks resident per SM", "#7f7f7f"),
                         ("sm_col_strips", "column strips (of B) per SM", style.PALETTE[0]),
                         ("sm_row_strips", "row strips (of A) per SM", style.PALETTE[1])):
        xs = [r["median"][key] for r in rows]
        fig.add_trace(go.Bar(y=ys, x=xs, orientation="h", name=name, marker_color=c, text=[f"{x:.1f}" for x in xs],
                             textposition="outside", cliponaxis=False, constraintext="none"))
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(range=[0, max(max(r["median"][k] for k in ("sm_blocks", "sm_col_strips", "sm_row_strips"))
                                   for r in rows) * 1.2])
    return style.finish(fig, "Strips of A and B per SM", "count (median over the run)", None, source,
                        height=240 + 70 * len(rows))


def schedule_text(rows: list[dict], timed: ResultSet) -> Text:
    """What the trace shows, per config, and whether the traced run's order agrees with the timed sweep."""
    parts = []
    for r in rows:
        m, p = r["median"], r["params"]
        parts.append(f"- **{_sched_label(r)}**: {m['in_flight']:.0f} blocks in flight cover {m['row_strips']:.0f} "
                     f"row strips ({m['a_mb']:.1f} MB of A) and {m['col_strips']:.0f} column strips ({m['b_mb']:.1f} MB "
                     f"of B); the {m['sm_blocks']:.1f} blocks on one SM read {m['sm_col_strips']:.1f} column strips.")
    pairs = {}
    for r in rows:
        pairs.setdefault((r["params"]["BX"], r["params"]["BY"], r["M"]), {})[r["params"]["SWAP"]] = r
    for (bx, by, n), d in pairs.items():
        if 0 in d and 1 in d and d[0].get("kernel_ms") and d[1].get("kernel_ms"):
            t = {s: timed.where(BX=bx, BY=by, SWAP=s, M=n) for s in (0, 1)}
            traced_faster = 1 if d[1]["kernel_ms"] < d[0]["kernel_ms"] else 0
            line = (f"- The traced copy of {label(bx, by)} (one launch, timer reads and a barrier added) took "
                    f"{d[0]['kernel_ms']:.1f} ms with SWAP=0 and {d[1]['kernel_ms']:.1f} ms with SWAP=1")
            if t[0] and t[1]:
                timed_faster = 1 if t[1][0]["tflops"] > t[0][0]["tflops"] else 0
                line += ("; the timed kernel agrees on which order is faster." if traced_faster == timed_faster
                         else f"; the timed kernel, without them, is faster with SWAP={timed_faster} "
                              f"({t[timed_faster][0]['ms']:.1f} against {t[1 - timed_faster][0]['ms']:.1f} ms): "
                              "the trace shows which blocks "
                              "run together, not the timed kernel's speed.")
            else:
                line += "."
            parts.append(line)
    return Text("\n".join(parts))


def ceiling_text(rs: ResultSet, mapping: str = "coalescing") -> Text:
    """Per lines-per-k group, how close the block shapes (better grid order) come to their ceiling."""
    fit = model.ceiling_fit(rs.rows, rs.device, mapping)
    n = sweep_n(fit)
    best: dict = {}
    for f in fit:
        s = (f["BX"], f["BY"])
        if f["n"] == n and (s not in best or f["ratio"] > best[s]["ratio"]):
            best[s] = f
    parts = []
    for lines in sorted({f["lines"] for f in best.values()}, reverse=True):
        group = sorted((f for f in best.values() if f["lines"] == lines), key=lambda f: wide_key(f["BX"], f["BY"]))
        lo, hi = min(f["ratio"] for f in group), max(f["ratio"] for f in group)
        names = ", ".join(label(f["BX"], f["BY"]) for f in group)
        span = f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}% to {100 * hi:.0f}%"
        line = (f"- **{lines} lines per k** ({names}; ceiling {group[0]['ceiling']:.2f} TFLOP/s): {span} of it"
                + (", on the ceiling: the L1 lines hold them." if lo >= 0.95 else "."))
        low = [f for f in group if f["ratio"] < hi - 0.1]
        if low and lo < 0.95:
            lows = ", ".join(f"{label(f['BX'], f['BY'])} only {100 * f['ratio']:.0f}%" for f in low)
            line = line[:-1] + f"; {lows}."
        parts.append(line)
    return Text(f"At n = {n}, measured (the better grid order) against the L1-line ceiling:\n\n" + "\n".join(parts))


# ------------------------------------------------------------------ one step against the last
def step_rows(previous: str, kernel: str, n: int = 4096) -> tuple[dict, str]:
    """{"<kernel> <config>": row} of two kernels' defaults at n (:func:`helpers.step`), and the source."""
    out, sources = {}, []
    for name in (previous, kernel):
        r, src = step(name, n)
        out[f"{get(name).title.split(' (')[0]} {get(name).label(r['params'])}"] = r
        sources.append(src)
    return out, generic.join_sources(sources)


def step_figure(named_rows: dict, source: str, title: str) -> go.Figure:
    """The previous step's bar and this one's, with cuBLAS of each run (:func:`figures.results.compare_steps`),
    tall enough for a 200-pixel plot area."""
    fig = generic.compare_steps(named_rows, source, title=title)
    # a bar shorter than its label on a phone (a third of the axis) gets the label after it: Plotly's
    # "auto" would keep it inside, running past the figure's left edge
    top = fig.layout.xaxis.range[1]
    fig.data[0].textposition = ["outside" if r["tflops"] < top / 3 else "auto" for r in named_rows.values()]
    return fig.update_layout(height=max(fig.layout.height or 0, 250 + style.MODEBAR_PX + 100 * len(named_rows)))


def step_text(named_rows: dict) -> Text:
    """The second row against the first: speed-up and share of cuBLAS, each with its time band."""
    (a_name, a), (b_name, b) = list(named_rows.items())[:2]
    return Text(f"At n = {b['M']}: {a_name} {a['tflops']:.3g} TFLOP/s (median of {a.get('reps', '?')} launches, "
                f"20-80% {a['ms_p20']:.4g}-{a['ms_p80']:.4g} ms), {b_name} {b['tflops']:.3g} TFLOP/s "
                f"({b['ms_p20']:.4g}-{b['ms_p80']:.4g} ms): **{b['tflops'] / a['tflops']:.1f}× faster**, "
                f"{generic.percent_of_cublas(b):.1f}% of cuBLAS ({b['cublas_tflops']:.1f} TFLOP/s in the same run).")
