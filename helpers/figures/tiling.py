"""Figures of the tiling chapters: the emulated failure map, loads per result, a kernel's
throughput over two of its parameters, and recorded configs on the roofline.

Taught in the chapters "Shared-memory tiling" and "1D thread tiles" (the roofline figure
in every tiling chapter).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from ..hardware import Device, occupancy
from ..measure.results import step
from ..models import loads, tiling
from ..models.roofline import intensity
from ..runtime import offline
from ..runtime.spec import ConfigError
from ..runtime.specs import get
from ..tables import Table, Text
from . import style
from .results import compare_steps, config_label, hover, percent_of_cublas

CATEGORY_COLOURS = {tiling.CORRECT: "#2ca02c", tiling.WRONG: "#ff7f0e", tiling.UNDEFINED: "#7f7f7f",
                    tiling.CLOBBERED: "#d62728", tiling.UNWRITTEN: "#ffffff"}
TRANSPARENT = "rgba(0,0,0,0)"


def _discrete_scale(colours: dict) -> list:
    """A colour scale mapping the integers 0..len-1 to flat colour bands."""
    n = len(colours)
    scale = []
    for i in range(n):
        scale += [[i / n, colours[i]], [(i + 1) / n, colours[i]]]
    return scale


def failure_map(shapes=((40, 40, 32), (32, 32, 40), (40, 50, 45)), TILE: int = 32, seed: int = 0) -> go.Figure:
    """Each element of C after the *emulated* unguarded kernel, one shape at a time (a menu)."""
    steps = []
    for M, N, K in shapes:
        A, B = tiling.operands(M, N, K, seed)
        em = tiling.emulate_smem_tiling(A, B, TILE, guarded=False)
        cat = em.categories(A.astype(np.float64) @ B, K)
        text = [[f"C[{i}][{j}]: {tiling.CATEGORY_NAMES[int(cat[i, j])]}" for j in range(N)] for i in range(M)]
        traces = [go.Heatmap(z=cat, zmin=-0.5, zmax=len(CATEGORY_COLOURS) - 0.5,
                             colorscale=_discrete_scale(CATEGORY_COLOURS), showscale=False, hovertext=text,
                             hoverinfo="text", xgap=0.5, ygap=0.5, name="C")]
        present = [c for c in CATEGORY_COLOURS if (cat == c).any()]
        for c in present:    # legend entries: one marker per category present
            traces.append(go.Scatter(x=[None], y=[None], mode="markers", name=tiling.CATEGORY_NAMES[c],
                                     marker=dict(symbol="square", size=12, color=CATEGORY_COLOURS[c],
                                                 line=dict(color="#999", width=1))))
        correct = int((cat == tiling.CORRECT).sum())
        steps.append((f"{M}x{N}x{K}", traces, f"{M} x {N} x {K}: {correct} of {M * N} elements correct"))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(autorange="reversed", title="row of C", scaleanchor="x", constrain="domain")
    fig.update_xaxes(title="column of C", constrain="domain")
    return style.finish(fig, steps[0][2], source=f"emulated index math of the unguarded kernel, TILE = {TILE}",
                        height=560)


def loads_figure(configs: dict, K: int = 4096) -> go.Figure:
    """Global and shared loads per element of C (as multiples of K) for named ``{label: (kernel, params)}``."""
    names = list(configs)
    counts = [loads.per_result(k, p, K) for k, p in configs.values()]
    fig = go.Figure()
    for i, (key, what) in enumerate((("global", "from global memory"), ("shared", "from shared memory"))):
        xs = [c[key] / K for c in counts]
        fig.add_trace(go.Bar(y=names, x=xs, orientation="h", name=what, marker_color=style.PALETTE[i],
                             text=[loads.as_fraction_of_K(c[key], K) if c[key] else "0" for c in counts],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{y}: %{text} loads per result " + what + "<extra></extra>"))
    vals = [c[k] / K for c in counts for k in ("global", "shared") if c[k]]
    style.log_axis(fig, "x", [min(vals) / 1.5, max(vals) * 3], "loads per result (× K)")
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    return style.finish(fig, "Loads per element of C", source="model: K (1/BM + 1/BN) from global memory,<br>"
                        "K (TM + TN) / (TM TN) from shared memory", height=220 + 70 * len(names))


def params_heatmap(rows: list[dict], device: Device, source: str, x: str = "BK", y: str = "TM",
                   title: str = "") -> go.Figure:
    """TFLOP/s of one kernel over two parameters (rows at one shape); each cell also gives the
    warps per SM of the offline compile for the rows' device."""
    xs = sorted({r["params"][x] for r in rows})
    ys = sorted({r["params"][y] for r in rows})
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    tips = [[""] * len(xs) for _ in ys]
    for r in rows:
        i, j = ys.index(r["params"][y]), xs.index(r["params"][x])
        spec = get(r["kernel"])
        res = offline.resources(spec, r["params"], device)
        o = occupancy(spec.threads(r["params"]), res.registers, res.smem, device)
        z[i][j] = r["tflops"]
        text[i][j] = f"<b>{r['tflops']:.1f}</b><br>{o.active_warps} warps"
        tips[i][j] = (f"{hover(r)}<br>{res.registers} registers, {spec.threads(r['params'])} threads per block<br>"
                      f"{o}")
    fig = go.Figure(go.Heatmap(z=z, x=[str(v) for v in xs], y=[str(v) for v in ys], text=text,
                               texttemplate="%{text}", textfont=dict(size=style.FONT - 1), hovertext=tips,
                               hoverinfo="text", colorscale="Blues", showscale=False, xgap=2, ygap=2))
    fig.update_xaxes(type="category", title=x)
    fig.update_yaxes(type="category", title=y)
    return style.finish(fig, title, source=f"{source}<br>warps per SM: offline {device.arch} compile",
                        height=420, legend=False)


