"""Figures, tables and computed sentences of the chapter "Bank conflicts" (book/08_bank_conflicts.md).

The bank model is :mod:`helpers.models.banks`; the hardware's own counts come from
Nsight Compute (:mod:`helpers.measure.ncu`, data source ``bank_conflicts_ncu``); the
timings from the chapter's sweep. Every sentence built here states what the rows
say, so it stays true when they are recorded again on another GPU.

Also used by "Double buffering" and "Warp tiling" (:func:`roofline_configs`,
:func:`Solution`).
"""
from __future__ import annotations

import html
import math
import re
from collections import Counter

import plotly.graph_objects as go

from ..hardware import SMEM_BANKS, Device
from ..measure import ncu
from ..models import banks
from ..models.roofline import intensity
from ..runtime import offline, sass
from ..runtime.specs import get
from ..runtime.specs.bank_conflicts import VARIANTS, a_column, rows_per_warp_store
from ..tables import Table, Text
from . import results as rfig
from . import style
import shlex

KERNEL = "bank_conflicts"
NO_STORE_FIX = "split"          # the layout with the B reads fixed and the A store as it was
ACCESS_NOTES = {"A store": "element j of each float4 of A, transposed (32-bit STS)",
                "B store": "a float4 of B (STS.128)", "A load": "a float4 of the transposed A tile",
                "B load": "a float4 of B (LDS.128)"}


# ---------------------------------------------------------------- small tools
class Solution:
    """An exercise's answer computed from data, shown folded (an HTML ``<details>``), in
    the book and in any notebook alike. ``text`` is Markdown-lite: `code` and **bold**."""

    def __init__(self, text: str, summary: str = "Solution (computed from the recorded data)"):
        self.text, self.summary = text, summary

    def _repr_html_(self):
        body = html.escape(self.text)
        body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)
        body = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", body)
        paras = "".join(f"<p>{p.strip()}</p>" for p in body.split("\n\n") if p.strip())
        return (f'<details class="sgemm-solution" style="border:1px solid #ccc;border-radius:6px;'
                f'padding:0.4em 1em;margin:0.5em 0;overflow-wrap:anywhere"><summary style="cursor:pointer">{html.escape(self.summary)}'
                f"</summary>{paras}</details>")

    def __repr__(self):
        return f"{self.summary}\n\n{self.text}"


def placeholder(message: str, title: str) -> go.Figure:
    """A figure that says why it has nothing to draw (its data are not recorded here)."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=style.FONT + 1))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return finish(fig, title, height=260, legend=False)


wrap = style.wrap                                   # style wraps every figure's text for a 390 px screen
TITLE_CHARS = 48                                    # this chapter's titles state their result in a short line


def fit(fig: go.Figure) -> go.Figure:
    """Bar labels kept readable: text inside a bar is never shrunk below 10 px. (style.finish
    already wraps the title, the note and the axis titles and puts the legend at the bottom.)"""
    fig.update_layout(uniformtext=dict(minsize=10, mode="show"))
    return fig


def titles(fig: go.Figure) -> list[str]:
    """Every title a figure can show: its own and the ones its menu entries or slider steps set."""
    out = [fig.layout.title.text or ""]
    controls = [b for m in (fig.layout.updatemenus or ()) for b in m.buttons]
    controls += [st for sl in (fig.layout.sliders or ()) for st in sl.steps]
    for c in controls:
        out += [a["title.text"] for a in (c.args or ()) if isinstance(a, dict) and "title.text" in a]
    return out


def finish(*args, **kw) -> go.Figure:
    """:func:`helpers.figures.style.finish`, then :func:`fit`."""
    return fit(style.finish(*args, **kw))


def short_name(kernel: str) -> str:
    """A kernel in a few words, for slider and menu labels: "cp.async", "register prefetch"."""
    return {"double_buffering": "register prefetch", "cp_async": "cp.async", "bank_conflicts": "08",
            "warptiling": "warp tiles"}.get(kernel, kernel)


def quiet_slider(fig: go.Figure) -> go.Figure:
    """A slider whose tick labels are hidden (long labels would overlap on a narrow screen): the
    chosen step's label shows above it, and its title says the rest."""
    if fig.layout.sliders:
        fig.layout.sliders[0].update(font=dict(color="rgba(0,0,0,0)", size=2), ticklen=4,
                                     pad=dict(l=0, r=0))       # no end label to make room for
        fig.layout.sliders[0].currentvalue.font = dict(color="#222", size=style.FONT)
    return fig


def pct(a: float, b: float) -> float:
    """How much a is above b, in percent."""
    return 100 * (a / b - 1)


def band_pct(r: dict) -> float:
    """Width of a row's 20-80% time band, in percent of its median."""
    return 100 * (r["ms_p80"] - r["ms_p20"]) / r["ms"]


def config_name(kernel: str, params: dict) -> str:
    """A profiled or timed config in the chapter's words: "08 BK=16 split, swizzle"."""
    spec = get(kernel)
    return f"{spec.file[:2]} {spec.label(spec.resolve(params))}"


