"""Figures of occupancy and of why warps wait.

* :func:`explorer`: resident warps per SM against registers per thread, one block size at a
  time, with real kernel configs marked on their curve;
* :func:`by_config`: occupancy and measured TFLOP/s of a kernel's configs side by side;
* :func:`stall_profile`: the warp-stall reasons Nsight Compute recorded for chapters' kernels.

Every figure takes a :class:`helpers.hardware.Device` (a ResultSet's ``.device``): the
limits are that device's. Taught in the chapters "Shared-memory tiling" and "1D thread tiles".
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..hardware import Device, occupancy
from ..measure import datafile
from ..measure.ncu import stalls as stall_rows
from ..measure.results import results
from ..models.occupancy import of_config, register_curve
from ..runtime.specs import get
from ..tables import Text
from . import style
from .results import hover

STALL_WORDS = {
    "short_scoreboard": "short scoreboard<br>(shared memory)",
    "long_scoreboard": "long scoreboard<br>(global memory)",
    "mio_throttle": "MIO throttle<br>(shared-memory queue)",
    "lg_throttle": "LG throttle<br>(global-memory queue)",
    "barrier": "barrier<br>(__syncthreads)",
    "wait": "wait<br>(fixed latency)",
    "math_pipe_throttle": "math pipe throttle<br>(FMA units busy)",
    "not_selected": "not selected<br>(another warp issued)",
    "selected": "selected",
    "no_instruction": "no instruction<br>(fetch, instruction cache)",
    "dispatch_stall": "dispatch stall<br>(the dispatcher held it back)",
    "branch_resolving": "branch resolving",
    "drain": "drain",
    "membar": "memory barrier",
    "sleeping": "sleeping",
    "tex_throttle": "texture throttle",
    "imc_miss": "constant cache miss",
    "misc": "other",
}


def explorer(device: Device, block_sizes=(64, 256, 1024), marks: dict | None = None,
             smem_per_block: int = 0) -> go.Figure:
    """Resident warps per SM against registers per thread, a menu over block sizes.

    ``marks`` maps a label to (threads, registers, shared bytes): real configs drawn on the
    curve of their block size, which is then drawn with their shared memory.
    """
    regs = list(range(16, device.max_registers_per_thread + 1))
    marks = marks or {}
    steps = []
    for t in block_sizes:
        smem = next((m[2] for m in marks.values() if m[0] == t), smem_per_block)
        occ = register_curve(t, smem, device, regs)
        traces = [go.Scatter(x=regs, y=[o.active_warps for o in occ], mode="lines", line_shape="hv",
                             name=f"{t} threads, {smem:,} B shared per block", line=dict(color=style.PALETTE[0]),
                             hovertext=[f"{r} registers: {o}" for r, o in zip(regs, occ)], hoverinfo="text")]
        for i, (label, (mt, mr, ms)) in enumerate(marks.items()):
            if mt == t:
                o = occupancy(mt, mr, ms, device)
                traces.append(go.Scatter(x=[mr], y=[o.active_warps], mode="markers", name=f"{label}: {mr} registers",
                                         marker=dict(size=13, color=style.PALETTE[(i + 1) % len(style.PALETTE)],
                                                     line=dict(color="#000", width=1)),
                                         hovertext=[f"{label}: {o}"], hoverinfo="text"))
        steps.append((f"{t} threads per block", traces))
    fig = style.steps_figure(steps, active=len(steps) - 1)
    fig.update_yaxes(range=[0, device.max_warps_per_sm * 1.1])
    return style.finish(fig, "Resident warps per SM against registers per thread", "registers per thread",
                        f"resident warps per SM (of {device.max_warps_per_sm})",
                        f"occupancy rules of {device.label}<br>(compute capability {device.cc})", height=460)


def by_config(kernel: str, rows: list[dict], device: Device, source: str, vary: str, title: str = "") -> go.Figure:
    """Occupancy (bars, from the offline compile) and measured TFLOP/s (line) of a kernel's configs."""
    spec = get(kernel)
    rows = sorted(rows, key=lambda r: r["params"][vary])
    labels, occs, notes = [], [], []
    for r in rows:
        res, o = of_config(spec, r["params"], device)
        labels.append(spec.label(r["params"]))
        occs.append(o)
        notes.append(f"{res.registers} registers, {res.smem:,} B shared, {o.threads_per_block} threads<br>{o}")
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[100 * o.fraction for o in occs], name="occupancy (% of the SM's warps)",
                         marker_color="#c6dbef", hovertext=notes, hoverinfo="text",
                         # level, in the middle of the bar: at its foot the TFLOP/s markers and labels sit on it,
                         # and a narrow bar would turn one line on its side
                         text=[f"{o.active_warps}<br>warps" for o in occs], textposition="inside",
                         insidetextanchor="middle", textangle=0))
    fig.add_trace(go.Scatter(x=labels, y=[r["tflops"] for r in rows], name="measured TFLOP/s", yaxis="y2",
                             mode="lines+markers+text", line=dict(color=style.colour(kernel)), marker=dict(size=10),
                             text=[f"{r['tflops']:.1f}" for r in rows], textposition="top center",
                             hovertext=[hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=labels, y=[r["cublas_tflops"] for r in rows], name="cuBLAS, same run", yaxis="y2",
                             mode="lines", line=dict(color=style.CUBLAS, dash="dash")))
    top = max(r["cublas_tflops"] for r in rows) * 1.15
    fig.update_layout(yaxis=dict(range=[0, 115]),
                      yaxis2=dict(title="TFLOP/s", overlaying="y", side="right", range=[0, top], showgrid=False,
                                  automargin=True))
    style.finish(fig, title, vary, None, f"{source}<br>occupancy: offline {device.arch} compile", height=460)
    fig.update_layout(yaxis_title="occupancy (%)", yaxis2_title="TFLOP/s")
    fig.update_xaxes(type="category")
    return fig


def stall_profile(stalls: list[dict], kernels: list[str], source: str, top: int = 6) -> go.Figure:
    """Cycles a warp waits per instruction it issues, by reason, for the profiled kernels (grouped
    bars): Nsight Compute's smsp__average_warps_issue_stalled_*_per_issue_active, warps stalled per
    issue cycle, which is the same number.

    ``stalls``: :func:`helpers.measure.ncu.stalls` of the recorded rows. The reasons shown
    are the ``top`` largest over the kernels asked for; the rest are summed as "other".
    """
    chosen = [d for k in kernels for d in stalls if d["kernel"] == k]
    reasons = sorted({k for d in chosen for k in d if k in STALL_WORDS and k != "selected"},
                     key=lambda k: -max(d.get(k) or 0 for d in chosen))
    shown, rest = reasons[:top], reasons[top:]
    fig = go.Figure()
    for d in chosen:
        ys = [d.get(k) or 0 for k in shown] + ([sum(d.get(k) or 0 for k in rest)] if rest else [])
        names = [STALL_WORDS[k] for k in shown] + (["everything else"] if rest else [])
        fig.add_trace(go.Bar(y=names, x=ys, orientation="h", name=f"{get(d['kernel']).title}, {d['label']}",
                             marker_color=style.colour(d["kernel"]), text=[f"{v:.2f}" for v in ys],
                             textposition="outside", cliponaxis=False))
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    # room for each value after its bar on a phone, whatever the reasons' labels leave of the width
    left = max(style.text_px(line) for t in fig.data for y in t.y for line in y.split("<br>"))
    fig.update_xaxes(range=[0, max(1.22 * max(max(t.x) for t in fig.data),
                                   style.label_room([x for t in fig.data for x in t.x],
                                                    [s for t in fig.data for s in t.text], left_px=left))])
    n = len(shown) + bool(rest)
    return style.finish(fig, "Why warps wait", "cycles per issued instruction", None, source,
                        height=220 + 34 * n * max(len(chosen), 1))


def _plain(reason: str) -> str:
    return STALL_WORDS[reason].replace("<br>", " ")


def stall_text(stalls: list[dict], kernel: str) -> Text:
    """The recorded stall profile of one kernel in words: how often a scheduler issued, and the
    reasons its warps waited most."""
    d = next((x for x in stalls if x["kernel"] == kernel), None)
    if d is None:
        return Text(f"The recorded warp-stall profile has no row for {get(kernel).title}.")
    ranked = sorted((k for k in d if k in STALL_WORDS and k != "selected" and d.get(k)), key=lambda k: -d[k])
    total = sum(d[k] for k in ranked)
    lead = ", then ".join(f"{_plain(k)} at {d[k]:.2f} cycles ({100 * d[k] / total:.0f}%)" for k in ranked[:3])
    issue = (f"A scheduler issued an instruction in {d['issue_active']:.0f}% of its active cycles. "
             if d.get("issue_active") is not None else "")
    return Text(f"{get(kernel).title} ({d['label']}): {issue}Between two of its instructions a warp waited "
                f"{total:.1f} cycles on average; the largest reasons are {lead}.")


def show_stalls(kernels: list[str], title_kernel: str | None = None) -> Text:
    """Show the recorded warp-stall profile of ``kernels`` (when the recorded data holds one) and
    return what it says about ``title_kernel`` (default: the last of ``kernels``)."""
    try:
        rs = results("stall_profile")
    except datafile.DataError:
        return Text("No warp-stall profile is recorded for this device yet: `python -m helpers record --chapter "
                    "stall_profile` records one on a GPU with Nsight Compute.")
    data = stall_rows(rs.rows)
    present = [k for k in kernels if any(d["kernel"] == k for d in data)]
    if not present:
        return Text("The recorded warp-stall profile holds none of these kernels.")
    style.show(stall_profile(data, present, f"{rs.source}<br>Nsight Compute, one launch at n = {rs.rows[0]['M']}"))
    return stall_text(data, title_kernel or present[-1])
