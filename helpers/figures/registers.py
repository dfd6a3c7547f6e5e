"""Figures of the register-tile chapters: what a TM x TN thread tile buys and costs, the measured
configs against their reuse, and the instructions of one k-slice.

Taught in the chapters "2D thread tiles" and "Vectorized float4 access".
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..hardware import Device
from ..models import register_tiles as rt
from ..models.roofline import intensity
from ..runtime.specs import get
from ..tables import Table, Text
from . import style
from .results import config_label, hover, percent_of_cublas

VERDICT_MARK = {"fits": "", "needs more registers": "✗ registers", "too many threads": "✗ threads",
                "not whole warps": "✗ warps"}


def fma_heatmap(BM: int, BN: int, device: Device, sizes=(1, 2, 4, 8, 16)) -> go.Figure:
    """Multiply-adds per shared load over TM x TN on a BM x BN block; a cell the block cannot use
    says why (too many threads for a block, not whole warps, or more registers than a thread gets)."""
    z, text, tips = [], [], []
    for TM in sizes:
        zr, tr, hr = [], [], []
        for TN in sizes:
            c = rt.tile_cost(BM, BN, TM, TN, device)
            zr.append(c.fma_per_load)
            mark = VERDICT_MARK[c.why]
            tr.append(f"<b>{c.fma_per_load:.2g}</b>" + (f"<br>{mark}" if mark else ""))
            budget = f"{c.budget} allowed" if c.budget else f"above the {device.max_threads_per_block}-thread limit"
            hr.append(f"TM={TM}, TN={TN}: {c.fma_per_load:.2f} FMA per shared load<br>"
                      f"{c.threads} threads per {BM}x{BN} block<br>{c.live} values live, about {c.needed} "
                      f"registers needed, {budget}<br><b>{c.why}</b>")
        z.append(zr)
        text.append(tr)
        tips.append(hr)
    fig = go.Figure(go.Heatmap(z=z, x=[str(s) for s in sizes], y=[str(s) for s in sizes], text=text,
                               texttemplate="%{text}", textfont=dict(size=style.FONT - 2), hovertext=tips,
                               hoverinfo="text", colorscale="Blues", showscale=False, xgap=2, ygap=2))
    fig.update_xaxes(title="TN (columns per thread)", type="category")
    fig.update_yaxes(title="TM (rows per thread)", type="category", autorange="reversed")
    return style.finish(fig, f"FMA per shared load on a {BM}x{BN} block",
                        source=f"✗: the block cannot use the tile<br>({device.label}'s limits, the kernel's "
                               "register model)", height=480, legend=False)


def reuse_scatter(rows: list[dict], source: str, title: str = "") -> go.Figure:
    """Measured TFLOP/s of 2D-tile configs against their multiply-adds per shared load."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[rt.fma_per_load(r["params"]["TM"], r["params"]["TN"]) for r in rows], y=[r["tflops"] for r in rows],
        mode="markers", name="a recorded config", hovertext=[hover(r) for r in rows], hoverinfo="text",
        marker=dict(size=11, color=[style.colour(r["kernel"]) for r in rows], line=dict(color="#000", width=1))))
    cublas = max(r["cublas_tflops"] for r in rows)
    xs = [rt.fma_per_load(r["params"]["TM"], r["params"]["TN"]) for r in rows]
    fig.add_trace(go.Scatter(x=[min(xs) * 0.8, max(xs) * 1.2], y=[cublas, cublas], mode="lines",
                             name="cuBLAS, same run", line=dict(color=style.CUBLAS, dash="dash")))
    fig.update_yaxes(rangemode="tozero")
    return style.finish(fig, title, "FMA per shared load, TM·TN / (TM + TN)", "TFLOP/s", source, height=460)


SLICE_KINDS = ("LDG", "LDG.128", "STS", "STS.128", "LDS.128")


def slice_figure(kernels: list[str]) -> go.Figure:
    """Memory instructions per thread and k-slice on an inner tile, kernel beside kernel."""
    fig = go.Figure()
    ffma = set()
    for name in kernels:
        c = rt.slice_instructions(name)
        ffma.add(c["FFMA"])
        fig.add_trace(go.Bar(x=list(SLICE_KINDS), y=[c.get(k, 0) for k in SLICE_KINDS],
                             name=f"{get(name).title}: {sum(v for k, v in c.items() if k != 'FFMA')} in all",
                             marker_color=style.colour(name), text=[c.get(k, 0) for k in SLICE_KINDS],
                             textposition="outside", cliponaxis=False))
    fig.update_layout(barmode="group")
    each = f" ({ffma.pop()} FFMA each)" if len(ffma) == 1 else ""
    return style.finish(fig, f"Memory instructions per k-slice{each}", "instruction",
                        "per thread per k-slice", "from the kernels' structure, default configs", height=440)


def configs_table(rows: list[dict], device: Device) -> Table:
    """Configs at one shape, fastest first: thread tile, multiply-adds per shared load, the
    roof at the block tile's intensity, the measurement and its share of cuBLAS."""
    out = []
    for r in sorted(rows, key=lambda r: -r["tflops"]):
        ai = intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"])
        out.append({"config": config_label(r), "FMA per shared load": round(rt.fma_per_load(r["params"]["TM"],
                                                                                         r["params"]["TN"]), 2),
                    "FLOP/byte": round(ai, 1), "roof (TFLOP/s)": round(device.attainable(ai), 1),
                    "TFLOP/s": round(r["tflops"], 2), "% of cuBLAS": round(percent_of_cublas(r))})
    return Table(out, caption=f"n = {rows[0]['M']}, recorded on {device.label}; roof: the lower of the memory "
                              f"roof at the config's intensity and the FP32 peak (ridge at {device.ridge:.1f} FLOP/byte)")


def fastest_line(rows: list[dict], default: dict | None = None) -> Text:
    """The fastest config at one shape and its share of cuBLAS; where the kernel's default stands."""
    best = max(rows, key=lambda r: r["tflops"])
    text = (f"The fastest configuration at n = {best['M']} is {config_label(best)}: **{best['tflops']:.1f} TFLOP/s**, "
            f"{percent_of_cublas(best):.0f}% of cuBLAS.")
    mine = next((r for r in rows if default is not None and r["params"] == default), None)
    if mine is not None and mine is not best:
        rank = 1 + sum(r["tflops"] > mine["tflops"] for r in rows)
        text += f" The kernel's default config ranks {rank} of {len(rows)}."
    return Text(text)