# ------------------------------------------------------------ the bank model
def cases() -> Table:
    """Textbook access patterns: wavefronts in the model, and the minimum for their width."""
    pats = [
        ("32-bit, stride 1 word", [[i] for i in range(32)], 1),
        ("32-bit, stride 2 words", [[2 * i] for i in range(32)], 1),
        ("32-bit, stride 32 words (a column of a 32-wide array)", [[32 * i] for i in range(32)], 1),
        ("32-bit, stride 33 words (the same, padded by 1)", [[33 * i] for i in range(32)], 1),
        ("32-bit, every lane the same word (broadcast)", [[5] for _ in range(32)], 1),
        ("128-bit, consecutive float4", [[4 * i + j for j in range(4)] for i in range(32)], 4),
        ("128-bit, float4 8 words apart", [[8 * i + j for j in range(4)] for i in range(32)], 4),
        ("128-bit, 16 lanes share each float4 (broadcast)", [[4 * (i // 16) + j for j in range(4)] for i in range(32)], 4),
    ]
    rows = [{"access": name, "instruction": "LDS.128" if w == 4 else "LDS", "wavefronts (model)": banks.wavefronts(ws, w),
             "minimum (model)": banks.ideal_wavefronts(ws, w)} for name, ws, w in pats]
    return Table(rows, caption="The bank model on textbook patterns (one warp, 32 lanes)")


def lanes(access: str, layout: str = "split + swizzle", n: int = 8, BK: int = 16) -> Table:
    """The first ``n`` lanes of one access of kernel 08 under a layout (a name of ``VARIANTS``):
    element, word, bank, wavefront (model)."""
    acc = banks.kernel_access(access, BK=BK, **VARIANTS[layout])
    sched = banks.schedule(acc.words, acc.width)
    rows = []
    for lane in range(n):
        ws = acc.words[lane]
        first, last = banks.bank(ws[0]), banks.bank(ws[-1])
        rows.append({"lane": lane, "element": acc.where[lane], "first word": ws[0],
                     "bank" + ("s" if len(ws) > 1 else ""): f"{first}-{last}" if len(ws) > 1 else first,
                     "wavefront": max(sched[lane].values())})
    return Table(rows, caption=f"{access} ({acc.instruction}), {layout}, BK = {BK}: {acc.wavefronts()} wavefronts for the warp "
                               f"(minimum {acc.ideal()})")


def verdict(acc: banks.Access) -> str:
    wf, ideal = acc.wavefronts(), acc.ideal()
    if wf == ideal:
        return "no conflict"
    return f"{wf // ideal}-way conflict" if wf % ideal == 0 else f"{wf - ideal} extra wavefronts"


def heat(acc: banks.Access):
    """(z, hover text) for a lanes x banks heatmap: z = the wavefront that serves (lane, bank)."""
    sched = banks.schedule(acc.words, acc.width)
    z = [[None] * SMEM_BANKS for _ in acc.words]
    text = [[""] * SMEM_BANKS for _ in acc.words]
    for lane, ws in enumerate(acc.words):
        for w in ws:
            b = banks.bank(w)
            z[lane][b] = sched[lane][w]
            text[lane][b] = f"lane {lane}, bank {b}<br>word {w}: {acc.where[lane]}<br>wavefront {sched[lane][w]}"
    return z, text


def heatmap(access: str, layouts: list[str] | None = None, BK: int = 16, warp: int = 0, **at) -> go.Figure:
    """Lanes (rows) x banks (columns) of one access of kernel 08, coloured by the wavefront that
    serves each word (model); a menu over the layouts, each with a title that states its count.

    ``at``: which instruction of the access (``k``, ``j``, ``l``, ``g``; see
    :func:`helpers.models.banks.kernel_access`).
    """
    layouts = layouts or list(VARIANTS)
    steps = []
    accs = [banks.kernel_access(access, BK=BK, warp=warp, **VARIANTS[name], **at) for name in layouts]
    top = max(max(max(s.values()) for s in banks.schedule(a.words, a.width)) for a in accs)
    for name, acc in zip(layouts, accs):
        z, text = heat(acc)
        n = acc.wavefronts()
        title = f"{access}: <b>{n} wavefront{'' if n == 1 else 's'}</b> (min. {acc.ideal()}), {verdict(acc)}"
        steps.append((name, [go.Heatmap(z=z, hovertext=text, hoverinfo="text", zmin=1, zmax=max(top, 2), xgap=1,
                                        ygap=1, colorscale="Turbo", name=name,
                                        colorbar=dict(title=dict(text="wave-<br>front", side="top"), thickness=12,
                                                      dtick=1 if top <= 8 else None))], title))
    fig = style.steps_figure(steps, active=0)
    fig.update_xaxes(title="bank", dtick=4, range=[-0.5, SMEM_BANKS - 0.5], constrain="domain")
    fig.update_yaxes(title="lane", autorange="reversed", dtick=4)
    return finish(fig, steps[0][2], source=f"{accs[0].instruction} of one warp, BK = {BK}, in the bank model "
                  "(helpers.models.banks); hover a cell for its address",
                        height=560, legend=False)


def padding(BKs=(8, 16), pads=(0, 1, 2, 4)) -> Table:
    """The transposed A store under each padding: wavefronts (model) and whether rows stay 16-byte aligned."""
    rows = []
    for BK in BKs:
        for PAD in pads:
            a = banks.kernel_access("A store", BK=BK, PAD=PAD)
            rows.append({"BK": BK, "PAD": PAD, "k-rows one warp stores": BK // 4,
                         "A store wavefronts (minimum 1)": a.wavefronts(), "row length (bytes)": 4 * (128 + PAD),
                         "rows 16-byte aligned": (128 + PAD) % 4 == 0})
    return Table(rows, caption="Padding the transposed A tile (model)")


def executed(text: str) -> list:
    """The instructions of a SASS listing that can execute (not the ``@!PT`` placeholders)."""
    return [i for i in sass.instructions(text) if i.predicate != "@!PT"]


def read_widths(BK: int = 16, device: Device | None = None) -> Table:
    """Shared-memory instructions of each layout's inner loop by width, from the offline compile."""
    fams = ("LDS", "LDS.64", "LDS.128", "STS", "STS.128")
    rows = []
    for name, v in VARIANTS.items():
        loop = sass.inner_loop(offline.sass(KERNEL, dict(v, BK=BK), device))
        c = Counter(i.family for i in executed(loop))
        rows.append({"layout": name, **{f: c.get(f, 0) for f in fams}, "FFMA": c.get("FFMA", 0)})
    arch = (device.arch if device else "the reference GPU's architecture")
    return Table(rows, caption=f"Inner loop of each layout, BK = {BK}: shared-memory instructions by width "
                               f"(SASS, compiled offline for {arch})")


def swizzle(BK: int = 16, m: int = 20) -> Table:
    """The XOR mask of each group of k-rows, and where the float4 of A at columns m..m+3 lands."""
    p = dict(BK=BK, SPLIT=1, PAD=0, SWIZZLE=1)
    rows = []
    for k in range(0, BK, 4):
        col = a_column(p, k, m)
        rows.append({"k": f"{k}-{k + 3}", "XOR mask x(k)": col ^ m, f"float4 at m = {m}..{m + 3} stored at": f"{col}..{col + 3}",
                     "its banks": f"{banks.bank(k * 128 + col)}-{banks.bank(k * 128 + col + 3)}"})
    wf = banks.kernel_access("A store", BK=BK, SWIZZLE=1).wavefronts()
    return Table(rows, caption=f"XOR swizzle, BK = {BK}: a warp stores {rows_per_warp_store(BK)} rows of A per k-row; "
                               f"the swizzled A store takes {wf} wavefront{'s' if wf > 1 else ''} (model)")


MODEL_BAR_PX, MODEL_BARGAP = 17, 0.2       # a bar of model_figure's groups on a phone: its label (FONT - 1) and a gap


def model_figure(BKs=(8, 16)) -> go.Figure:
    """Wavefronts per instruction of each access kind under each layout (model); a menu switches BK.
    Each bar is MODEL_BAR_PX tall (the figure's height grows with the bars), so that the value
    labels after the four bars of a layout don't touch each other."""
    steps = []
    for BK in BKs:
        rows = banks.table(BK)
        traces = []
        for i, kind in enumerate(banks.ACCESSES):
            sel = [r for r in rows if r["access"] == kind]
            traces.append(go.Bar(
                y=[r["variant"] for r in sel], x=[r["per_instruction"] for r in sel], name=kind, orientation="h",
                marker_color=style.PALETTE[i], text=[f"{r['per_instruction']:g}" for r in sel], textposition="outside",
                textfont=dict(size=style.FONT - 1), cliponaxis=False, hovertext=[
                    f"{r['variant']}, {kind}<br>{r['per_instruction']:g} wavefronts per instruction (minimum "
                    f"{r['ideal'] / r['instructions']:g})<br>{r['conflicts']} extra wavefronts per k-tile of a block"
                    for r in sel], hoverinfo="text"))
        steps.append((f"BK = {BK}", traces, f"Wavefronts per instruction (model), BK = {BK}"))
    fig = style.steps_figure(steps)
    fig.update_layout(barmode="group", bargap=MODEL_BARGAP)
    fig.update_yaxes(autorange="reversed")
    bars = len(banks.ACCESSES) * len({r["variant"] for r in rows})
    # the plot area, plus title, note, menu, x title and legend as they take on a phone
    return finish(fig, steps[-1][2], "wavefronts per instruction", None,
                  "bank model (helpers.models.banks); minimum 1 for 32-bit, 4 for 128-bit accesses",
                  height=280 + round(bars * MODEL_BAR_PX / (1 - MODEL_BARGAP)))


# ------------------------------------------------------------ the counters
def ncu_command(kernel: str = KERNEL, params: dict | None = None) -> Text:
    """The exact Nsight Compute command that profiles one launch of a config, as a shell block
    (one option a line, one metric a line: a backslash-newline joins them back)."""

    spec = get(kernel)
    args = ncu.command(spec.name, spec.resolve(params), python="python")
    q = [shlex.quote(a) for a in args]
    m = args.index("--metrics")
    lines = [" ".join(q[:m]) + " \\", "    --metrics " + ",\\\n".join(args[m + 1].split(",")) + " \\"]
    k = args.index("--kernel-name")
    lines.append("    " + " ".join(q[k:args.index("python")]) + " \\")
    lines.append("    " + " ".join(q[args.index("python"):]))
    return Text("```bash\n" + "\n".join(lines) + "\n```")


def counters(rows: list[dict]) -> list[dict]:
    """One dict per profiled config: measured wavefronts per instruction next to the model's."""
    out = []
    for d in ncu.pivot(rows):
        m = banks.predicted(d["kernel"], d["params"]) or {}
        r = {"kernel": d["kernel"], "params": d["params"], "config": config_name(d["kernel"], d["params"])}
        for op in ("load", "store"):
            r[f"{op} instructions"] = d.get(f"{op} instructions")
            r[f"{op} wavefronts"] = d.get(f"{op} wavefronts")
            r[f"{op} bank conflicts"] = d.get(f"{op} bank conflicts")
            r[f"{op} per instruction"] = d.get(f"{op} wavefronts per instruction")
            r[f"{op} model"] = m.get(f"{op} wavefronts per instruction")
        out.append(r)
    return out


def no_counters(rs) -> Text | None:
    """A sentence for a page whose counters are missing (ncu could not run where they were recorded)."""
    if counters(rs.rows):
        return None
    why = next((r.get("error") for r in rs.rows if r.get("metric") == "error"), None)
    return Text(f"*No Nsight Compute counters in these data ({rs.source})*" + (f": {why}" if why else "."))


def counters_table(rs) -> Table | Text:
    """The profiled configs: measured wavefronts per instruction, the model, and ncu's conflict counts."""
    missing = no_counters(rs)
    if missing:
        return missing
    cols = ["config", "load per instruction", "load model", "load bank conflicts", "store per instruction",
            "store model", "store bank conflicts"]
    return Table(counters(rs.rows), cols, caption=f"Shared-memory wavefronts per instruction: Nsight Compute "
                                                  f"({rs.source}) and the bank model")


def counters_figure(rs) -> go.Figure:
    """Measured wavefronts per shared load / store instruction of each profiled config, with the
    model's prediction as a marker; a menu switches loads and stores."""
    missing = no_counters(rs)
    if missing:
        return placeholder(str(missing).strip("*"), "Nsight Compute counters")
    table = counters(rs.rows)
    names = [r["config"] for r in table]
    steps = []
    for i, op in enumerate(("load", "store")):
        bars = go.Bar(y=names, x=[r[f"{op} per instruction"] for r in table], orientation="h",
                      name=f"{op}s, measured", marker_color=style.PALETTE[i],
                      text=[f"{r[f'{op} per instruction']:.3g}" for r in table], textposition="inside",
                      insidetextanchor="end", textfont=dict(color=style.ink(style.PALETTE[i])),
                      hovertext=[f"{r['config']}<br>{r[f'{op} instructions']:,} {op} instructions, "
                                 f"{r[f'{op} wavefronts']:,} wavefronts<br>{r[f'{op} bank conflicts']:,} counted as bank "
                                 f"conflicts" for r in table], hoverinfo="text")
        model = go.Scatter(y=names, x=[r[f"{op} model"] for r in table], mode="markers", name=f"{op}s, bank model",
                           marker=dict(symbol="line-ns-open", size=18, color=style.CUBLAS, line=dict(width=3)))
        steps.append((f"{op}s", [bars, model],
                      f"Shared {op}s: measured (bars), model (marks)"))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(autorange="reversed")
    n = next((r["M"] for r in rs.rows if r.get("M")), None)
    return finish(fig, steps[0][2], "wavefronts per instruction", None,
                        f"{rs.source}; one launch at n = {n}" if n else rs.source, height=200 + 34 * len(names))


def broadcast(rs) -> Text:
    """What the counters say about the broadcast LDS.128 that the model charges 4 wavefronts."""
    missing = no_counters(rs)
    if missing:
        return missing
    found = []
    for d in ncu.pivot(rs.rows):
        if d["kernel"] != KERNEL or d["params"]["PAD"] not in (0, 4) or not d["params"]["SPLIT"]:
            continue            # A reads that are single, aligned LDS.128 and B reads conflict-free
        a = banks.implied_a_loads(d["kernel"], d["params"], d)
        if a:
            found.append((d, a))
    if not found:
        return Text("The counters recorded here do not include a layout whose reads are all single `LDS.128`.")
    measured = sorted({d["load wavefronts per instruction"] for d, _ in found})
    model = sorted({banks.predicted(d["kernel"], d["params"])["load wavefronts per instruction"] for d, _ in found})
    implied = sorted({round(a["A wavefronts per instruction"], 2) for _, a in found})
    a_model = found[0][1]["A model per instruction"]
    rng = lambda v: f"{v[0]:g}" if len(v) == 1 else f"{v[0]:g} to {v[-1]:g}"
    names = "; ".join(config_name(d["kernel"], d["params"])[3:] for d, _ in found)
    head = (f"In the {len(found)} profiled layouts whose reads are all single, conflict-free `LDS.128` ({names}), "
            f"Nsight Compute counts **{rng(measured)} wavefronts per load instruction**, where the model predicts "
            f"{rng(model)}. ")
    if implied[-1] < a_model:
        return Text(head + f"Half of those loads read B: each quarter warp reads 8 different float4, 128 bytes, "
                    f"and the second half of the warp repeats the addresses of the first (a thread's column is its "
                    f"index modulo 16). Suppose, as the model does, that such a read takes one wavefront per quarter "
                    f"warp, 4 in all, repeats or not. Then the A reads, in which 16 lanes read the same 16 bytes, "
                    f"took **{rng(implied)} wavefronts each**, not the model's {a_model:g}: a broadcast `LDS.128`, "
                    f"where every lane of a half warp reads one address, is served in fewer wavefronts than the "
                    f"model's floor of 4. The counters give only the total of A and B, so this split between "
                    f"them rests on that supposition about B.")
    return Text(head + f"The A reads, broadcasts of 16 lanes each, took {rng(implied)} wavefronts each: what the "
                f"model charges.")


def split_exercise(rs, BK: int = 16) -> Solution | Text:
    """Exercise: what the counters show when the thread tile is not split (SPLIT = 0 against 1)."""
    missing = no_counters(rs)
    if missing:
        return missing
    by = {(d["kernel"], d["params"]["BK"], d["params"]["SPLIT"], d["params"]["PAD"], d["params"]["SWIZZLE"]): d
          for d in ncu.pivot(rs.rows) if d["kernel"] == KERNEL}
    c, s = by.get((KERNEL, BK, 0, 0, 0)), by.get((KERNEL, BK, 1, 0, 0))
    if not (c and s):
        return Text(f"The counters of BK = {BK}, contiguous and split, are not both recorded here.")
    mc, ms = banks.predicted(KERNEL, c["params"]), banks.predicted(KERNEL, s["params"])
    tc, ts = (banks.tile_totals(**get(KERNEL).smem_layout(x["params"]))["B load"] for x in (c, s))
    b_reads = tc["instructions"]
    tiles = banks.implied_a_loads(KERNEL, c["params"], c)["tiles"]
    extra = c["load bank conflicts"] - s["load bank conflicts"]
    per_b = extra / (b_reads * tiles)
    model_extra = tc["per_instruction"] - ts["per_instruction"]
    d_meas = c["load wavefronts per instruction"] - s["load wavefronts per instruction"]
    d_model = mc["load wavefronts per instruction"] - ms["load wavefronts per instruction"]
    agree = "agrees on the difference" if abs(d_meas - d_model) < 0.01 else (
        f"predicts a difference of {d_model:g} where the counters show {d_meas:g}")
    return Solution(
        f"`l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum` rises from {s['load bank conflicts']:,} "
        f"(split) to {c['load bank conflicts']:,} (contiguous), at BK = {BK} and n = {next(r['M'] for r in rs.rows)}. "
        f"The load instructions are the same ({c['load instructions']:,}); {b_reads * tiles:,} of them read B, so the "
        f"excess is **{per_b:g} wavefronts per B read** (the model: {tc['per_instruction']:g} wavefronts instead of "
        f"{ts['per_instruction']:g}, {model_extra:g} extra). Per load "
        f"instruction the wavefronts go from {s['load wavefronts per instruction']:g} to "
        f"**{c['load wavefronts per instruction']:g}**. The model says {ms['load wavefronts per instruction']:g} and "
        f"{mc['load wavefronts per instruction']:g}: it {agree}"
        + (", and overcounts both by the broadcast A reads it charges too much for."
           if ms["load wavefronts per instruction"] > s["load wavefronts per instruction"] else "."))


# ------------------------------------------------------------ the timings
def largest_square(rows: list[dict], kernel: str | None = KERNEL) -> int:
    """The n at which configs were compared: the square size with the most configs of ``kernel``
    (of any kernel for None)."""
    sizes = Counter(r["M"] for r in rows if kernel in (None, r["kernel"]) and r["M"] == r["N"] == r["K"])
    return max(sizes, key=lambda n: (sizes[n], n))


def layout_rows(rs, n: int | None = None) -> list[dict]:
    """The kernel-08 rows at the comparison size, each with its layout's name."""
    n = n or largest_square(rs.rows)
    out = []
    for r in rs.rows:
        if r["kernel"] == KERNEL and r["M"] == r["N"] == r["K"] == n and banks.variant_name(r["params"]):
            out.append(dict(r, layout=banks.variant_name(r["params"])))
    return out


def layouts_figure(rs, n: int | None = None) -> go.Figure:
    """TFLOP/s of every layout at one size, one bar per BK, with cuBLAS of the same run."""
    rows = layout_rows(rs, n)
    n = rows[0]["M"]
    fig = go.Figure()
    names = list(VARIANTS)
    for i, BK in enumerate(sorted({r["params"]["BK"] for r in rows})):
        sel = {r["layout"]: r for r in rows if r["params"]["BK"] == BK}
        ys = [nm for nm in names if nm in sel]
        fig.add_trace(go.Bar(y=ys, x=[sel[nm]["tflops"] for nm in ys], orientation="h", name=f"BK = {BK}",
                             marker_color=style.PALETTE[i], error_x=rfig.band([sel[nm] for nm in ys]),
                             # ended two spaces before the bar's end, where the band's whisker runs
                             text=[f"{sel[nm]['tflops']:.1f}{style.WHISKER_GAP}" for nm in ys], textposition="inside",
                             insidetextanchor="end", hovertext=[rfig.hover(sel[nm]) for nm in ys], hoverinfo="text"))
    cub = sorted(r["cublas_tflops"] for r in rows)
    fig.add_vline(x=cub[len(cub) // 2], line=dict(color=style.CUBLAS, dash="dash"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"cuBLAS, same run ({cub[len(cub) // 2]:.1f})",
                             line=dict(color=style.CUBLAS, dash="dash")))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="group")
    return finish(fig, f"Shared-memory layouts at n = {n}", "TFLOP/s (20-80% band)",
                        None, rs.source, height=200 + 52 * len(names))


def ranking(rs, n: int | None = None) -> Text:
    """The recorded order of the layouts at each BK, what each store fix gains over no store fix,
    and how wide the timing bands are: all from the rows."""
    rows = layout_rows(rs, n)
    n = rows[0]["M"]
    parts = []
    widest = max(band_pct(r) for r in rows)
    for BK in sorted({r["params"]["BK"] for r in rows}):
        sel = sorted((r for r in rows if r["params"]["BK"] == BK), key=lambda r: -r["tflops"])
        order = ", ".join(f"{r['layout']} {r['tflops']:.1f}" for r in sel)
        base = next((r for r in sel if r["layout"] == NO_STORE_FIX), None)
        fixes = [r for r in sel if r["params"]["PAD"] or r["params"]["SWIZZLE"]]
        text = f"**BK = {BK}** (TFLOP/s): {order}."
        if base and fixes:
            best = fixes[0]
            gains = "; ".join(f"{r['layout']} {pct(r['tflops'], base['tflops']):+.1f}%" for r in fixes)
            text += (f" Against {NO_STORE_FIX} (B reads fixed, A store not): {gains}. The fastest store fix here is "
                     f"**{best['layout']}**")
            slower = [r["layout"] for r in fixes if r["tflops"] < base["tflops"]]
            text += f"; slower than no store fix at all: {', '.join(slower)}." if slower else "."
        parts.append(text)
    tops = {BK: max((r for r in rows if r["params"]["BK"] == BK and (r["params"]["PAD"] or r["params"]["SWIZZLE"])),
                    key=lambda r: r["tflops"])["layout"] for BK in {r["params"]["BK"] for r in rows}}
    same = len(set(tops.values())) == 1
    spec = get(KERNEL)
    everyone = sorted(rows, key=lambda r: -r["tflops"])
    default = next((i for i, r in enumerate(everyone) if r["params"] == spec.defaults()), None)
    if default is not None:
        parts.append(f"The kernel's default, {spec.label(spec.defaults())}, ranks **{default + 1} of {len(everyone)}**"
                     + (" (the fastest recorded)." if default == 0 else
                        f"; the fastest recorded is {spec.label(everyone[0]['params'])}, "
                        f"{pct(everyone[0]['tflops'], everyone[default]['tflops']):.1f}% faster."))
    close = []
    for BK in sorted({r["params"]["BK"] for r in rows}):
        sel = sorted((r for r in rows if r["params"]["BK"] == BK), key=lambda r: -r["tflops"])
        close += [f"{a['layout']} and {b['layout']} at BK = {BK}" for a, b in zip(sel, sel[1:])
                  if a["ms_p80"] >= b["ms_p20"]]          # their 20-80% time bands overlap
    noise = (f"The 20-80% bands of the times overlap for {'; '.join(close)}: their order is within this run's "
             "noise." if close else "No two neighbours in these orders have overlapping 20-80% time bands.")
    tail = (f"The widest 20-80% band of these timings is {widest:.2f}% of its median. {noise} This is one run on one "
            f"GPU ({rs.source}); a re-recording may order close layouts differently. "
            + ("The same store fix comes first at every BK here." if same else "No store fix comes first at every BK."))
    return Text(f"At n = {n}:\n\n- " + "\n- ".join(parts) + "\n\n" + tail)


def why_points(timing_rs, counter_rs, n: int | None = None) -> list[dict]:
    """Per kernel-08 layout: TFLOP/s (timing rows) and measured shared-memory wavefronts per 1000
    warp-level FFMA (the counters, at their own n)."""
    prof = {json_key(d["params"]): d for d in ncu.pivot(counter_rs.rows) if d["kernel"] == KERNEL}
    size = next((r["M"] for r in counter_rs.rows if r.get("M")), None)
    out = []
    for r in layout_rows(timing_rs, n):
        d = prof.get(json_key(r["params"]))
        if not d or size is None:
            continue
        ffma = banks.warp_ffma(size, size, size)
        out.append({"row": r, "layout": r["layout"], "BK": r["params"]["BK"], "tflops": r["tflops"],
                    "load": 1000 * d["load wavefronts"] / ffma, "store": 1000 * d["store wavefronts"] / ffma,
                    "waves": 1000 * (d["load wavefronts"] + d["store wavefronts"]) / ffma})
    return out


def json_key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


SYMBOLS = ["x", "circle", "square", "diamond", "triangle-up", "star"]   # one per layout, in VARIANTS order


def why_figure(timing_rs, counter_rs, n: int | None = None) -> go.Figure:
    """TFLOP/s against the measured shared-memory wavefronts per 1000 FFMA: one marker shape per
    layout, one colour per BK."""
    pts = why_points(timing_rs, counter_rs, n)
    if not pts:
        return placeholder("No layout has both a timing and Nsight Compute counters in these data.",
                           "Throughput against shared-memory wavefronts")
    bks = sorted({p["BK"] for p in pts})
    fig = go.Figure()
    for name, symbol in zip(VARIANTS, SYMBOLS):
        sel = [p for p in pts if p["layout"] == name]
        if not sel:
            continue
        fig.add_trace(go.Scatter(
            x=[p["waves"] for p in sel], y=[p["tflops"] for p in sel], mode="markers", name=name,
            marker=dict(size=12, symbol=symbol, color=[style.PALETTE[bks.index(p["BK"])] for p in sel],
                        line=dict(width=1, color="#333")),
            hovertext=[f"{name}, BK = {p['BK']}<br>{p['tflops']:.2f} TFLOP/s<br>{p['load']:.0f} load + "
                       f"{p['store']:.0f} store wavefronts per 1000 FFMA" for p in sel], hoverinfo="text"))
    for i, BK in enumerate(bks):       # the colours' key
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"BK = {BK}",
                                 marker=dict(size=12, symbol="square", color=style.PALETTE[i])))
    n = pts[0]["row"]["M"]
    size = next(r["M"] for r in counter_rs.rows if r.get("M"))
    return finish(fig, "TFLOP/s against measured wavefronts", "wavefronts per 1000 FFMA",
                  f"TFLOP/s at n = {n}", f"{timing_rs.source}; wavefronts (loads and stores, per 1000 warp FFMA): "
                  f"Nsight Compute at n = {size}"
                  + ("" if counter_rs.source == timing_rs.source else f", {counter_rs.source}"), height=520)


def why(timing_rs, counter_rs, n: int | None = None) -> Text:
    """How far the measured wavefronts go in explaining the measured order, per BK."""
    pts = why_points(timing_rs, counter_rs, n)
    if not pts:
        return no_counters(counter_rs) or Text("No layout has both a timing and counters in these data.")
    out = []
    for BK in sorted({p["BK"] for p in pts}):
        sel = {p["layout"]: p for p in pts if p["BK"] == BK}
        c, s = sel.get("contiguous (as 07)"), sel.get(NO_STORE_FIX)
        fixed = [p for p in sel.values() if p["layout"] != "contiguous (as 07)"]
        parts = []
        if c and s:
            parts.append(f"splitting the thread tile removes {c['waves'] - s['waves']:.0f} of {c['waves']:.0f} "
                         f"wavefronts per 1000 FFMA ({100 * (1 - s['waves'] / c['waves']):.0f}%), and the throughput "
                         f"changes by {pct(s['tflops'], c['tflops']):+.1f}%")
        if len(fixed) > 1:
            share = max(p["store"] / p["waves"] for p in fixed)
            fast, few = max(fixed, key=lambda p: p["tflops"]), min(fixed, key=lambda p: p["waves"])
            lo, hi = min(p["tflops"] for p in fixed), max(p["tflops"] for p in fixed)
            w_lo, w_hi = min(p["waves"] for p in fixed), max(p["waves"] for p in fixed)
            why_few = " (a warp stores a tile once and reads it 2·BK times)" if not out else ""
            parts.append(f"stores are at most {100 * share:.0f}% of the wavefronts of the split layouts{why_few}, "
                         f"which range over {pct(w_hi, w_lo):.0f}% in wavefronts and {pct(hi, lo):.1f}% in throughput")
            if fast["waves"] <= 1.005 * few["waves"]:
                parts.append(f"the fastest of them, {fast['layout']}, has as few wavefronts as any")
            else:
                parts.append(f"the fastest of them, {fast['layout']}, is not the one with the fewest wavefronts "
                             f"({few['layout']}: {few['waves']:.0f} against {fast['waves']:.0f}), so among these "
                             "layouts the wavefronts do not decide the order: the other costs of each layout (the "
                             "narrower reads of PAD = 1 and 2, the swizzle's address arithmetic, how the compiler "
                             "schedules each loop) weigh as much")
        out.append(f"**BK = {BK}**: " + "; ".join(parts) + ".")
    return Text("Measured:\n\n- " + "\n- ".join(out))


def split_line(timing_rs, counter_rs, BK: int = 16, n: int | None = None) -> Text:
    """One sentence: what splitting the thread tile does to the measured wavefronts and the throughput."""
    sel = {p["layout"]: p for p in why_points(timing_rs, counter_rs, n) if p["BK"] == BK}
    c, s = sel.get("contiguous (as 07)"), sel.get(NO_STORE_FIX)
    if not (c and s):
        return no_counters(counter_rs) or Text("These data lack the contiguous or the split layout.")
    return Text(f"At BK = {BK}, splitting the thread tile removes **{100 * (1 - s['waves'] / c['waves']):.0f}%** of "
                f"the measured wavefronts per FFMA, and the throughput rises by **{pct(s['tflops'], c['tflops']):.0f}%**.")


def store_fix_line(timing_rs, BK: int = 16, layout: str = "split + swizzle", n: int | None = None) -> Text:
    """One sentence: what a store fix adds over the split layout with the store as it was."""
    rows = {r["layout"]: r for r in layout_rows(timing_rs, n) if r["params"]["BK"] == BK}
    if NO_STORE_FIX not in rows or layout not in rows:
        return Text(f"*This run has no timing of both layouts at BK = {BK}.*")
    s, f = rows[NO_STORE_FIX], rows[layout]
    return Text(f"At BK = {BK}, removing the store conflict with the swizzle changes the throughput by "
                f"**{pct(f['tflops'], s['tflops']):+.1f}%** over the split layout alone.")


# ------------------------------------------------------------ the roofline
def roofline_configs(rows: list[dict], device: Device, source: str, title: str = "Configs on the roofline",
                     n: int | None = None) -> go.Figure:
    """Each recorded config of a kernel at n x n x n on the roofline of ``device``: a slider (or a
    menu, for few) moves through them; the chosen one is marked, the others stay grey.

    Intensity is the model's (:func:`helpers.models.roofline.intensity`: the block tile sets the
    global traffic), TFLOP/s the measurement's.
    """
    n = n or largest_square(rows, None)
    sel = sorted((r for r in rows if r["M"] == r["N"] == r["K"] == n),
                 key=lambda r: (intensity(r["kernel"], r["params"], n, n, n), r["tflops"]))
    pts = [dict(r=r, ai=intensity(r["kernel"], r["params"], n, n, n)) for r in sel]
    lo = min(p["ai"] for p in pts + [dict(ai=device.ridge)]) / 4
    hi = max(p["ai"] for p in pts + [dict(ai=device.ridge)]) * 4
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    roof = dict(x=xs, y=[device.attainable(x) for x in xs], mode="lines", line=dict(color=style.CUBLAS),
                name=f"roof: {device.bandwidth_tbs:.2f} TB/s, {device.fp32_tflops:.1f} TFLOP/s FP32", hoverinfo="skip")
    steps = []
    several = len({q["r"]["kernel"] for q in pts}) > 1
    for p in pts:
        r = p["r"]
        label = (f"{short_name(r['kernel'])}, " if several else "") + rfig.config_label(r)
        others = go.Scatter(x=[q["ai"] for q in pts], y=[q["r"]["tflops"] for q in pts], mode="markers",
                            marker=dict(size=8, color="#bbbbbb"), name="the other configs",
                            hovertext=[f"{rfig.config_label(q['r'])}: {q['ai']:.1f} FLOP/byte, "
                                       f"{q['r']['tflops']:.1f} TFLOP/s" for q in pts], hoverinfo="text")
        chosen = go.Scatter(x=[p["ai"]], y=[r["tflops"]], mode="markers", name=label,
                            marker=dict(size=14, color=style.colour(r["kernel"]), line=dict(width=1, color="#000")),
                            hovertext=rfig.hover(r), hoverinfo="text")
        cub = go.Scatter(x=[p["ai"]], y=[r["cublas_tflops"]], mode="markers", name="cuBLAS, same run",
                         marker=dict(symbol="line-ew-open", size=22, color=style.CUBLAS, line=dict(width=3)))
        steps.append((label, [go.Scatter(**roof), others, chosen, cub],
                      f"{title}: {r['tflops']:.1f} TFLOP/s at {p['ai']:.1f} FLOP/byte (roof "
                      f"{device.attainable(p['ai']):.0f} TFLOP/s)"))
    fig = quiet_slider(style.steps_figure(steps, active=len(steps) - 1, prefix="config: "))
    style.log_axis(fig, "x", [lo, hi], f"FLOP per byte (n = {n})")
    y_span = [min(p["r"]["tflops"] for p in pts) / 2, device.fp32_tflops * 1.3]
    style.log_axis(fig, "y", y_span, "TFLOP/s")
    fig.update_yaxes(range=[math.log10(v) for v in y_span])     # the span the ticks were chosen for
    return finish(fig, steps[-1][2], source=f"{source}; roofs of {device.label} ({device.source}); x: arithmetic "
                  "intensity of the block tile (FLOP per byte of global traffic, model)", height=540)


def same_roof(rows: list[dict], device: Device, n: int | None = None) -> Text:
    """A sentence for kernels whose configs share one block tile: the same intensity, the same roof."""
    n = n or largest_square(rows, None)
    sel = [r for r in rows if r["M"] == r["N"] == r["K"] == n]
    ais = sorted({round(intensity(r["kernel"], r["params"], n, n, n), 1) for r in sel})
    lo, hi = min(r["tflops"] for r in sel), max(r["tflops"] for r in sel)
    if len(ais) == 1:
        roof = device.attainable(ais[0])
        where = ("above the ridge point, so the roof is the FP32 peak" if ais[0] >= device.ridge
                 else "below the ridge point: the roof is memory bandwidth")
        return Text(f"All {len(sel)} configs at n = {n} move the same global bytes per FLOP: one block tile, "
                    f"**{ais[0]:g} FLOP/byte**, {where} ({roof:.1f} TFLOP/s on the {device.label}, whose ridge is at "
                    f"{device.ridge:.1f}). The roofline puts them all under the same roof, yet they range from "
                    f"{lo:.1f} to {hi:.1f} TFLOP/s: what separates them happens inside the SM.")
    return Text(f"The configs at n = {n} range from {ais[0]:g} to {ais[-1]:g} FLOP/byte and from {lo:.1f} to "
                f"{hi:.1f} TFLOP/s on the {device.label} (ridge at {device.ridge:.1f} FLOP/byte).")


def step_text(prev: tuple, this: tuple, prev_name: str, this_name: str) -> Text:
    """One sentence comparing this chapter's kernel with the previous one: both from ``helpers.step``,
    each named with its config, each with its 20-80% band."""
    (p, _), (t, source) = prev, this
    same = p["M"] == t["M"]
    name = lambda r, what: f"{what} ({rfig.config_label(r)})"
    return Text(f"At n = {t['M']}: {name(t, this_name)} **{t['tflops']:.1f} TFLOP/s** "
                f"({rfig.percent_of_cublas(t):.0f}% of cuBLAS in the same run), {name(p, prev_name)} "
                f"{p['tflops']:.1f} ({rfig.percent_of_cublas(p):.0f}%): **{pct(t['tflops'], p['tflops']):+.1f}%**. "
                f"The 20-80% bands of the two timings are {band_pct(t):.1f}% and {band_pct(p):.1f}% wide"
                + (f" ({source})." if same else f" ({source}; the previous step at n = {p['M']})."))


__all__ = ["Solution", "placeholder", "fit", "wrap", "titles", "quiet_slider", "short_name", "ncu_command", "cases", "lanes", "heatmap", "padding", "read_widths", "swizzle", "model_figure", "counters",
           "counters_table", "counters_figure", "broadcast", "split_exercise", "layouts_figure", "ranking",
           "why_figure", "why", "split_line", "store_fix_line", "roofline_configs", "same_roof", "step_text"]
