"""Figures, tables and computed sentences of the chapter "The final kernel" (book/12_final.md).

Everything here reads the rows it is given (live or recorded) and the device they were
measured on, so the page stays true when the data or the kernel's dispatcher change:
which shapes fall short, by how much, and what the waves say about them are computed,
never written down.
"""
from __future__ import annotations

import json
import math
import statistics

import plotly.graph_objects as go

from .. import hardware
from ..hardware import SMEM_BANKS, WARP_SIZE, Device
from ..measure import bench, datafile, mainline, ncu
from ..measure import final_features as ladder_plan
from ..measure.results import ResultSet, recorded, results, step
from ..models import banks, waves
from ..models.roofline import intensity
from ..runtime.spec import ConfigError
from ..runtime.specs import final as final_spec
from ..runtime.specs import get
from ..shapes import SUITE, flops
from ..shapes import label as shape_label
from ..tables import Table, Text
from . import results as result_figures
from . import style
from ..runtime.check import check

SPEC = final_spec.SPEC

FINAL = final_spec.SPEC.name


def _pct(r: dict) -> float:
    return 100 * r["tflops"] / r["cublas_tflops"]


def _shape(r: dict) -> tuple:
    return (r["M"], r["N"], r["K"])


def empty_figure(title: str, why: str, source: str = "") -> go.Figure:
    """A figure that says why it has nothing to show (e.g. a quick live run without those rows)."""
    fig = go.Figure()
    fig.add_annotation(text=why, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=style.FONT))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return style.finish(fig, title, source=source, height=260, legend=False)


# ------------------------------------------------------------------ the pipeline
def pipeline_figure(stages_list=(2, 3, 4, 5), tiles: int = 8) -> go.Figure:
    """Which shared-memory stage holds which k-tile, iteration by iteration, per pipeline depth.

    Tile t lives in stage t % S; its copies are issued at the start of iteration t - (S - 1)
    (the prologue issues tiles 0 .. S - 2 before iteration 0) and it is multiplied in
    iteration t. A bar is one tile's life in its stage: copies in flight (light), FFMA (dark); the
    labels on two lines, small enough for an iteration's width on a phone.
    """
    steps = []
    for S in stages_list:
        traces = []
        for t in range(tiles):
            issue = max(0, t - (S - 1))
            colour = style.PALETTE[t % len(style.PALETTE)]
            if t > issue:
                traces.append(go.Bar(y=[t % S], x=[t - issue], base=[issue], orientation="h", showlegend=False,
                                     width=0.8, marker=dict(color=colour, opacity=0.35), text=[f"copy<br>{t}"],
                                     textposition="inside", insidetextanchor="middle", textangle=0,
                                     textfont=dict(color="#222", size=style.FONT - 2),     # dark: the fill is pale at this opacity
                                     hovertext=f"tile {t}: copies in flight from iteration {issue}", hoverinfo="text"))
            traces.append(go.Bar(y=[t % S], x=[1], base=[t], orientation="h", showlegend=False, width=0.8,
                                 marker=dict(color=colour), text=[f"FFMA<br>{t}"], textposition="inside",
                                 insidetextanchor="middle", textangle=0, textfont=dict(color="white", size=style.FONT - 2),
                                 hovertext=f"tile {t}: multiplied in iteration {t}", hoverinfo="text"))
        steps.append((f"{S} stages", traces, f"{S} stages: up to {style.plural(S - 1, 'tile')} in flight during the FFMA"))
    active = min(1, len(steps) - 1)
    fig = style.steps_figure(steps, active=active)
    fig.update_layout(barmode="overlay")
    if fig.layout.updatemenus:
        for button, S in zip(fig.layout.updatemenus[0].buttons, stages_list):
            button.args = [button.args[0], dict(button.args[1], **{"yaxis.range": [S - 0.5, -0.5]})]
    most = max(stages_list)
    fig.update_yaxes(range=[stages_list[active] - 0.5, -0.5], tickvals=list(range(most)),
                     ticktext=[f"stage {s}" for s in range(most)])
    fig.update_xaxes(dtick=1)
    return style.finish(fig, fig.layout.title.text, "main-loop iteration (one k-tile each)", None,
                        "model: the schedule of kernels/12_final.cu", height=420, legend=False)