def _quiet_slider(fig: go.Figure) -> go.Figure:
    """A slider whose step labels would overlap shows only the current one (above the slider)."""
    if fig.layout.sliders:
        fig.layout.sliders[0].font = dict(color=TRANSPARENT, size=1)
        fig.layout.sliders[0].currentvalue.font = dict(color="#333", size=style.FONT)
        fig.layout.sliders[0].ticklen = 4
        fig.layout.sliders[0].pad.update(l=0, r=0)               # no end label to make room for
    return fig


def roofline_configs(rows: list[dict], device: Device, source: str, title: str = "") -> go.Figure:
    """Recorded configs on the device's roofline, one at a time (menu or slider): the tile sets the
    arithmetic intensity (model), the measurement the height. The other configs stay in grey."""
    rows = sorted(rows, key=lambda r: (intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"]), r["tflops"]))
    ai = [intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"]) for r in rows]
    lo, hi = min(ai + [device.ridge]) / 2, max(ai + [device.ridge]) * 4
    xs = [lo * (hi / lo) ** (i / 120) for i in range(121)]
    roof = go.Scatter(x=xs, y=[device.attainable(v) for v in xs], mode="lines", line=dict(color=style.CUBLAS),
                      name=f"roof: {device.bandwidth_tbs:.1f} TB/s, {device.fp32_tflops:.1f} TFLOP/s", hoverinfo="skip")
    steps = []
    for i, r in enumerate(rows):
        others = go.Scatter(x=ai, y=[q["tflops"] for q in rows], mode="markers", name="the other configs",
                            marker=dict(size=8, color="#c8c8c8"), hovertext=[hover(q) for q in rows],
                            hoverinfo="text")
        label = config_label(r)
        chosen = go.Scatter(x=[ai[i]], y=[r["tflops"]], mode="markers", name=label,
                            marker=dict(size=14, color=style.colour(r["kernel"]), line=dict(color="#000", width=1)),
                            hovertext=[hover(r)], hoverinfo="text")
        cublas = go.Scatter(x=[lo, hi], y=[r["cublas_tflops"]] * 2, mode="lines", name="cuBLAS, same run",
                            line=dict(color=style.CUBLAS, dash="dash", width=1))
        steps.append((label, [roof, others, cublas, chosen],
                      f"{label}: {ai[i]:.1f} FLOP/byte, {r['tflops']:.1f} TFLOP/s"))
    best = max(range(len(rows)), key=lambda i: rows[i]["tflops"])
    fig = _quiet_slider(style.steps_figure(steps, active=best, prefix="config: "))
    style.log_axis(fig, "x", [lo, hi], "arithmetic intensity, FLOP/byte (model)")
    y_span = [min(q["tflops"] for q in rows) / 2, device.fp32_tflops * 1.3]
    style.log_axis(fig, "y", y_span, "TFLOP/s")
    fig.update_yaxes(range=[math.log10(v) for v in y_span])     # the span the ticks were chosen for
    return style.finish(fig, title or steps[best][2], source=f"{source}<br>roofs: {device.label} ({device.source})",
                        height=540)


# ------------------------------------------------------------------ rows and steps
def spread(rows: list[dict]) -> float:
    """The widest 20th-80th percentile band of the rows' times, in percent of the median."""
    return max(100 * (r["ms_p80"] - r["ms_p20"]) / r["ms"] for r in rows) if rows else 0.0


def largest_square(rows: list[dict]) -> list[dict]:
    """The rows at the largest square size among them (the size a chapter compares at)."""
    square = [r for r in rows if r["M"] == r["N"] == r["K"]]
    n = max(r["M"] for r in square if r["M"] % 64 == 0)
    return [r for r in square if r["M"] == n]


def steps_at(kernels: list[str], sizes) -> dict:
    """{(kernel, n): row} of each kernel's default config at each square size the data holds."""
    out = {}
    for kernel in kernels:
        for n in sizes:
            try:
                row = step(kernel, n)[0]
            except (KeyError, ConfigError):
                continue
            if row["M"] == row["N"] == row["K"]:       # a quick live run may measure a smaller n
                out.setdefault((kernel, row["M"]), row)
    return out


def previous_step(previous: str, kernel: str, n: int = 4096, title: str | None = None) -> go.Figure:
    """The default configs of two kernels at n x n x n (the previous chapter's and this one's) with
    cuBLAS of the same runs: the book's step-by-step comparison."""
    named, source = {}, ""
    for name in (previous, kernel):
        row, source = step(name, n)
        named[f"{get(name).title}, {get(name).label(row['params'])}"] = row
    a, b = named.values()
    return compare_steps(named, source, title or f"n = {row['M']}: {b['tflops'] / a['tflops']:.2f}x the previous step")


def _square_n(rs) -> int:
    return max(r["M"] for r in rs.rows if r["M"] == r["N"] == r["K"] and r["M"] % 64 == 0)


def guard_table(rs) -> Table:
    """What the bounds checks and the grid order cost in the shared-memory chapter's rows, per tile size."""
    big = _square_n(rs)
    rows = []
    for t in sorted({r["params"]["TILE"] for r in rs.rows}):
        g = rs.where(kernel="smem_tiling", TILE=t, SWAP=1, M=big, N=big, K=big)
        u = rs.where(kernel="smem_tiling_unguarded", TILE=t, M=big, N=big, K=big)
        c = rs.where(kernel="smem_tiling", TILE=t, SWAP=0, M=big, N=big, K=big)
        if not g:
            continue
        g = g[0]
        rows.append({"TILE": t, "guarded (TFLOP/s)": round(g["tflops"], 2),
                     "unguarded": round(u[0]["tflops"], 2) if u else None,
                     "cost of the guards": f"{100 * (1 - g['tflops'] / u[0]['tflops']):+.1f}%" if u else None,
                     "guarded, columns-first": round(c[0]["tflops"], 2) if c else None,
                     "columns-first against rows-first": f"{100 * (c[0]['tflops'] / g['tflops'] - 1):+.1f}%" if c else None})
    return Table(rows, caption=f"n = {big}, {rs.source} (a negative cost: the guarded kernel was faster)")


def guard_text(rs) -> Text:
    """The spread of the times in :func:`guard_table`, and the guarded kernel on a size no tile divides."""
    big = _square_n(rs)
    used = [r for r in rs.rows if r["M"] == r["N"] == r["K"] == big]
    text = (f"Each of these times varied by at most {spread(used):.1f}% between the 20th and 80th percentile of "
            "its repetitions.")
    for r in [r for r in rs.where(kernel="smem_tiling", SWAP=1) if r["M"] % 64]:
        ref = rs.where(kernel="smem_tiling", TILE=r["params"]["TILE"], SWAP=1, M=big, N=big, K=big)
        text += (f" On {r['M']} x {r['N']} x {r['K']}, which no tile divides, the guarded TILE = "
                 f"{r['params']['TILE']} kernel runs at {r['tflops']:.2f} TFLOP/s"
                 + (f" ({100 * (r['tflops'] / ref[0]['tflops'] - 1):+.1f}% against n = {big})" if ref else "")
                 + f", {percent_of_cublas(r):.0f}% of cuBLAS in the same run ({r['cublas_tflops']:.1f} TFLOP/s"
                 + (f", against {ref[0]['cublas_tflops']:.1f} at n = {big})." if ref else ")."))
    return Text(text)


def why_table(rs, device: Device) -> Table:
    """The shared-memory kernel's tile sizes at the largest n: what the model and the compiled loop
    say about each (global loads, barriers and shared loads per multiply-add, warps), beside the speed."""
    rows = []
    for r in sorted(largest_square(rs.where(kernel="smem_tiling", SWAP=1)), key=lambda r: r["params"]["TILE"]):
        c = loads.loop_counts("smem_tiling", r["params"], device)
        res = offline.resources("smem_tiling", r["params"], device)
        o = occupancy(get("smem_tiling").threads(r["params"]), res.registers, res.smem, device)
        per = loads.per_result("smem_tiling", r["params"], r["K"])
        rows.append({"config": config_label(r), "global loads per result": loads.as_fraction_of_K(per["global"], r["K"]),
                     "barriers per k": round(c.counts.get("BAR", 0) / c.k_per_pass, 3),
                     "FFMA per shared-load instruction": round(c.counts.get("FFMA", 0) / c.shared_load_instructions, 2),
                     "warps per SM": f"{o.active_warps}/{o.max_warps}", "TFLOP/s": round(r["tflops"], 2)})
    return Table(rows, caption=f"n = {largest_square(rs.rows)[0]['M']}; loads from the model, the rest from the offline {device.arch} compile")


def roofline_text(rows: list[dict], device: Device) -> Text:
    """Where each config sits against the device's roofs: its intensity (model), the roof there,
    and the share of that roof it reaches."""
    parts = []
    for r in sorted(rows, key=lambda r: intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])):
        ai = intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])
        roof = device.attainable(ai)
        side = "under the memory roof" if ai < device.ridge else "under the compute roof"
        parts.append(f"{config_label(r)}: {ai:.1f} FLOP/byte, {side} of {roof:.1f} TFLOP/s, measured "
                     f"{r['tflops']:.2f} ({100 * r['tflops'] / roof:.0f}% of it)")
    return Text(f"The roofs of the {device.label} meet at {device.ridge:.1f} FLOP/byte. " + "; ".join(parts) + ".")


