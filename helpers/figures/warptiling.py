"""Figures, tables and computed sentences of the chapter "Warp tiling" (book/10_warptiling.md).

The geometry is the spec's (:func:`helpers.runtime.rules.warp_layout`,
:func:`helpers.models.waves.thread_cells`); the shared-memory work per FFMA comes from
two bank models (:func:`helpers.models.banks.fragment_wavefronts`) and from Nsight
Compute's counters: data source ``warptiling_ncu`` for the warp-tiled kernels, and
``bank_conflicts_ncu`` for the 8 x 8 split thread tile of the chapters before, whose
reads the two-stage kernel shares.
"""
from __future__ import annotations

import json
import math

import plotly.graph_objects as go

from ..measure import datafile, ncu
from ..measure.results import results
from ..models import banks
from ..models.waves import thread_cells
from ..runtime.rules import warp_layout
from ..runtime.specs import get
from ..tables import Table, Text
from . import style
from .banks import Solution, finish, pct, quiet_slider, roofline_configs, same_roof, step_text
from .pipeline import mix, registers
from .banks import largest_square

KERNEL = "warptiling"
__all__ = ["Solution", "roofline_configs", "same_roof", "step_text", "registers", "tiling_figure", "hierarchy_figure",
           "hot_loop", "work",
           "work_table", "work_figure", "work_text", "conflicts_text", "best_text"]


rects = style.rects


def tiling_figure(configs: list[dict], kernel: str = KERNEL) -> go.Figure:
    """Block tile -> warp tiles -> thread sub-tiles, drawn to scale; a menu or slider picks the config.

    Grey: the block tile with its warp tiles; blue: warp 0's sub-tiles (one per WMITER x
    WNITER iteration); red: the 4 x 4 pieces lane 0 computes; orange: lane 1's.
    """
    spec = get(kernel)
    steps = []
    for p in configs:
        p = spec.resolve(p)
        g = warp_layout(p)
        warps = [(wn * p["WN"], wm * p["WM"], (wn + 1) * p["WN"], (wm + 1) * p["WM"])
                 for wm in range(g["warps_m"]) for wn in range(g["warps_n"])]
        x, y = rects(warps)
        traces = [go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor="rgba(200,200,200,0.25)",
                             line=dict(color="#888", width=2), hoverinfo="skip",
                             name=f"{len(warps)} warp tiles of {p['WM']}x{p['WN']}")]
        subs = [(j * g["sub_n"], i * g["sub_m"], (j + 1) * g["sub_n"], (i + 1) * g["sub_m"])
                for i in range(g["wmiter"]) for j in range(g["wniter"])]
        x, y = rects(subs)
        traces.append(go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor="rgba(31,119,180,0.12)",
                                 line=dict(color=style.PALETTE[0], width=1), hoverinfo="skip",
                                 name=f"warp 0: {g['wmiter']}x{g['wniter']} sub-tiles of {g['sub_m']}x{g['sub_n']}"))
        for lane, colour in ((0, "#d62728"), (1, "#ff7f0e")):
            rows, cols = thread_cells(p, 0, lane)
            x, y = rects([(c, r, c + 4, r + 4) for r in rows[::4] for c in cols[::4]])
            traces.append(go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor=colour,
                                     line=dict(color=colour, width=1),
                                     name=f"lane {lane}: {p['TM']}x{p['TN']} results in 4x4 pieces",
                                     hovertext=f"lane {lane}: rows {rows[::4]}, columns {cols[::4]} (+0..3)",
                                     hoverinfo="text"))
        label = spec.label(p)
        title = f"{g['threads']} threads, lanes {g['lanes_m']}x{g['lanes_n']}, {p['TM']}x{p['TN']} per lane"
        steps.append((label, traces, title))
    fig = quiet_slider(style.steps_figure(steps, active=0, prefix="config: "))
    fig.update_yaxes(autorange="reversed", title="row of the block tile (M)", scaleanchor="x", constrain="domain")
    fig.update_xaxes(title="column of the block tile (N)", constrain="domain")
    return finish(fig, steps[0][2], source="the kernel's index math (helpers.models.waves.thread_cells)",
                        height=640)