# ------------------------------------------------------- the transposed A copies
def transpose_banks(pads=(0, 1, 2, 4), BM: int | None = None) -> Table:
    """The shared-memory store of one warp's 4-byte cp.async copies of A, per row padding.

    Lane l copies k = l % 8 of row m = l // 8 and writes As[k][m] at word k * (BM + pad) + m.
    The bank model (:mod:`helpers.models.banks`) counts the wavefronts; rows stay 16-byte
    aligned (as LDS.128 needs) when the pitch is a multiple of 4 floats.
    """
    BM = BM or SPEC.defaults()["BM"]
    rows = []
    for pad in pads:
        pitch = BM + pad
        words = [[(lane % 8) * pitch + lane // 8] for lane in range(WARP_SIZE)]
        wf = banks.wavefronts(words)
        distinct = len({w[0] % SMEM_BANKS for w in words})
        rows.append({"padding (floats)": pad, "row pitch (floats)": pitch, "banks hit by 32 lanes": distinct,
                     "wavefronts": wf, "verdict": "conflict-free" if wf == 1 else f"{wf}-way conflict",
                     "rows 16-byte aligned": pitch % 4 == 0})
    return Table(rows, caption=f"One warp's 4-byte copies of A into the transposed tile, BM = {BM} (bank model)")


def copy_mappings(BM: int | None = None) -> Table:
    """One warp's 4-byte copies of A at pitch BM + 4, three ways: 8 lanes to a row of A (4 rows x
    8 k), 16 to a row (2 rows x 16 k), and 16 to a row with the k-rows 8..15 of every 16 swizzled
    (column m ^ 2: kernels/12_final.cu, TileCopy::swizzle). Rows of A read and the bank model's
    wavefronts for the stores."""
    BM = BM or SPEC.defaults()["BM"]
    pitch = BM + final_spec.PAD
    rows = []
    for name, per_row, swizzled in (("8 lanes to a row", 8, False), ("16 lanes to a row", 16, False),
                                    ("16 lanes to a row, swizzled", 16, True)):
        ks = [lane % per_row for lane in range(WARP_SIZE)]
        ms = [lane // per_row for lane in range(WARP_SIZE)]
        words = [[k * pitch + (m ^ ((k & 8) >> 2) if swizzled else m)] for k, m in zip(ks, ms)]
        wf = banks.wavefronts(words)
        rows.append({"copies": name, "rows of A read": len(set(ms)), "floats per row": per_row,
                     "banks hit by 32 lanes": len({w[0] % SMEM_BANKS for w in words}),
                     "store wavefronts (bank model)": wf})
    return Table(rows, caption=f"One warp's 4-byte copies of A, row pitch BM + 4 = {pitch} floats (bank model)")


def smem_counters() -> Table | Text:
    """Shared-memory wavefronts per instruction that Nsight Compute measured for the warp-tiled
    kernels (data source ``warptiling_ncu``), next to the bank model's LDS.128 prediction."""
    try:
        rs = results("warptiling_ncu")
    except (datafile.DataError, KeyError) as exc:
        return Text(f"*No Nsight Compute counters recorded for the warp-tiled kernels yet* ({exc}).")
    rows = []
    for d in ncu.pivot(rs.rows):
        spec = get(d["kernel"])
        m = banks.fragment_wavefronts(spec, d["params"])
        per_lds = m["wavefronts"] / m["lds_per_thread"] if m["lds_per_thread"] else None
        rows.append({"kernel": d["kernel"], "config": spec.label(d["params"]),
                     "load instructions": d.get("load instructions"),
                     "load wavefronts per instruction (measured)": d.get("load wavefronts per instruction"),
                     "load bank conflicts (measured)": d.get("load bank conflicts"),
                     "LDS.128 wavefronts per instruction (model)": per_lds,
                     "store instructions": d.get("store instructions")})
    sizes = sorted({r["M"] for r in rs.rows if r.get("M")}) or [ncu.SIZE]
    return Table(rows, caption=f"Shared-memory counters at n = {', '.join(map(str, sizes))}, {rs.source}")


def hot_loop_table(kernels=("warptiling", "final"), device: Device | None = None) -> Table:
    """The instruction mix of each kernel's main loop for interior tiles (offline SASS of the
    defaults, or the nearest config the device allows)."""
    device = device or hardware.default()
    rows = []
    for k in kernels:
        params = get(k).fitting(None, device)
        c = waves.hot_loop_counts(k, params, device)
        # LDG, LDG.E...: loads to registers (not LDGSTS, the copies, nor LDGDEPBAR, their commit)
        loads = sum(v for op, v in c["ops"].items() if op.split(".")[0] == "LDG")
        stores = sum(v for op, v in c["ops"].items() if op.startswith("STS"))
        copies = sum(v for op, v in c["ops"].items() if op.startswith("LDGSTS"))
        rows.append({"kernel": k, "config": get(k).label(params), "FFMA": c["ffma"],
                     "LDS.128": c["lds128"], "LDG (to registers)": loads, "STS (registers to shared)": stores,
                     "LDGSTS (cp.async)": copies,
                     "other": c["total"] - c["ffma"] - c["lds128"] - loads - stores - copies,
                     "FFMA share": f"{100 * c['ffma_share']:.1f}%"})
    return Table(rows, caption=f"Main loop per k-tile, one thread's instructions (SASS for {device.arch})")


# ------------------------------------------------------------------ rasterisation
def first_wave_table(device: Device, sizes=(4096, 8192), groups=(0, 8), params: dict | None = None) -> Table:
    """Distinct A and B panels the first wave of blocks reads, row-by-row order against groups."""
    p0 = dict(params or final_spec.choose_config(max(sizes), max(sizes), max(sizes), device))
    per_sm, _ = waves.resident_blocks(p0, device)
    slots = device.sm_count * per_sm
    rows = []
    for n in sizes:
        for g in groups:
            p = dict(p0, GROUP=g)
            order = waves.block_order(p, math.ceil(n / p["BN"]), math.ceil(n / p["BM"]))[:slots]
            mib = waves.first_wave_bytes(p, n, n, n, slots) / 2**20
            rows.append({"n": n, "order": f"groups of {g} block-rows" if g else "row by row",
                         "panels of A": len({r for r, _ in order}), "panels of B": len({c for _, c in order}),
                         "MiB of A and B per wave": round(mib), "L2 (MiB)": round(device.l2_bytes / 2**20)})
    return Table(rows, caption=f"First wave of {slots} blocks of {p0['BM']} × {p0['BN']} (the block tile chosen at "
                               f"n = {max(sizes)}), each reading whole panels of A and B, on {device.label} (model)")


def knob_rows(rs: ResultSet) -> list[dict]:
    """The recorded final-kernel rows at square n >= 4096 that are the choice or differ from it
    in one knob (the chapter's sweep also runs the defaults there)."""
    out = []
    for r in rs.rows:
        if r["kernel"] == FINAL and r["M"] == r["N"] == r["K"] and r["M"] >= 4096:
            choice = SPEC.config_for(r["M"], r["N"], r["K"], rs.device)
            if sum(choice.get(k) != v for k, v in SPEC.resolve(r["params"]).items()) <= 1:
                out.append(r)
    return out


def knob_label(params: dict, choice: dict) -> str:
    """A config by what differs from the choice: "the choice", "STAGES=3", "GROUP=0"..."""
    diff = [f"{k}={v}" for k, v in params.items() if choice.get(k) != v]
    return ", ".join(diff) if diff else "the choice"


def whisker_range(rows: list[dict], margin: float = 0.12) -> list[float]:
    """An x range of TFLOP/s that holds every row's 20/80 whisker (:func:`results.band`), with
    ``margin`` of the span to spare on each side, so that no whisker or marker touches the edge."""
    b = result_figures.band(rows)
    lo = min(r["tflops"] - d for r, d in zip(rows, b["arrayminus"]))
    hi = max(r["tflops"] + u for r, u in zip(rows, b["array"]))
    pad = margin * max(hi - lo, 0.01 * hi, 1e-9)
    return [lo - pad, hi + pad]


def knobs_figure(rs: ResultSet) -> go.Figure:
    """The recorded configs around the choice at each large square size: TFLOP/s with the
    20/80 band of each (a dot, not a bar: the differences are small), the menu picks the size;
    each size's axis reaches a little past its longest whiskers."""
    rows = knob_rows(rs)
    if not any(sum(q["M"] == r["M"] for q in rows) > 1 for r in rows):
        return empty_figure("Around the chosen config", "no run of the knobs at n >= 4096 in these rows", rs.source)
    steps, ranges = [], []
    for n in sorted({r["M"] for r in rows}):
        choice = SPEC.config_for(n, n, n, rs.device)
        sel = sorted((r for r in rows if r["M"] == n), key=lambda r: -r["tflops"])
        if len(sel) < 2:                # the choice alone: nothing around it to compare
            continue
        labels = [knob_label(r["params"], choice) for r in sel]
        ranges.append(whisker_range(sel))
        steps.append((f"n = {n}", [
            go.Scatter(x=[r["tflops"] for r in sel], y=labels, mode="markers+text", name="final, one knob changed",
                       marker=dict(size=12, color=style.colour("final"), line=dict(width=1, color="#333")),
                       error_x=result_figures.band(sel) | {"width": 6, "thickness": 2},
                       text=[f"{r['tflops']:.2f}" for r in sel], textposition="bottom center",
                       hovertext=[result_figures.hover(r) for r in sel], hoverinfo="text")],
            f"Around the choice at n = {n}"))
    fig = style.steps_figure(steps, active=0)
    for control, rng in zip(style.controls(fig), ranges):      # each size's menu entry (or step) sets its own range
        control.args = [control.args[0], dict(control.args[1] if len(control.args) > 1 else {}, **{"xaxis.range": rng})]
    fig.update_xaxes(range=ranges[0])
    fig.update_yaxes(autorange="reversed")
    fig = style.finish(fig, fig.layout.title.text, "TFLOP/s (median, 20/80 band)", None, rs.source,
                       height=420, legend=False)
    return fig


def knobs_text(rs: ResultSet) -> Text:
    """For each square size, the spread of the configs around the choice and whether the
    fastest and slowest configs' 20/80 bands overlap."""
    parts = []
    for n in sorted({r["M"] for r in knob_rows(rs)}):
        sel = sorted((r for r in knob_rows(rs) if r["M"] == n), key=lambda r: -r["tflops"])
        if len(sel) < 2:
            continue
        best, worst = sel[0], sel[-1]
        spread = 100 * (best["tflops"] / worst["tflops"] - 1)
        apart = best["ms_p80"] < worst["ms_p20"]
        parts.append(f"at n = {n} the {len(sel)} configs span {spread:.1f}%, from {SPEC.label(best['params'])} "
                     f"({best['tflops']:.1f} TFLOP/s) to {SPEC.label(worst['params'])} ({worst['tflops']:.1f}); "
                     + ("the fastest's and the slowest's 20/80 bands do not overlap" if apart
                        else "the fastest's and the slowest's 20/80 bands overlap: a tie"))
    if not parts:
        return Text("No knob was varied around the choice in these rows.")
    return Text("Measured: " + "; ".join(parts) + ".")


def grouping_text(rs: ResultSet) -> Text:
    """The chosen config against the same without grouping, where the run timed both: whether the
    measurement keeps the groups that the first-wave model charges more bytes."""
    parts, rows = [], knob_rows(rs)
    for n in sorted({r["M"] for r in rows}):
        choice = SPEC.config_for(n, n, n, rs.device)
        at = {knob_label(SPEC.resolve(r["params"]), choice): r for r in rows if r["M"] == n}
        grouped, flat = at.get("the choice"), at.get("GROUP=0")
        if grouped is None or flat is None or not choice["GROUP"]:
            continue
        gain = 100 * (grouped["tflops"] / flat["tflops"] - 1)
        apart = grouped["ms_p80"] < flat["ms_p20"] or flat["ms_p80"] < grouped["ms_p20"]
        parts.append(f"at n = {n} the chosen config with groups of {choice['GROUP']} ran {abs(gain):.1f}% "
                     + ("faster" if gain > 0 else "slower") + " than without them"
                     + ("" if apart else " (their 20/80 bands overlap: a tie)")
                     + (", which is why the default keeps them" if gain > 0 and apart else ""))
    if not parts:
        return Text("No run here timed the choice without grouping.")
    return Text("Grouping in the measurement: " + "; ".join(parts) + ". The model above counts only the panels "
                "of the first wave; what L2 still holds from the waves before, and the order in which a wave's "
                "blocks really start, are not in it, and only the measurement has them.")


def first_wave_text(device: Device, sizes=(4096, 8192), params: dict | None = None) -> Text:
    """What grouping does to the bytes one wave reads, per size, from :func:`first_wave_table`."""
    rows = first_wave_table(device, sizes, (0, 8), params).rows
    parts = []
    for n in sizes:
        flat, grouped = (next(r for r in rows if r["n"] == n and r["order"].startswith(w)) for w in ("row", "groups"))
        ratio = grouped["MiB of A and B per wave"] / max(flat["MiB of A and B per wave"], 1)
        parts.append(f"at n = {n} groups of 8 change a wave's panels from {flat['MiB of A and B per wave']} to "
                     f"{grouped['MiB of A and B per wave']} MiB ({ratio:.2f} times)")
    return Text("In this model, " + "; ".join(parts) + f", against an L2 of {device.l2_bytes / 2**20:.0f} MiB.")


def choice_note(rows: list[dict], device: Device) -> Text | None:
    """Rows recorded with a config the dispatcher no longer picks on their device (None, which
    shows nothing, when there are none)."""
    stale = [r for r in rows if not is_current_choice(r, device)]
    if not stale:
        return None
    return Text(f"*{len(stale)} of these rows ({', '.join(shape_label(_shape(r)) for r in stale)}) were recorded "
                f"with a config that choose_config no longer picks on the {device.label}; their numbers are that "
                "config's, and the tables below use the config each row records.*")


# ------------------------------------------------------------- choosing a config
def choice_table(shapes, device: Device) -> Table:
    """What the dispatcher picks for each shape on ``device`` and how that grid fills the GPU."""
    rows = []
    for M, N, K in shapes:
        w = waves.waves_of(SPEC.config_for(M, N, K, device), M, N, K, device)
        rows.append({"shape": w["shape"], "config": SPEC.label(w["config"]), "tiles": w["tiles"],
                     "split-K": w["split"], "blocks": w["blocks"], "blocks per SM": w["per_sm"],
                     "waves": w["waves"], "last wave full": f"{100 * w['last_wave']:.0f}%",
                     "slots busy overall": f"{100 * w['utilisation']:.0f}%"})
    return Table(rows, caption=f"choose_config(M, N, K, device) on {device.label}")


def model_table(M: int, N: int, K: int, device: Device, top: int = 8) -> Table:
    """The dispatcher's estimates for one shape, fastest first (``top`` rows and the choice)."""
    chosen = SPEC.config_for(M, N, K, device)
    est = sorted(waves.candidate_estimates(M, N, K, device, chosen), key=lambda e: e["ms"])
    keep = [e for e in est if e["considered"]][:top]
    keep += [e for e in est if e["chosen"] and e not in keep]
    rows = [{"config": SPEC.label(e["config"]), "efficiency": e["efficiency"], "waves": e["waves"],
             "slots busy": f"{100 * e['utilisation']:.0f}%", "model time (ms)": e["ms"],
             "": "chosen" if e["chosen"] else ""} for e in keep]
    return Table(rows, caption=f"The model at {M}x{N}x{K} on {device.label}: the fastest estimates")


# ------------------------------------------------------------------ the rows
def chosen_row(rs: ResultSet, shape, device: Device | None = None) -> dict | None:
    """The final kernel's row at ``shape`` with the config the dispatcher picks on the rows'
    device; if the rows were recorded with another choice, the fastest final row there."""
    device = device or rs.device
    want = SPEC.config_for(*shape, device)
    at = [r for r in rs.rows if r["kernel"] == FINAL and _shape(r) == tuple(shape)]
    exact = [r for r in at if r["params"] == want]
    pool = exact or at
    return max(pool, key=lambda r: r["tflops"]) if pool else None


def is_current_choice(r: dict, device: Device) -> bool:
    return r["params"] == SPEC.config_for(r["M"], r["N"], r["K"], device)


def suite_rows(rs: ResultSet, shapes=SUITE) -> list[dict]:
    """The final kernel's row at each shape of the suite (see :func:`chosen_row`)."""
    return [r for r in (chosen_row(rs, s) for s in shapes) if r is not None]


def square_row(rs: ResultSet, n: int) -> dict:
    """The final kernel's row at n x n x n: recorded, or measured now when a live run lacks n."""
    r = chosen_row(rs, (n, n, n))
    if r is not None:
        return r
    if rs.live:
        return step("final", n, SPEC.config_for(n, n, n, rs.device))[0]
    raise KeyError(f"no row for the final kernel at n={n} in {rs.source}")


def correctness(rs: ResultSet) -> Table:
    """Every final-kernel row with its relative error against cuBLAS (checked before timing)."""
    rows = sorted((r for r in rs.rows if r["kernel"] == FINAL), key=lambda r: (flops(*_shape(r)), _shape(r)))
    return rs.table(rows, columns=("shape", "config", "relative error", "correct"))


def square_figure(rs: ResultSet, sizes=(4096, 8192), previous: str = "warptiling") -> go.Figure:
    """The final kernel and the previous chapter's kernel at square sizes: bars labelled with
    TFLOP/s and % of cuBLAS, cuBLAS of each kernel's own run as a mark."""
    names, rows, sources = [], [], [rs.source]
    for n in sizes:
        for name in (previous, FINAL):
            try:
                if name == FINAL:
                    r = square_row(rs, n)
                else:
                    r, src = step(name, n, get(name).config_for(n, n, n, rs.device))
                    if src not in sources:
                        sources.append(src)
            except (KeyError, ConfigError):
                continue
            names.append(f"{name}, n = {n}")
            rows.append(r)
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=[r["tflops"] for r in rows], orientation="h", showlegend=False,
                         marker_color=[style.colour(r["kernel"]) for r in rows],
                         text=[f"{r['tflops']:.1f} ({_pct(r):.0f}%)" for r in rows], textposition="inside",
                         insidetextanchor="middle", textfont=dict(size=style.FONT),   # clear of the cuBLAS mark
                         hovertext=[result_figures.hover(r) for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(y=names, x=[r["cublas_tflops"] for r in rows], mode="markers",
                             name="cuBLAS, same run as the bar",
                             marker=dict(symbol="line-ns-open", size=24, color=style.CUBLAS, line=dict(width=3))))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=style.FONT))
    fig.update_xaxes(range=[0, max([r["cublas_tflops"] for r in rows] + [r["tflops"] for r in rows] + [1]) * 1.05])
    return style.finish(fig, f"Final against {previous} and cuBLAS", "TFLOP/s (bar label: % of cuBLAS)", None,
                        result_figures.join_sources(sources), height=200 + 60 * len(rows))


def splitk_text(M: int, N: int, K: int, device: Device) -> Text:
    """What split-K costs at one shape with the config the dispatcher picks: workspace and its traffic."""
    p = SPEC.config_for(M, N, K, device)
    if p["SPLITK"] == 1:
        return Text(f"At {M}x{N}x{K} the dispatcher picks `{SPEC.label(p)}` on the {device.label}: "
                    "no split, no workspace.")
    floats, counters = final_spec.workspace(p, M, N, K, device)
    floats -= sum(final_spec.packed_floats(p, M, N, K))
    moved = 2 * 4 * floats                       # every slot written once and read once
    operands = 4 * (M * K + K * N + M * N)
    us = moved / (device.bandwidth_gbs * 1e9) * 1e6
    held = (f"{p['SPLITK']} slabs of {M} x {N} floats, {floats * 4 / 2**20:.1f} MiB, and no counters: a second "
            "kernel adds the slabs" if p["REDUCE"] else
            f"{floats * 4 / 2**20:.1f} MiB of partial tiles and {counters} counters")
    return Text(f"At {M}x{N}x{K} the dispatcher picks `{SPEC.label(p)}` on the {device.label}: "
                f"{final_spec.tiles_of(p, M, N)} output tiles, each split {p['SPLITK']} ways. The workspace holds "
                f"{held}; writing and reading it once "
                f"moves {moved / 2**20:.0f} MiB, {moved / operands:.2f} times the operands and C, "
                f"about {us:.0f} µs at "
                f"the device's {device.bandwidth_gbs:,.0f} GB/s if none of it stayed in L2.")


def chosen_rows(rs: ResultSet) -> list[dict]:
    """The final kernel's row at every recorded shape where the run measured the dispatcher's
    current choice (shapes the run measured only with other configs are left out)."""
    shapes = sorted({_shape(r) for r in rs.rows if r["kernel"] == FINAL}, key=lambda s: (flops(*s), s))
    return [r for r in (chosen_row(rs, s) for s in shapes) if r is not None and is_current_choice(r, rs.device)]


CHECK_SHAPES = ((1, 1, 1), (67, 45, 33), (1000, 3000, 777), (8192, 128, 8192), (4097, 129, 1031))


def check_here(shapes=CHECK_SHAPES) -> Table | Text:
    """On a GPU: check the chosen config at awkward shapes against cuBLAS now. Without one: say so."""
    if not hardware.is_live():
        return Text("*No GPU here*: on a CUDA GPU this cell checks the config chosen for each of "
                    + ", ".join(f"{M}x{N}x{K}" for M, N, K in shapes) + " against cuBLAS on fresh random data.")

    device = hardware.current()
    rows = []
    for M, N, K in shapes:
        p = SPEC.config_for(M, N, K, device)
        c = check(SPEC, M, N, K, p)
        rows.append({"shape": f"{M}x{N}x{K}", "config": SPEC.label(p), "relative error": c.rel_err,
                     "tolerance": c.tol, "correct": c.ok})
    return Table(rows, caption=f"Checked now on {device.label}")


# ------------------------------------------------------------------ the suite
def geomean_pct(rows: list[dict]) -> float:
    """Geometric mean of the percentage of cuBLAS (same run) over rows."""
    return bench.geomean(_pct(r) for r in rows)


def outliers(rows: list[dict]) -> list[dict]:
    """Rows whose percentage of cuBLAS lies outside Tukey's fences (1.5 interquartile
    ranges beyond the quartiles) of the rows' own percentages; none with fewer than 4 rows."""
    if len(rows) < 4:
        return []
    q1, _, q3 = statistics.quantiles([_pct(r) for r in rows], n=4, method="inclusive")
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [r for r in rows if not lo <= _pct(r) <= hi]


def suite_summary(rows: list[dict]) -> dict:
    """Geometric mean of % of cuBLAS with and without outliers, median, range, shapes above 100%."""
    out = outliers(rows)
    rest = [r for r in rows if r not in out]
    pct = [_pct(r) for r in rows]
    return {"shapes": len(rows), "geomean": geomean_pct(rows) if rows else math.nan,
            "outliers": [shape_label(_shape(r)) for r in out],
            "outlier_pct": [_pct(r) for r in out],
            "geomean_without": geomean_pct(rest) if rest else math.nan, "without_count": len(rest),
            "median": statistics.median(pct) if pct else math.nan,
            "lowest": min(rows, key=_pct) if rows else None, "highest": max(rows, key=_pct) if rows else None,
            "above": [shape_label(_shape(r)) for r in rows if _pct(r) > 100]}


def suite_text(rows: list[dict]) -> Text:
    """The suite's averages in words: with and without the outliers, the median and the range."""
    s = suite_summary(rows)
    if not rows:
        return Text("No suite rows.")
    text = (f"In this chapter's run, over the {s['shapes']} shapes the geometric mean is **{s['geomean']:.1f}%** "
            f"of cuBLAS (median {s['median']:.1f}%; lowest {_pct(s['lowest']):.1f}% at "
            f"{shape_label(_shape(s['lowest']))}, highest {_pct(s['highest']):.1f}% at "
            f"{shape_label(_shape(s['highest']))}); the leaderboard page times the suite again, in a run of its own.")
    if s["outliers"]:
        named = ", ".join(f"{n} ({p:.0f}%)" for n, p in zip(s["outliers"], s["outlier_pct"]))
        text += (f" One number can carry a mean: {named} lies outside the spread of the others (beyond "
                 f"1.5 interquartile ranges), and without it the geometric mean over the other "
                 f"{s['without_count']} shapes is **{s['geomean_without']:.1f}%**.")
    else:
        text += (" No shape lies outside the spread of the others (1.5 interquartile ranges), so no mean is "
                 "lifted by one shape.")
    return Text(text)


def suite_figure(rows: list[dict], source: str,
                 title: str = "The shape suite: final kernel and cuBLAS, same run") -> go.Figure:
    """Horizontal bars per shape: the final kernel (labelled with % of cuBLAS) and cuBLAS."""
    if not rows:
        return empty_figure(title, "no suite shape in these rows", source)
    names = [shape_label(_shape(r)) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=[r["tflops"] for r in rows], orientation="h",
                         name="final (config chosen per shape)",
                         marker_color=[style.colour("final") if r["ok"] else style.WRONG for r in rows],
                         text=[f"{r['tflops']:.1f} ({_pct(r):.0f}%)" for r in rows], textposition="auto",
                         textfont=dict(size=style.FONT), hovertext=[result_figures.hover(r) for r in rows],
                         hoverinfo="text"))
    fig.add_trace(go.Bar(y=names, x=[r["cublas_tflops"] for r in rows], orientation="h", name="cuBLAS, same run",
                         marker_color="#9a9a9a", text=[f"{r['cublas_tflops']:.1f}" for r in rows],
                         textposition="auto", textfont=dict(size=style.FONT)))
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    return style.finish(fig, title, "TFLOP/s", None, source, height=200 + 62 * len(rows))