def grid_text(rows: list[dict], x: str = "BK", y: str = "TM") -> Text:
    """What a sweep over two parameters shows: the fastest cell, and the best x for each y."""
    best = max(rows, key=lambda r: r["tflops"])
    worst = min(rows, key=lambda r: r["tflops"])
    parts = [f"The fastest cell is {config_label(best)} at {best['tflops']:.1f} TFLOP/s, the slowest "
             f"{config_label(worst)} at {worst['tflops']:.1f}."]
    per = []
    for v in sorted({r["params"][y] for r in rows}):
        line = sorted((r for r in rows if r["params"][y] == v), key=lambda r: r["params"][x])
        top = max(line, key=lambda r: r["tflops"])
        per.append(f"{y} = {v} peaks at {x} = {top['params'][x]} ({top['tflops']:.1f})")
    parts.append("Along " + x + ": " + "; ".join(per) + ".")
    return Text(" ".join(parts) + f" The widest 20-80% band of these times is {spread(rows):.1f}%.")


def grid_fill_text(rows: list[dict], device: Device) -> Text:
    """How many blocks each square size gives the device's SMs (a kernel's default config)."""
    parts = []
    for r in sorted((r for r in rows if r["M"] == r["N"] == r["K"] and r["M"] % 64 == 0), key=lambda r: r["M"]):
        spec = get(r["kernel"])
        gx, gy, gz = spec.grid(r["params"], r["M"], r["N"], r["K"], device)
        blocks = gx * gy * gz
        parts.append(f"n = {r['M']}: {blocks:,} blocks ({blocks / device.sm_count:.1f} per SM), "
                     f"{r['tflops']:.1f} TFLOP/s")
    return Text(f"{config_label(rows[0])} on the {device.sm_count} SMs of the {device.label}: " + "; ".join(parts) + ".")