HIERARCHY = [   # block tile, warp tile, thread tile: the steps of the chapter's picture
    dict(BM=128, BN=128, WM=64, WN=64, TM=16, TN=8),
    dict(BM=128, BN=128, WM=64, WN=64, TM=8, TN=16),
    dict(BM=128, BN=128, WM=64, WN=32, TM=8, TN=8),
    dict(BM=128, BN=128, WM=32, WN=64, TM=8, TN=8),
    dict(BM=128, BN=256, WM=64, WN=64, TM=16, TN=8),
    dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8),
    dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8),
    dict(BM=32, BN=64, WM=16, WN=32, TM=4, TN=4),
]


def lane_colour(lane: int) -> str:
    """32 distinguishable colours: 8 hues x 4 shades, one per lane."""
    hue = style.PALETTE[lane % 8]
    r, g, b = (int(hue.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    f = 1 - 0.22 * (lane // 8)                     # darker for each further group of 8 lanes
    return f"rgb({int(r * f)},{int(g * f)},{int(b * f)})"


def hierarchy_traces(p: dict) -> list:
    """Block tile (grey outline) -> its warp tiles (outlined, numbered) -> every lane's 4 x 4
    pieces in warp 0, one colour per lane, the corner lanes of the lane grid numbered."""
    g = warp_layout(p)
    warps = [(wn * p["WN"], wm * p["WM"], (wn + 1) * p["WN"], (wm + 1) * p["WM"])
             for wm in range(g["warps_m"]) for wn in range(g["warps_n"])]
    x, y = rects(warps)
    traces = [go.Scatter(x=x, y=y, mode="lines", line=dict(color="#555", width=2), hoverinfo="skip",
                         name=f"block {p['BM']}x{p['BN']}: {len(warps)} warp tiles of {p['WM']}x{p['WN']}")]
    traces.append(go.Scatter(x=[(b[0] + b[2]) / 2 for b in warps[1:]], y=[(b[1] + b[3]) / 2 for b in warps[1:]],
                             mode="text", text=[f"warp {w}" for w in range(1, len(warps))], hoverinfo="skip",
                             textfont=dict(color="#555", size=style.FONT), showlegend=False))
    xs, ys, labels = [], [], []
    for lane in range(32):
        rows, cols = thread_cells(p, 0, lane)
        boxes = [(c, r, c + 4, r + 4) for r in rows[::4] for c in cols[::4]]
        bx, by = rects(boxes)
        traces.append(go.Scatter(x=bx, y=by, fill="toself", mode="lines", fillcolor=lane_colour(lane),
                                 line=dict(color="white", width=0.5), showlegend=lane == 0,
                                 name=f"warp 0: 32 lanes x {g['wmiter'] * g['wniter']} pieces of 4x4 "
                                      f"({p['TM']}x{p['TN']} per lane)",
                                 legendgroup="lanes", hoverinfo="text",
                                 hovertext=f"lane {lane}: rows {rows[::4]}, columns {cols[::4]} (+0..3)"))
        # the corner lanes of the warp's lane grid numbered: the others follow row by row, and the
        # pieces are a few pixels wide on a phone, too narrow for a number each (the hover has it)
        if lane in (0, g["lanes_n"] - 1, 32 - g["lanes_n"], 31):
            xs.append(cols[0] + 2)
            ys.append(rows[0] + 2)
            labels.append(str(lane))
    if p["WM"] * p["WN"] <= 64 * 64 and g["wmiter"] * g["wniter"] <= 8:
        traces.append(go.Scatter(x=xs, y=ys, mode="text", text=labels, hoverinfo="skip", showlegend=False,
                                 textfont=dict(color="white", size=style.FONT - 5)))
    return traces


def hierarchy_figure(configs: list[dict] = HIERARCHY, kernel: str = KERNEL) -> go.Figure:
    """The three levels of tiles drawn to scale, one config per slider step: the block tile, its warp
    tiles, and in warp 0 the 4 x 4 pieces of every lane (the corner lanes' numbers on their first pieces)."""
    spec = get(kernel)
    steps = []
    for p in configs:
        p = spec.resolve(p)
        g = warp_layout(p)
        steps.append((f"{p['BM']}x{p['BN']} w{p['WM']}x{p['WN']} t{p['TM']}x{p['TN']}", hierarchy_traces(p),
                      f"{g['threads']} threads; a warp's lanes {g['lanes_m']}x{g['lanes_n']}, "
                      f"{p['TM']}x{p['TN']} results each"))
    fig = quiet_slider(style.steps_figure(steps, active=0, prefix="tiles: "))
    fig.update_yaxes(autorange="reversed", title="row of the block tile (M)", scaleanchor="x", constrain="domain")
    fig.update_xaxes(title="column of the block tile (N)", constrain="domain")
    return finish(fig, steps[0][2], source="the kernel's index math (helpers.models.waves.thread_cells)",
                  height=640)


def hot_loop(configs: list[tuple[str, str, dict]], device=None) -> Table:
    """Instruction mix of each kernel's main loop as interior tiles run it (offline compile): FFMA share."""
    return mix(configs, device)


# ---------------------------------------------------------- shared-memory work
def counter_rows(chapter: str) -> list[dict]:
    """The pivoted Nsight Compute rows of a data source, each with the n it was profiled at,
    or [] where the source is not recorded."""
    try:
        rows = results(chapter).rows
    except (datafile.DataError, KeyError):
        return []
    sizes = {(r["kernel"], json.dumps(r["params"], sort_keys=True)): r["M"] for r in rows if r.get("M")}
    return [dict(d, n=sizes.get((d["kernel"], json.dumps(d["params"], sort_keys=True)))) for d in ncu.pivot(rows)]


def source_of(chapter: str) -> str | None:
    try:
        return results(chapter).source
    except (datafile.DataError, KeyError):
        return None


def profiled(kernel: str, params: dict | None = None) -> tuple[dict, str] | tuple[None, None]:
    """The counters of a config: its own (warptiling_ncu), or those of a config that reads shared
    memory the same way (kernel 08's layout with the same smem_layout, in bank_conflicts_ncu)."""
    spec = get(kernel)
    p = spec.resolve(params)
    for d in counter_rows("warptiling_ncu"):
        if d["kernel"] == spec.name and get(d["kernel"]).resolve(d["params"]) == p:
            return d, "warptiling_ncu"
    layout = spec.smem_layout(p) if spec.smem_layout else None
    if layout:
        for d in counter_rows("bank_conflicts_ncu"):
            s = get(d["kernel"])
            if s.smem_layout and s.smem_layout(s.resolve(d["params"])) == layout:
                return d, "bank_conflicts_ncu"
    return None, None


def work(configs: list[tuple[str, str, dict]]) -> list[dict]:
    """Per config, per k step of one warp: LDS.128, FFMA, shared-load wavefronts in both models
    and, where profiled, measured (Nsight Compute, normalised to wavefronts per 1000 warp FFMA)."""
    out = []
    for label, kernel, params in configs:
        m = banks.fragment_wavefronts(kernel, params)
        d, chapter = profiled(kernel, params)
        row = {"kernel": label, "LDS.128 per k": m["lds_per_thread"], "FFMA per k": m["ffma_per_thread"],
               "chunk model": m["waves_per_1k_warp_ffma"], "quarter-warp model": m["quarter_per_1k_warp_ffma"],
               "measured": None, "per instruction": None, "load bank conflicts": None, "store bank conflicts": None,
               "counters of": None}
        if d and d["n"]:
            row["measured"] = 1000 * d["load wavefronts"] / banks.warp_ffma(d["n"], d["n"], d["n"])
            row["per instruction"] = d["load wavefronts per instruction"]
            row["load bank conflicts"] = d.get("load bank conflicts")
            row["store bank conflicts"] = d.get("store bank conflicts")
            row["counters of"] = f"{get(d['kernel']).file[:2]} {d['label']} ({chapter})"
        out.append(row)
    return out


def work_table(configs) -> Table:
    cols = ["kernel", "LDS.128 per k", "FFMA per k", "chunk model", "quarter-warp model", "measured",
            "per instruction", "load bank conflicts", "counters of"]
    return Table(work(configs), cols, caption="Shared-load wavefronts per 1000 warp FFMA: two bank models and "
                                              "Nsight Compute ('per instruction': measured wavefronts per LDS.128)")


def work_figure(configs) -> go.Figure:
    """Bars: shared-load wavefronts per 1000 FFMA, per config: the two models and the counters."""
    rows = work(configs)
    names = [r["kernel"] for r in rows]
    fig = go.Figure()
    for i, (key, name) in enumerate((("chunk model", "model: one 16-byte chunk per 4 banks, broadcasts free"),
                                     ("quarter-warp model", "model: 8 lanes per wavefront (chapter 8)"),
                                     ("measured", "Nsight Compute"))):
        vals = [r[key] for r in rows]
        fig.add_trace(go.Bar(y=names, x=vals, orientation="h", name=name,
                             marker_color=[style.PALETTE[7], style.PALETTE[9], style.PALETTE[0]][i],
                             text=[f"{v:.0f}" if v is not None else "not profiled" for v in vals],
                             textposition="outside", cliponaxis=False,
                             hovertext=[f"{r['kernel']}: {r['LDS.128 per k']} LDS.128 and {r['FFMA per k']} FFMA per "
                                        f"warp and k step" + (f"<br>counters of {r['counters of']}"
                                                               if r["counters of"] else "") for r in rows],
                             hoverinfo="text"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    top = max(v for r in rows for v in (r["chunk model"], r["quarter-warp model"], r["measured"]) if v is not None)
    fig.update_xaxes(range=[0, top * 1.3])
    return finish(fig, "Shared-memory work per FFMA", "wavefronts per 1000 FFMA", None,
                  "shared-load wavefronts per 1000 warp-level FFMA; " + counters_source(),
                        height=220 + 90 * len(names))


def counters_source() -> str:
    """Where the counters come from: the two chapters' Nsight Compute records, each named where they differ."""
    srcs = {chapter: source_of(data) for chapter, data in (("chapter 8", "bank_conflicts_ncu"),
                                                            ("chapter 10", "warptiling_ncu")) if source_of(data)}
    if not srcs:
        return "counters not recorded"
    if len(set(srcs.values())) == 1:
        return "counters " + next(iter(srcs.values()))
    return "counters of " + "; of ".join(f"{chapter} {src}" for chapter, src in srcs.items())


def work_text(configs) -> Text:
    """What the counters say about the shared-memory work per FFMA of the last profiled config
    (this chapter's) against the first (the previous step's), and against the two models."""
    rows = work(configs)
    prof = [r for r in rows if r["measured"] is not None]
    if len(prof) < 2:
        missing = [r["kernel"] for r in rows if r["measured"] is None]
        return Text(f"Nsight Compute counters are not recorded here for: {', '.join(missing)} (data sources "
                    "`warptiling_ncu` and `bank_conflicts_ncu`); the models above are all this page can show.")
    b, a = prof[0], prof[-1]          # the first profiled config (the previous step), the last (this one)
    ratio_m = a["measured"] / b["measured"]
    ratio_c, ratio_q = a["chunk model"] / b["chunk model"], a["quarter-warp model"] / b["quarter-warp model"]
    per_load = a["per instruction"] / b["per instruction"]
    per_ffma = (a["LDS.128 per k"] / a["FFMA per k"]) / (b["LDS.128 per k"] / b["FFMA per k"])
    # nearer on a log scale: the models differ by factors
    near = lambda m, c, q: "chunk" if abs(math.log(m / c)) < abs(math.log(m / q)) else "quarter-warp"  # noqa: E731
    closer = lambda r: near(r["measured"], r["chunk model"], r["quarter-warp model"])  # noqa: E731
    lines = [f"**{r['kernel']}**: {r['measured']:.0f} wavefronts per 1000 FFMA measured ({r['per instruction']:.3g} "
             f"per LDS.128), between the models' {r['chunk model']:.0f} (chunk) and {r['quarter-warp model']:.0f} "
             f"(quarter-warp), nearer the {closer(r)} model" if min(r["chunk model"], r["quarter-warp model"])
             <= r["measured"] <= max(r["chunk model"], r["quarter-warp model"]) else
             f"**{r['kernel']}**: {r['measured']:.0f} wavefronts per 1000 FFMA measured ({r['per instruction']:.3g} "
             f"per LDS.128), closer to the {closer(r)} model ({r['chunk model']:.0f} chunk, "
             f"{r['quarter-warp model']:.0f} quarter-warp)" for r in prof]
    return Text("- " + ";\n- ".join(lines) + ".\n\n"
                f"Measured, {a['kernel']} needs **{ratio_m:.2f}x** the shared-memory wavefronts per FFMA of "
                f"{b['kernel']} ({pct(a['measured'], b['measured']):+.0f}%); the chunk model predicted "
                f"{ratio_c:.2f}x, the quarter-warp model {ratio_q:.2f}x, nearer the {near(ratio_m, ratio_c, ratio_q)} "
                f"model's. Per `LDS.128` the measured count went from {b['per instruction']:.3g} to "
                f"{a['per instruction']:.3g} ({per_load:.2f}x), and the `LDS.128` per FFMA {per_ffma:.2f}x: "
                + ("most of the saving comes from issuing fewer loads per FFMA, not from fewer wavefronts per load."
                   if abs(math.log(per_ffma)) > abs(math.log(per_load)) else
                   "most of the saving comes from fewer wavefronts per load."))


def conflicts_text(configs) -> Text:
    """Whether the profiled warp-tiled configs are conflict-free, by Nsight Compute's own count."""
    rows = [r for r in work(configs) if r["load bank conflicts"] is not None]
    if not rows:
        return Text("No Nsight Compute counters of these kernels in the recorded data: whether their shared-memory "
                    "accesses are free of conflicts is the model's claim only.")
    parts = []
    for r in rows:
        ld, st = r["load bank conflicts"], r["store bank conflicts"]
        parts.append(f"{r['kernel']}: {ld:,} load and {st:,} store wavefronts counted as bank conflicts"
                     + (" (conflict-free reads)" if ld == 0 else ""))
    return Text("Nsight Compute, " + "; ".join(parts) + ".")


def best_text(rs, kernel: str = KERNEL) -> Text:
    """The fastest recorded config at the size with the most configs, and the spread of the rest."""

    n = largest_square(rs.rows, kernel)
    sel = sorted((r for r in rs.rows if r["kernel"] == kernel and r["M"] == r["N"] == r["K"] == n and r["ok"]),
                 key=lambda r: -r["tflops"])
    spec = get(kernel)
    best, worst = sel[0], sel[-1]
    eight = [r for r in sel if r["params"]["TM"] * r["params"]["TN"] <= 64]
    sixteen = [r for r in sel if r["params"]["TM"] * r["params"]["TN"] > 64]
    tail = ""
    if eight and sixteen:
        tail = (f" The {len(sixteen)} configs with more than 64 results per thread run "
                f"{min(r['tflops'] for r in sixteen):.1f}-{max(r['tflops'] for r in sixteen):.1f} TFLOP/s, the "
                f"{len(eight)} with 64 or fewer {min(r['tflops'] for r in eight):.1f}-"
                f"{max(r['tflops'] for r in eight):.1f}.")
    return Text(f"At n = {n}, {len(sel)} configs: the fastest is **{spec.label(best['params'])}**, "
                f"{best['tflops']:.1f} TFLOP/s ({100 * best['tflops'] / best['cublas_tflops']:.0f}% of cuBLAS), the "
                f"slowest {spec.label(worst['params'])}, {worst['tflops']:.1f}." + tail)


def level_text(prev: tuple, this: tuple, device=None) -> Text:
    """Where the warp-tiled kernel is level with the previous step (within the main line's
    tie, :data:`helpers.measure.mainline.TIE`), why: more FFMA per shared-memory read, but
    fewer warps per SM (registers, from the offline compile). Empty where it is not level."""
    from ..measure import mainline
    from ..models import occupancy
    (p, _), (t, _) = prev, this
    ratio = t["tflops"] / p["tflops"]
    if abs(ratio - 1) > mainline.TIE:
        return Text("")

    def per_read(r):   # FFMA per LDS.128 at one k: TM x TN results over TM/4 + TN/4 float4 reads
        tm, tn = r["params"].get("TM", 8), r["params"].get("TN", 8)
        return tm * tn / (tm // 4 + tn // 4)

    (rp, op), (rt, ot) = (occupancy.of_config(r["kernel"], r["params"], device) for r in (p, t))
    return Text(f"That is level with the previous step (within {100 * mainline.TIE:.0f}%). The warp tile does what it promises: each `LDS.128` feeds "
                f"{per_read(t):.0f} FFMA instead of {per_read(p):.0f}. But its thread tile takes {rt.registers} "
                f"registers a thread against {rp.registers}, so an SM holds {ot.active_warps} warps instead of {op.active_warps} "
                f"to hide the latency of the loads, and on this GPU the two nearly cancel. The next chapter starts "
                f"from here and searches the kernel's own parameters.")