# ------------------------------------------------------------- where it falls short
ALIGNED = "N\u00a0%\u00a04\u00a0=\u00a00"     # a column header that does not wrap a token per line


def shortfall_rows(rows: list[dict], device: Device) -> list[dict]:
    """Each suite row below cuBLAS, worst first, with how the recorded config's grid fills the GPU."""
    out = []
    for r in sorted((r for r in rows if _pct(r) < 100), key=_pct):
        w = waves.waves_of(r["params"], r["M"], r["N"], r["K"], device)
        out.append({"shape": shape_label(_shape(r)), "% of cuBLAS": round(_pct(r), 1),
                    "config": SPEC.label(r["params"]), "blocks": w["blocks"], "blocks per SM": w["per_sm"],
                    "waves": w["waves"], "last wave full": f"{100 * w['last_wave']:.0f}%",
                    "slots busy overall": f"{100 * w['utilisation']:.0f}%",
                    ALIGNED: r["N"] % 4 == 0,
                    "_gap": 100 - _pct(r), "_idle": 100 * (1 - w["utilisation"]), "_split": w["split"]})
    return out


def shortfall_table(rows: list[dict], device: Device) -> Table:
    cols = ["shape", "% of cuBLAS", "config", "blocks", "blocks per SM", "waves", "last wave full",
            "slots busy overall", ALIGNED]
    return Table(shortfall_rows(rows, device), cols,
                 caption=f"Suite shapes below cuBLAS, worst first ({device.label}); N % 4 = 0: "
                         "the rows of B and C are 16-byte aligned")