def fastest_text(rows: list[dict], measure: str = "", default: dict | None = None) -> Text:
    """The fastest and slowest of some configs at one shape, with the spread of their times; with
    the kernel's ``default`` config, where it stands among them."""
    best, worst = max(rows, key=lambda r: r["tflops"]), min(rows, key=lambda r: r["tflops"])
    text = (f"Fastest at n = {best['M']}: {config_label(best)}, {best['tflops']:.1f} TFLOP/s "
            f"({percent_of_cublas(best):.0f}% of cuBLAS){measure}; slowest: {config_label(worst)}, "
            f"{worst['tflops']:.1f}. The widest 20-80% band of these {len(rows)} times is {spread(rows):.1f}%.")
    mine = next((r for r in rows if default is not None and r["params"] == default), None)
    if mine is not None and mine is not best:
        rank = 1 + sum(r["tflops"] > mine["tflops"] for r in rows)
        text += (f" The kernel's default, {config_label(mine)}, ranks {rank} of {len(rows)} at {mine['tflops']:.1f} "
                 f"TFLOP/s, {100 * (1 - mine['tflops'] / best['tflops']):.0f}% behind the fastest: a default is "
                 "fixed in the kernel's spec, the same on every GPU, while which config is fastest depends on the "
                 "GPU and the size, which is why the chapters measure a sweep (and chapter 11 automates it).")
    return Text(text)