def shortfall_text(rows: list[dict], device: Device) -> Text:
    """What the shortfall table says, computed: which shapes are below cuBLAS and whether idle
    slots in the waves can account for the gap (if every block took the same time)."""
    short = shortfall_rows(rows, device)
    above = [r for r in rows if _pct(r) >= 100]
    if not short:
        return Text(f"No suite shape is below cuBLAS in these rows ({len(rows)} shapes).")
    explained = [s for s in short if s["_idle"] >= 0.5 * s["_gap"]]
    unexplained = [s for s in short if s not in explained]
    text = (f"{len(short)} of the {len(rows)} suite shapes are below cuBLAS, from "
            f"{short[0]['% of cuBLAS']:.1f}% ({short[0]['shape']}) to {short[-1]['% of cuBLAS']:.1f}% "
            f"({short[-1]['shape']}).")
    if above:
        text += (" At or above cuBLAS, and so not shortfalls: "
                 + ", ".join(f"{shape_label(_shape(r))} ({_pct(r):.0f}%)" for r in above) + ".")
    if unexplained:
        most = max(s["_idle"] for s in unexplained)
        idle = ("no slot stands idle (every wave is full)" if round(most) == 0 else
                f"the slots stand idle at most {most:.0f}% of the time, less than half their gap")
        text += (f" For {len(unexplained)} of them ({', '.join(s['shape'] for s in unexplained)}) {idle}: "
                 "a partly empty last wave cannot be the main cause there; the time goes inside the blocks"
                 + (" (and, for the split-K configs, into writing and adding the partial tiles)"
                    if any(s["_split"] > 1 for s in unexplained) else "") + ".")
    if explained:
        idle = ", ".join(f"{s['shape']} ({s['_idle']:.0f}% idle against a {s['_gap']:.0f}% gap)" for s in explained)
        text += (f" For {idle} the idle slots could account for at least half the gap (if every block took the "
                 "same time), so how the blocks fill the GPU matters there.")
        # an idle slot is room for another block, not an idle SM: in a single wave, a block with an
        # SM (nearly) to itself runs faster than its share of a full one, and the bound overstates the loss
        one = [s for s in explained if s["waves"] == 1]
        if one:
            text += (" In a single wave, though, an idle slot is room for another block, not an idle SM, and a "
                     "block with an SM (nearly) to itself runs faster than its share of a full one, so there the "
                     "idle slots overstate the loss: "
                     + ", ".join(f"{s['shape']} left {max(0, device.sm_count - s['blocks'])} of the "
                                 f"{device.sm_count} SMs without a block" for s in one) + ".")
    return Text(text)


# ------------------------------------------------------------- every chapter at once
def step_rows(n: int = 4096, device: Device | None = None) -> tuple[dict, str]:
    """The main line's kernels (:mod:`helpers.measure.mainline`; its variants left out) at n x n x n
    with the config each uses there (``spec.config_for``), via :func:`helpers.step`: recorded in its
    chapter's run, or measured now. Returns ({kernel: row}, source); kernels with no row are left out."""
    device = device or hardware.default()
    out, sources = {}, []
    for k in dict.fromkeys(mainline.kernel_of(name) for name in mainline.names()):
        spec = get(k)
        try:
            r, src = step(k, n, spec.config_for(n, n, n, device))
        except (KeyError, ConfigError, datafile.DataError):
            continue
        out[k] = r
        if src not in sources:
            sources.append(src)
    return out, result_figures.join_sources(sources)


def waterfall_labels(vals: list[float]) -> list[str]:
    """Each step's label: its TFLOP/s and the change from the step before, between the rounded
    values, so that each label adds up with the one before."""
    prev = [0.0] + vals[:-1]
    return [f"{v:.1f}" if i == 0 else f"{v:.1f} ({round(v, 1) - round(p, 1):+.1f})"
            for i, (v, p) in enumerate(zip(vals, prev))]


LABEL_GAP = 3                       # pixels between a bar's end and its label


def waterfall_layout(names: list[str], vals: list[float], labels: list[str],
                     width: float = style.PHONE_PX, line: float = 0.0) -> tuple[float, list[str]]:
    """Where the waterfall's labels go and how far its axis must reach for them, worked out for
    a figure ``width`` pixels wide (a phone's; a wider figure only has more room): a gain's
    label "right" of its bar where it fits inside the axis (10% past the fastest kernel, or past
    ``line``, the cuBLAS line, if that is further), else "left" of the bar, where its row is empty,
    else "inside" the bar's end; a loss's left of it. Either goes on the right if it would run into
    the axis on the left, the axis then reaching far enough for it. Returns (the axis's end in
    TFLOP/s, each label's side)."""
    widest = max(style.text_px(line) for name in names for line in name.split("<br>"))
    plot = width - 20 - widest - 10     # the margins, the kernels' names (a name may take two lines)
    need = [style.text_px(t) + LABEL_GAP + 4 for t in labels]     # a label, its gap and background
    prev = [0.0] + vals[:-1]
    top, sides = max(vals + [line]) * 1.1, ["right"] * len(vals)
    for _ in range(2):                  # a label's side depends on the axis, which depends on the sides
        sides = []
        for v, p, w in zip(vals, prev, need):
            start, end = min(v, p) / top * plot, max(v, p) / top * plot
            if v >= p and end + w <= plot:
                sides.append("right")
            elif start >= w:
                sides.append("left")
            elif v >= p and end >= w:
                sides.append("inside")
            else:
                sides.append("right")
        top = max([top] + [max(v, p) * plot / max(plot - w, plot / 4)
                           for v, p, w, side in zip(vals, prev, need, sides) if side == "right"])
    return top, sides


LABEL_BACKGROUND = "hsla(0,0%,100%,0.85)"       # white, a little translucent: a label stays readable over a line


def waterfall_figure(named_rows: dict, source: str, n: int = 4096) -> go.Figure:
    """A waterfall of TFLOP/s, one row per kernel in book order: each bar runs from the kernel
    before it to this one, in the kernel's own colour, labelled with its value and the change;
    the mean of cuBLAS over the kernels' runs as a dashed line. The labels are annotations on
    a light background, drawn over the line wherever it crosses them; the axis ends a little past
    the fastest bar and the cuBLAS line, and every label fits on a phone (:func:`waterfall_layout`)."""
    names = list(named_rows)
    if not names:
        return empty_figure(f"What each chapter added, n = {n}", "no chapter has a row at this size", source)
    vals = [named_rows[k]["tflops"] for k in names]
    prev = [0.0] + vals[:-1]
    # a kernel that ran without its edge checks here says so (its checked version is slower), on a
    # line of its own, so that the names leave the bars room on a phone
    shown = [k + ("<br>(fast path)" if named_rows[k]["params"].get("FAST_PATH") else "") for k in names]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        y=shown, x=[v - p for v, p in zip(vals, prev)], base=prev, orientation="h", name="TFLOP/s",
        marker_color=[style.colour(k) for k in names],
        hovertext=[f"{get(k).title}<br>{get(k).label(named_rows[k]['params'])}<br>{v:.2f} TFLOP/s, "
                   f"{_pct(named_rows[k]):.0f}% of cuBLAS<br>{v - p:+.2f} over the step before"
                   for k, v, p in zip(names, vals, prev)], hoverinfo="text", showlegend=False))
    cub = [named_rows[k]["cublas_tflops"] for k in names]
    mean = sum(cub) / len(cub)
    fig.add_trace(go.Scatter(y=[shown[0], shown[-1]], x=[mean, mean], mode="lines",
                             name=(f"cuBLAS, {min(cub):.1f}-{max(cub):.1f} TFLOP/s over the runs"
                                   if f"{min(cub):.1f}" != f"{max(cub):.1f}" else f"cuBLAS, {min(cub):.1f} TFLOP/s in every run"),
                             line=dict(color=style.CUBLAS, dash="dash", width=1.5), hoverinfo="name"))
    labels = waterfall_labels(vals)
    top, sides = waterfall_layout(shown, vals, labels, line=max(cub))
    for k, v, p, text, side in zip(shown, vals, prev, labels, sides):
        r = side == "right"
        fig.add_annotation(x=min(v, p) if side == "left" else max(v, p), y=k, xref="x", yref="y", text=text,
                           showarrow=False, xanchor="left" if r else "right", xshift=LABEL_GAP if r else -LABEL_GAP,
                           font=dict(size=style.FONT), bgcolor=LABEL_BACKGROUND, borderpad=1)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=style.FONT))
    fig.update_xaxes(range=[0, top])
    return style.finish(fig, f"What each chapter added, n = {n}", "TFLOP/s", None, source,
                        height=200 + 38 * len(names))


# ------------------------------------------------------------------ roofline
CUBLAS_TILE = (256, 128)   # the block tile of the cuBLAS FFMA kernel for large squares on sm_90 (Nsight Systems)


def roofline_points(rows: list[dict], device: Device, n: int = 4096) -> list[dict]:
    """The final kernel at every recorded shape (its tile's intensity there) and cuBLAS at n."""
    pts = []
    for r in sorted(rows, key=lambda r: flops(*_shape(r))):
        s = shape_label(_shape(r))
        pts.append({"name": f"final {s}, {SPEC.label(r['params'])}", "kernel": "final",
                    "short": s if r["M"] == r["N"] == r["K"] == n else "",
                    "intensity": intensity("final", r["params"], *_shape(r)), "tflops": r["tflops"]})
    at_n = [r for r in rows if _shape(r) == (n, n, n)]
    if at_n:
        r = at_n[0]
        bm, bn = CUBLAS_TILE
        ai = flops(n, n, n) / (4 * n * n * n * (1 / bm + 1 / bn) + 4 * n * n)
        pts.append({"name": f"cuBLAS n={n} (intensity of a {bm}x{bn} tile)", "kernel": "cublas", "short": "cuBLAS",
                    "intensity": ai, "tflops": r["cublas_tflops"]})
    return pts


def tidy_roofline(fig: go.Figure, points: list[dict], device: Device) -> go.Figure:
    """Zoom a roofline on its points (and the ridge), with a short axis title that fits a phone."""
    ai = [p["intensity"] for p in points] + [device.ridge]
    tf = [p["tflops"] for p in points]
    lo, hi = min(ai) / 3, max(ai) * 3
    style.log_axis(fig, "x", [lo, hi], "arithmetic intensity (FLOP/byte)")
    style.log_axis(fig, "y", [min(tf) / 2, device.fp32_tflops * 1.3], "TFLOP/s")
    fig.update_xaxes(range=[math.log10(lo), math.log10(hi)])
    fig.update_yaxes(range=[math.log10(min(tf) / 2), math.log10(device.fp32_tflops * 1.4)])
    return fig