def ceilings_table(rows: list[dict], device: Device) -> Table:
    """Both ceilings over each config, as a table: its intensity (model), the roofline there, the
    shared-memory bound of its compiled loop, the lower of the two and how much of it is reached."""
    out = []
    for r in sorted(rows, key=lambda r: intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])):
        ai = intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])
        roof, shared = device.attainable(ai), loads.shared_bound(r["kernel"], r["params"], device)
        low = min(roof, shared)
        out.append({"config": config_label(r), "FLOP/byte": round(ai, 1), "roofline (TFLOP/s)": round(roof, 1),
                    "shared-memory bound": round(shared, 1),
                    "lower ceiling": "roofline" if roof < shared else "shared memory",
                    "measured": round(r["tflops"], 2), "% of the lower": round(100 * r["tflops"] / low)})
    return Table(out, caption=f"The two ceilings at n = {rows[0]['M']} on the {device.label} (roofs meet at "
                              f"{device.ridge:.1f} FLOP/byte)")


def ceilings_text(rows: list[dict], device: Device) -> Text:
    """The two ceilings over each config (the memory roof at its intensity, the shared-memory bound of its
    compiled loop): which is lower, and how much of it the measurement reaches."""
    parts = []
    for r in sorted(rows, key=lambda r: intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])):
        roof = device.attainable(intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"]))
        shared = loads.shared_bound(r["kernel"], r["params"], device)
        low, name = (roof, "the roofline") if roof < shared else (shared, "the shared-memory bound")
        parts.append(f"{config_label(r)}: {name} ({low:.1f} TFLOP/s; the other is {max(roof, shared):.1f}), "
                     f"reached to {100 * r['tflops'] / low:.0f}%")
    return Text("The lower of the two ceilings, per config: " + "; ".join(parts) + ".")