def roofline_figure(rows: list[dict], rs: ResultSet, n: int = 4096) -> go.Figure:
    """The final kernel at every shape on the roofline of the rows' device; one legend entry
    for all its points (the hover names each shape and config). The point at n x n x n is a
    larger diamond with a legend entry of its own, not a label beside it: points of other
    shapes often share its intensity, and a label would fall on them."""
    points = roofline_points(rows, rs.device, n)
    if not points:
        return empty_figure("The final kernel on the roofline", "no final-kernel rows", rs.source)
    fig = tidy_roofline(result_figures.roofline(points, rs.device, rs.source, title="The final kernel on the roofline"),
                        points, rs.device)
    first, marked = True, []
    for t in fig.data:
        if not (t.name and t.name.startswith("final ")):
            continue
        t.update(marker_color=style.colour("final"), marker_line=dict(width=1, color="#333"), marker_symbol="circle")
        if t.text and t.text[0]:         # the point at n x n x n
            t.update(name=f"final at {t.text[0]}", text=None, mode="markers", legendgroup="final-n",
                     marker=dict(symbol="diamond", size=15, line=dict(width=1.5, color="#111")))
            marked.append(t)
        else:
            t.update(legendgroup="final", showlegend=first, mode="markers")
            if first:
                # set after finish(), which breaks long entries into lines: broken here the same way
                t.name = style.wrap("final, the dispatcher's choice at each recorded shape (hover for each)",
                                    style.LEGEND_CHARS)
            first = False
    # the marked point last, so that it is drawn over the points it shares an intensity with;
    # cuBLAS after it in the legend, which otherwise follows the order of the traces
    fig.data = tuple(t for t in fig.data if all(t is not m for m in marked)) + tuple(marked)
    for t in fig.data:
        if t.name and t.name.startswith("cuBLAS"):
            # its name to its right: below it, it would fall on the final kernel's points near the roof
            t.update(legendrank=1001, textposition="middle right")
    # cuBLAS on top: at n x n x n it shares the marked point's intensity
    fig.data = tuple(t for t in fig.data if not (t.name or "").startswith("cuBLAS")) + \
        tuple(t for t in fig.data if (t.name or "").startswith("cuBLAS"))
    return fig


def peak_text(r: dict, device: Device) -> Text:
    return Text(f"At {shape_label(_shape(r))} the final kernel runs at {r['tflops']:.1f} TFLOP/s, "
                f"**{100 * r['tflops'] / device.fp32_tflops:.1f}%** of the {device.label}'s FP32 peak of "
                f"{device.fp32_tflops:.1f} TFLOP/s; cuBLAS, in the same run, at {r['cublas_tflops']:.1f} TFLOP/s "
                f"(**{100 * r['cublas_tflops'] / device.fp32_tflops:.1f}%**). Both are "
                f"{'far right of' if intensity('final', r['params'], *_shape(r)) > 4 * device.ridge else 'right of'} "
                f"the ridge at {device.ridge:.1f} FLOP/byte.")


def square_rows(rs: ResultSet, sizes) -> list[tuple[int, dict]]:
    """(n, the final kernel's row at n^3) for the sizes that have one."""
    out = []
    for n in sizes:
        try:
            out.append((n, square_row(rs, n)))
        except (KeyError, ConfigError):
            continue
    return out


def squares_text(rs: ResultSet, sizes=(4096, 8192)) -> Text:
    """The final kernel's percentage of cuBLAS at the square sizes, with the runs' 20/80 bands."""
    parts = []
    for n, r in square_rows(rs, sizes):
        band = 100 * (r["ms_p80"] / r["ms_p20"] - 1)
        width = f"{band:.1f}% wide" if band >= 0.1 else "under 0.1% wide"   # not "0.0%", which reads as a bug
        parts.append(f"**{_pct(r):.1f}%** of cuBLAS at n = {n} ({r['tflops']:.1f} against "
                     f"{r['cublas_tflops']:.1f} TFLOP/s; the kernel's 20/80 band is {width})")
    return Text("The final kernel reaches " + "; ".join(parts) + "." if parts else "No square-size rows.")


def packs(params: dict) -> str:
    """Which operands a config packs first: "A", "B", "A and B" or "neither"."""
    p = SPEC.resolve(params)
    return {(1, 0): "A", (0, 1): "B", (1, 1): "A and B"}.get((p["PACK_A"], p["PACK_B"]), "neither")


def packing_text(rs: ResultSet, sizes=(4096, 8192)) -> Text:
    """What the choice packs at the square sizes, and the recorded speed of the choice there
    beside the defaults (128 x 256, nothing packed) where both were run."""
    parts = []
    for n, r in square_rows(rs, sizes):
        s = f"at n = {n} the choice packs {packs(r['params'])} and reaches {_pct(r):.1f}% of cuBLAS"
        plain = [x for x in rs.rows if x["kernel"] == FINAL and _shape(x) == (n, n, n)
                 and SPEC.resolve(x["params"]) == SPEC.defaults()]
        if plain:
            s += f" (the defaults, which pack nothing: {_pct(plain[0]):.1f}%)"
        parts.append(s)
    return Text("In these rows, " + "; ".join(parts) + "." if parts else "No square-size rows.")


# ------------------------------------------------------------- what each idea gained
def _gain(new: dict, old: dict) -> str:
    return f"{100 * (new['tflops'] / old['tflops'] - 1):+.0f}%"


def _speedup(new: dict, old: dict) -> str:
    """A bar label's change against the step it builds on, as a factor of speed (a label in %
    beside a % of cuBLAS would read as percentage points)."""
    return f"×{new['tflops'] / old['tflops']:.2f}"


def _step_or_none(kernel: str, n: int, params: dict | None = None) -> tuple[dict, str] | tuple[None, str]:
    try:
        return step(kernel, n, params)
    except (KeyError, ConfigError, datafile.DataError) as exc:
        return None, str(exc)


def _recorded_or_none(chapter: str) -> ResultSet | None:
    try:
        return recorded(chapter)
    except (datafile.DataError, KeyError):
        return None


def ladder_rows(rs: ResultSet, n: int = 4096, previous: str = "warptiling") -> list[dict]:
    """From the previous chapter's kernel to the dispatcher's choice at n^3, one change at a time,
    as far as the rows have them: the previous kernel; the final kernel's defaults (a 128 x 256
    block of eight 64 x 64 warps fed by two cp.async stages, A row-major); the choice with two
    stages; the choice."""
    choice = SPEC.config_for(n, n, n, rs.device)
    at = [r for r in rs.rows if r["kernel"] == FINAL and _shape(r) == (n, n, n)]
    pick = lambda want: next((r for r in at if SPEC.resolve(r["params"]) == want), None)  # noqa: E731
    prev, _ = _step_or_none(previous, n, get(previous).config_for(n, n, n, rs.device))
    steps = [(f"{previous} (previous chapter)", prev),
             ("final, defaults: 128 × 256 block, 2 stages, A row-major", pick(SPEC.defaults())),
             ("+ 8 × 16 thread tiles, k-slices of 16, A packed, 2 stages", pick(dict(choice, STAGES=2))),
             (f"+ {choice['STAGES']} stages: the dispatcher's choice", pick(choice))]
    out, before = [], None
    for name, r in steps:
        if r is None:
            continue
        out.append({"step": name, "config": get(r["kernel"]).label(r["params"]), "TFLOP/s": round(r["tflops"], 1),
                    "% of cuBLAS": round(_pct(r), 1), "change": _gain(r, before) if before else ""})
        before = r
    return out


def ladder_table(rs: ResultSet, n: int = 4096, previous: str = "warptiling") -> Table:
    return Table(ladder_rows(rs, n, previous), caption=f"From the {previous} kernel to the final kernel at n = {n} "
                                                       f"({rs.source}; {previous}: its chapter's run)")


def fast_path_text(n: int = 4096) -> Text:
    """The double-buffering chapter's kernel with and without its fast path for interior tiles."""
    slow, _ = _step_or_none("double_buffering", n, {"FAST_PATH": 0})
    fast, src = _step_or_none("double_buffering", n, {"FAST_PATH": 1})
    if slow is None or fast is None:
        return Text(f"*No run of the double-buffering kernel with and without its fast path at n = {n}.*")
    return Text(f"The double-buffering kernel measured what this is worth: at n = {n} its fast path ran at "
                f"{fast['tflops']:.1f} TFLOP/s, {100 * (fast['tflops'] / slow['tflops'] - 1):.0f}% faster than with the "
                f"checks in the loop ({src}).")


def block_tile_text(n: int = 4096) -> Text:
    """The warp-tiling chapter's kernel with the 128 x 256 block against its own default block."""
    base = get("warptiling").defaults()
    wide, src = _step_or_none("warptiling", n, dict(base, BN=256, TM=8, TN=16))
    own, _ = _step_or_none("warptiling", n, base)
    if wide is None or own is None:
        return Text(f"*No run of the warp-tiling kernel with a 128 × 256 block at n = {n}.*")
    return Text(f"The register-staged kernel of the last chapter could not use this block: at n = {n} its "
                f"128 × 256 tile ran {wide['tflops']:.1f} TFLOP/s, slower than its {base['BM']} × {base['BN']} tile "
                f"({own['tflops']:.1f}; {src}).")


def layout_text(n_plain: int = 2048, n_packed: int = 4096) -> Text:
    """What 4-byte copies of A cost and what packing A gets back (the layouts run: helpers.sgemm
    in each layout of A and B)."""
    lay = _recorded_or_none("layouts")
    if lay is None:
        return Text("*No recorded run of the layouts.*")
    rows = [r for r in lay.rows if r["kernel"] == FINAL and not r["params"]["B_T"]
            and not r["params"]["PACK_B"]]

    def at(n, a_t, pack):
        return next((r for r in rows if _shape(r) == (n, n, n) and r["params"]["A_T"] == a_t
                     and r["params"]["PACK_A"] == pack), None)
    parts = []
    nn, tn = at(n_plain, 0, 0), at(n_plain, 1, 0)
    if nn and tn and SPEC.resolve(dict(nn["params"], A_T=1)) == SPEC.resolve(tn["params"]):
        parts.append(f"At n = {n_plain} the same config ran {nn['tflops']:.1f} TFLOP/s with A row-major (4-byte "
                     f"copies) and {tn['tflops']:.1f} with A stored transposed (16-byte copies)")
    packed, given = at(n_packed, 1, 1), at(n_packed, 1, 0)
    if packed and given:
        cost = 100 * (1 - packed["tflops"] / given["tflops"])
        parts.append(f"At n = {n_packed}, packing A first costs {cost:.0f}% of the speed of A given transposed, "
                     f"and the product still reaches {_pct(packed):.0f}% of cuBLAS")
    if not parts:
        return Text("*The layouts run has no pair of rows to compare here.*")
    return Text(". ".join(parts) + f" ({lay.source}).")


def few_tiles_text(rs: ResultSet, shapes=((8192, 128, 8192), (128, 8192, 8192)), previous: str = "warptiling") -> Text:
    """The final kernel's choice at shapes with few output tiles against the previous chapter's
    kernel, each as % of cuBLAS in its own run (the previous kernel from the leaderboard's run)."""
    board = _recorded_or_none("leaderboard")
    parts = []
    for s in shapes:
        mine = chosen_row(rs, s)
        prev = next((r for r in (board.rows if board else []) if r["kernel"] == previous and _shape(r) == tuple(s)),
                    None)
        if mine is None or prev is None:
            continue
        parts.append(f"At {shape_label(s)} the choice reaches {_pct(mine):.0f}% of cuBLAS, "
                     f"where the {previous} kernel reached {_pct(prev):.0f}%")
    if not parts:
        return Text("*No rows at the shapes with few tiles.*")
    return Text(". ".join(parts) + f" ({result_figures.join_sources([rs.source, board.source])}).")


def edge_text(rs: ResultSet, n: int = 4097, previous: str = "warptiling") -> Text:
    """The final kernel at an n whose last row and column of tiles cross the edge, against the
    previous chapter's kernel there (each as % of cuBLAS in its own run)."""
    board = _recorded_or_none("leaderboard")
    mine = chosen_row(rs, (n, n, n))
    prev = next((r for r in (board.rows if board else []) if r["kernel"] == previous and _shape(r) == (n, n, n)), None)
    if mine is None or prev is None:
        return Text(f"*No rows at n = {n}.*")
    return Text(f"At n = {n}, where every tile of the last row and column crosses an edge, the final kernel "
                f"(`{SPEC.label(mine['params'])}`) reaches {_pct(mine):.0f}% of cuBLAS and the {previous} kernel "
                f"{_pct(prev):.0f}% ({result_figures.join_sources([rs.source, board.source])}).")


def dispatch_text(rs: ResultSet, sizes=(1024, 2048)) -> Text:
    """One config for every shape against a config per shape: the defaults (this chapter's run)
    against the dispatcher's choice (the leaderboard's run) at small squares, each as % of cuBLAS
    in its own run."""
    board = _recorded_or_none("leaderboard")
    parts = []
    for n in sizes:
        plain = next((r for r in rs.rows if r["kernel"] == FINAL and _shape(r) == (n, n, n)
                      and SPEC.resolve(r["params"]) == SPEC.defaults()), None)
        chosen = next((r for r in (board.rows if board else []) if r["kernel"] == FINAL and _shape(r) == (n, n, n)),
                      None)
        if plain is None or chosen is None:
            continue
        parts.append(f"At n = {n} the default config reaches {_pct(plain):.0f}% of cuBLAS and the choice "
                     f"(`{SPEC.label(chosen['params'])}`) {_pct(chosen):.0f}%")
    if not parts:
        return Text("*No rows of the defaults beside the choice at the small squares.*")
    return Text(f"The default config is `{SPEC.label(SPEC.defaults())}`. " + ". ".join(parts)
                + f" (the default config in this chapter's run, the choice in the leaderboard's, each against "
                f"cuBLAS in its own run; {result_figures.join_sources([rs.source, board.source])}).")


def correctness_text(rs: ResultSet) -> Text:
    """How many recorded rows were checked, whether all passed, and the largest relative error."""
    rows = [r for r in rs.rows if r["kernel"] == FINAL]
    if not rows:
        return Text("No final-kernel rows.")
    bad = [r for r in rows if not r["ok"]]
    worst = max(r["rel_err"] or 0.0 for r in rows)
    return Text(f"All {len(rows)} recorded configs passed, the largest relative error {worst:.1e}." if not bad else
                f"{len(bad)} of the {len(rows)} recorded configs failed the check: see the table.")


# ------------------------------------------------------------------ the feature ladder
# One run (``python -m helpers record --chapter final_features``): the reduced kernel, then one
# feature at a time, each on a shape where it matters (helpers/measure/final_features.py).
needs_ladder = style.needs_run(ladder_plan.RECORD_COMMAND)
show_or_note = style.show_or_note     # the ladder's figure, or the note while it is not recorded
LADDER_SHAPE_COLOURS = (style.PALETTE[0], style.PALETTE[1], style.PALETTE[2])


def ladder_run() -> ResultSet | None:
    """The ladder's rows: measured now in live mode on a GPU, else recorded (None where it is not
    recorded yet: the ladder's figure, table and sentences then show a note naming the command)."""
    if hardware.is_live():
        return results(ladder_plan.CHAPTER)
    return _recorded_or_none(ladder_plan.CHAPTER)


def ladder_steps(rs: ResultSet) -> list[dict]:
    """Each step of the ladder with its row in ``rs`` (steps without a row are left out):
    {"step", "name", "shape", "row", "base"} with "base" the row of the step it is compared with
    (None for the reduced kernel)."""
    rows, out = {}, []
    for i, (s, p) in enumerate(ladder_plan.plan()):
        rows[i] = next((r for r in rs.rows if r["kernel"] == FINAL and _shape(r) == s.shape
                        and SPEC.resolve(r["params"]) == p), None)
    for i, (s, p) in enumerate(ladder_plan.plan()):
        if rows[i] is None:
            continue
        b = ladder_plan.base_of(i)
        out.append({"step": s.label, "name": s.name, "shape": s.shape, "row": rows[i],
                    "base": rows.get(b) if b is not None else None})
    return out


def _ladder_step(rs: ResultSet, name: str) -> dict | None:
    return next((s for s in ladder_steps(rs) if s["name"] == name), None)


@needs_ladder
def feature_table(rs: ResultSet) -> Table:
    """The ladder as a table: step, shape, config, ms, TFLOP/s, % of cuBLAS, the change against the
    step it builds on, correct."""
    rows = [{"step": s["step"], "shape": shape_label(s["shape"]), "config": SPEC.label(s["row"]["params"]),
             "ms": round(s["row"]["ms"], 3), "TFLOP/s": round(s["row"]["tflops"], 1),
             "% of cuBLAS": round(_pct(s["row"]), 1),
             "change": _gain(s["row"], s["base"]) if s["base"] and s["name"] in ladder_plan.FEATURES else "",
             "correct": s["row"]["ok"]} for s in ladder_steps(rs)]
    return Table(rows, caption=f"The feature ladder, each row checked against cuBLAS and timed with it ({rs.source})")


@needs_ladder
def feature_figure(rs: ResultSet) -> go.Figure:
    """A bar per step of the ladder: its % of cuBLAS in the same run, coloured by shape (one legend
    entry per shape), labelled with the % and the change against the step it builds on; cuBLAS at 100%."""
    title = "The final kernel, one feature at a time"
    steps = ladder_steps(rs)
    if not steps:
        return empty_figure(title, "no step of the ladder in these rows", rs.source)
    shapes = list(dict.fromkeys(s["shape"] for s in steps))
    fig = go.Figure()
    for k, shape in enumerate(shapes):
        here = [s for s in steps if s["shape"] == shape]
        fig.add_trace(go.Bar(
            y=[s["step"] for s in here], x=[_pct(s["row"]) for s in here], orientation="h",
            name=shape_label(shape), marker_color=[LADDER_SHAPE_COLOURS[k % len(LADDER_SHAPE_COLOURS)]
                                                   if s["row"]["ok"] else style.WRONG for s in here],
            text=[f"{_pct(s['row']):.0f}%" + (f" ({_speedup(s['row'], s['base'])})"
                                               if s["base"] and s["name"] in ladder_plan.FEATURES else "")
                  for s in here],
            # inside a bar, at its start: clear of cuBLAS's line at 100%, which crosses the end of
            # the bars near it
            textposition="auto", insidetextanchor="start", textfont=dict(size=style.FONT),
            hovertext=[result_figures.hover(s["row"]) for s in here], hoverinfo="text"))
    names = [s["step"] for s in steps]
    fig.add_trace(go.Scatter(y=[names[0], names[-1]], x=[100, 100], mode="lines", name="cuBLAS, same run",
                             line=dict(color=style.CUBLAS, dash="dash", width=1.5), hoverinfo="name"))
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=names)
    fig.update_xaxes(range=[0, max(110, max(_pct(s["row"]) for s in steps) * 1.1)])
    return style.finish(fig, title, "% of cuBLAS", None, rs.source, height=160 + 34 * len(steps))


FEATURE_WORDS = {
    "block tile": "the 128 × 256 block tile",
    "pipeline": "five stages of k-slices of 16",
    "short trips": "trips of two k-steps",
    "grouping": "groups of eight block-rows",
    "packing": "packing A",
    "edges": "moving the edge tiles back",
    "split-K": "a split of K in four",
    "stream-K": "stream-K, instead of the split,",
}


@needs_ladder
def feature_text(rs: ResultSet, name: str) -> Text:
    """One sentence: what a feature of the ladder did at its shape, from the run."""
    s = _ladder_step(rs, name)
    if s is None or s["base"] is None:
        return Text(f"*No row of the ladder's step {name!r} and the step before it in this run.*")
    new, old = s["row"], s["base"]
    change = 100 * (new["tflops"] / old["tflops"] - 1)
    where = shape_label(s["shape"])
    if abs(change) < 1:
        return Text(f"At {where}, {FEATURE_WORDS[name]} left the kernel level: {old['tflops']:.1f} and "
                    f"{new['tflops']:.1f} TFLOP/s, {_pct(new):.0f}% of cuBLAS ({rs.source}).")
    return Text(f"At {where}, {FEATURE_WORDS[name]} took the kernel from {old['tflops']:.1f} to "
                f"{new['tflops']:.1f} TFLOP/s ({change:+.0f}%), {_pct(new):.0f}% of cuBLAS ({rs.source}).")


@needs_ladder
def reduced_text(rs: ResultSet) -> Text:
    """The reduced kernel: whether it matched cuBLAS, and how fast it ran against cuBLAS in the run."""
    s = _ladder_step(rs, "reduced")
    if s is None:
        return Text("*No row of the reduced kernel in this run.*")
    r = s["row"]
    verdict = (f"matched cuBLAS (relative error {r['rel_err']:.1e})" if r["ok"]
               else f"did NOT match cuBLAS (relative error {r['rel_err']})")
    return Text(f"At {shape_label(s['shape'])} the reduced kernel {verdict} and ran at {r['tflops']:.1f} TFLOP/s, "
                f"{_pct(r):.0f}% of cuBLAS in the same run ({rs.source}).")


@needs_ladder
def ladder_summary_text(rs: ResultSet) -> Text:
    """From the reduced kernel to the last feature on the same shape: % of cuBLAS before and after."""
    steps = ladder_steps(rs)
    if not steps:
        return Text("*No step of the ladder in this run.*")
    first = steps[0]
    last = [s for s in steps if s["shape"] == first["shape"]][-1]
    return Text(f"At {shape_label(first['shape'])} the features take the kernel from {_pct(first['row']):.0f}% "
                f"to {_pct(last['row']):.0f}% of cuBLAS ({first['row']['tflops']:.1f} to "
                f"{last['row']['tflops']:.1f} TFLOP/s).")


@needs_ladder
def ladder_correctness_text(rs: ResultSet) -> Text:
    steps = ladder_steps(rs)
    wrong = [s["step"] for s in steps if not s["row"]["ok"]]
    worst = max((s["row"]["rel_err"] or 0.0) for s in steps) if steps else 0.0
    verdict = "all matched" if not wrong else f"{len(wrong)} did NOT match: {', '.join(wrong)}"
    return Text(f"The {len(steps)} rows of the ladder were each checked against cuBLAS on fresh random data "
                f"before they were timed: {verdict} (largest relative error {worst:.1e}).")


# ------------------------------------------------------------------ the dispatch numbers
def _dispatch() -> dict:
    return json.loads(final_spec.DISPATCH_FILE.read_text())


def dispatch_constants_table() -> Table:
    """The model's constants as the dispatch file holds them, and how each is obtained."""
    doc = _dispatch()
    how = {name.strip(): text for names, text in doc["recipe"]["how"].items() for name in names.split(",")}
    fitted = set(doc["recipe"]["fitted"])
    rows = [{"constant": k, "value": v,
             "how it is obtained": "fitted to the tables named in the file" if k in fitted else how.get(k, "")}
            for k, v in doc["constants"].items() if k != "layout"]
    return Table(rows, caption=f"The model's constants ({final_spec.DISPATCH_FILE.name})")


def dispatch_fit_text() -> Text:
    """What the shipped numbers were fitted to, and how well they choose there."""
    doc = _dispatch()
    tables, q = doc["provenance"]["tables"], doc["quality"]
    devices = ", ".join(sorted({t["device"] for t in tables}))
    dates = sorted(t["measured"][:10] for t in tables)
    fitted = ", ".join(f"`{f}`" for f in doc["recipe"]["fitted"])
    return Text(f"The shipped numbers: `python -m helpers refit` fitted {fitted} to the timings of "
                f"{q['shapes']} shapes in tables of {sum(t['rows'] for t in tables):,} timed configs ({devices}, "
                f"measured {dates[0]}), the other numbers "
                f"kept as the tables were measured with. On those shapes its choices run at "
                f"{100 * q['fitted']['choice_quality']:.1f}% of the best measured option's speed (geometric mean), "
                f"against {100 * q['measured_with']['choice_quality']:.1f}% with the numbers before the fit.")


def runs_text(rs: ResultSet, ladder: ResultSet | None, n: int = 4096) -> Text:
    """The chosen config at n^3 in this run and in the ladder's, where the ladder's last step at n is
    that config: how far two runs of one config lie apart (the page shows numbers from both)."""
    try:
        mine = square_row(rs, n)
    except (KeyError, ConfigError):
        return Text("")
    same = [s["row"] for s in (ladder_steps(ladder) if ladder else []) if s["shape"] == (n, n, n)
            and SPEC.resolve(s["row"]["params"]) == SPEC.resolve(mine["params"])]
    if not same:
        return Text("")
    other = same[-1]
    apart = 100 * abs(mine["tflops"] / other["tflops"] - 1)
    verdict = ("the same result, whatever the rounding shows" if apart < 1 else
               "the spread to allow between one run's number and another's")
    return Text(f"The feature ladder's run timed the same config at n = {n} at {other['tflops']:.2f} TFLOP/s, this "
                f"run at {mine['tflops']:.2f}: two runs of one config lie {apart:.1f}% apart here, {verdict}.")
