"""Figures, tables and sentences of the chapter "On the CPU" (book/01_cpu.md).

Everything here describes the machine that runs the page, from what it measures there:
the caches Linux reports, the compiled inner loop, the timings. Nothing is assumed.
"""
from __future__ import annotations

import inspect
import math

import plotly.graph_objects as go
from IPython.display import Markdown
from plotly.subplots import make_subplots

from ..models import cpu as model
from ..runtime import cpu
from ..tables import Table, Text
from . import style

# one line each: Plotly turns them (30 or 90 degrees) only where they would run into each other (a phone)
SHORT = {"ikj (reordered)": "ikj reordered", "ikj, k unrolled x4": "ikj unrolled", "4x4 register block":
         "4x4 register block", "tiled, packed B": "tiled packed B", "tiled, parallel": "tiled parallel"}
VERDICT = {"faster": "it is faster", "slower": "it is slower", "no clear difference": "there is no clear difference"}
REGISTER_NAMES = {4: "xmm (SSE/AVX, 4 floats)", 8: "ymm (AVX2, 8 floats)", 16: "zmm (AVX-512, 16 floats)"}


def colour(name: str) -> str:
    if name == cpu.NUMPY:
        return style.CUBLAS
    return style.PALETTE[list(cpu.VARIANTS).index(name) % len(style.PALETTE)]


# ------------------------------------------------------------------ source
def source() -> str:
    """The figures' note on where the numbers come from (two lines when the CPU's name is long)."""
    name = f"{cpu.cpu_name()}, {cpu.cores()} cores"
    return f"measured on this machine: {name}" if len(name) < 28 else f"measured on this machine:<br>{name}"


def code(name: str) -> Markdown:
    """A function of :mod:`helpers.runtime.cpu` as a Python code block (the code that runs)."""
    fn = getattr(cpu, name)
    fn = getattr(fn, "py_func", fn)               # a Numba function: its Python source
    return Markdown(f"`helpers/runtime/cpu.py`: `{name}`\n\n```python\n{inspect.getsource(fn).rstrip()}\n```")


# ------------------------------------------------------------------ the machine
def machine() -> Text:
    """The CPU, its cores and caches, and the block sizes the tiled kernels derive from them."""
    c, p = cpu.caches(), cpu.plan()
    levels = [k for k in sorted(c) if k.startswith("L") and k[1:].isdigit()]
    if levels:
        cache_text = (", ".join(f"a {model.kib(c[k])} {k}" for k in levels)
                      + f" data cache, in lines of {c.get('line', '?')} bytes")
        blocks = (f"From these, the tiled kernels of step 4 take blocks of KC = {p['KC']} values of k (one tile's "
                  f"{p['MR']} + {p['NR']} panels of KC floats, {model.kib(p['panels_bytes'])}, fill at most half "
                  f"the L1) by NC = {p['NC']} columns (a packed block of {model.kib(p['block_bytes'])} fills at "
                  "most half the L2).")
    else:
        cache_text = "no cache sizes (this system does not report them)"
        blocks = (f"With no cache sizes to go by, the tiled kernels of step 4 use blocks of KC = {p['KC']} by "
                  f"NC = {p['NC']}, a guess.")
    return Text(f"This page runs on **{cpu.cpu_name()}** with {cpu.cores()} cores available to it. "
                f"The operating system reports {cache_text}. {blocks}")


def agreement() -> Table:
    """Each variant against ``ijk`` and a float64 reference on a 37 x 67 x 45 product."""
    return Table(cpu.agreement(), caption="C = A @ B with A 37 x 45, B 45 x 67 (sizes that are multiples of nothing)")


# ------------------------------------------------------------------ the model
def traffic_table(variants, n: int) -> Table:
    """The traffic model of some variants at n: loads, stores, bytes, where B's reuse lives."""
    p, c = cpu.plan(), cpu.caches()
    rows = []
    for v in variants:
        t = model.traffic(v, n, p, c.get("line", 64))
        rows.append({"variant": v, "loads per multiply-add": t["loads_per_fma"],
                     "stores per multiply-add": t["stores_per_fma"], "bytes per FLOP": t["bytes_per_flop"],
                     "multiply-adds per value of B": t["reuse_b"],
                     "B used again after": model.kib(t["reuse_bytes"]),
                     "so B comes from": model.level(t["reuse_bytes"], c) if len(c) > 1 else "?"})
    return Table(rows, caption=f"What the inner loop moves, n = {n} (a model: counted from the code)")


# ------------------------------------------------------------------ the loop
def _loop_sentence(t: dict) -> str:
    width = REGISTER_NAMES.get(t["floats_per_vector"], f"{t['floats_per_vector']} floats")
    spills = (f"**{t['spill_loads']} loads and {t['spill_stores']} stores go to the stack** (`%rsp`): values the "
              "compiler could not keep in a register (spills)" if t["spill_loads"] or t["spill_stores"]
              else "nothing goes to the stack (no spills)")
    return (f"one iteration does {t['fmas']} fused multiply-adds on {width} registers, with {t['vector_loads']} "
            f"vector loads and {t['vector_stores']} vector stores, naming {t['registers']} vector registers; "
            f"{spills}")


def loop() -> Markdown:
    """The micro-kernel's compiled k loop on this machine, and what it does, counted."""
    tile = cpu.micro_tile()
    parts = []
    for t in tile["tried"]:
        shape = f"{t['MR']} × {t['NR']}"
        parts.append(f"**The {shape} tile** ({t['MR'] * t['NR']} sums): {_loop_sentence(t)}.\n\n"
                     f"```text\n{cpu.micro_kernel_loop(t['NR'])}\n```")
    if len(tile["tried"]) > 1:
        parts.append(f"The {tile['tried'][0]['MR']} × {tile['tried'][0]['NR']} tile does not fit this machine's "
                     f"vector registers, so the tiled kernels here use the {tile['MR']} × {tile['NR']} tile.")
    else:
        parts.append(f"It fits, so the tiled kernels here use the {tile['MR']} × {tile['NR']} tile.")
    return Markdown("\n\n".join(parts))


# ------------------------------------------------------------------ timings
def figure(rows: list[dict]) -> go.Figure:
    """GFLOP/s against n with the 20-80% band; a menu shows all variants or one step
    (a variant and the one before it), NumPy dashed in each."""
    names = list(dict.fromkeys(r["name"] for r in rows))

    def trace(name):
        sel = sorted((r for r in rows if r["name"] == name), key=lambda r: r["n"])
        return go.Scatter(
            x=[r["n"] for r in sel], y=[r["gflops"] for r in sel], name=name, mode="lines+markers",
            line=dict(color=colour(name), dash="dash" if name == cpu.NUMPY else None),
            error_y=dict(type="data", symmetric=False, thickness=1, width=3,
                         array=[r.get("gflops_p80", r["gflops"]) - r["gflops"] for r in sel],
                         arrayminus=[r["gflops"] - r.get("gflops_p20", r["gflops"]) for r in sel]),
            hovertext=[f"{name}<br>n = {r['n']}: {r['gflops']:.2f} GFLOP/s "
                       f"[{r.get('gflops_p20', r['gflops']):.2f}, {r.get('gflops_p80', r['gflops']):.2f}], "
                       f"{1e3 * r['s']:.2f} ms" for r in sel], hoverinfo="text")

    steps = [("all variants", [trace(n) for n in names])]
    for prev, this in model.STEPS:
        if prev in names and this in names:
            shown = [prev, this] + ([cpu.NUMPY] if cpu.NUMPY in names else [])
            steps.append((f"step {len(steps)}: {this}", [trace(n) for n in shown]))
    fig = style.steps_figure(steps, active=0)
    style.log_axis(fig, "x", [r["n"] for r in rows], exact=True)
    style.log_axis(fig, "y", [r.get("gflops_p20", r["gflops"]) for r in rows] + [r.get("gflops_p80", r["gflops"]) for r in rows])
    return style.finish(fig, "Each step against the last", "n (M = N = K)", "GFLOP/s (bars: 20-80%)",
                        source(), height=560)


def speeds_table(rows: list[dict]) -> Table:
    """GFLOP/s of every variant at every n, and the fastest of ours at each n."""
    names = list(dict.fromkeys(r["name"] for r in rows))
    by = {(r["name"], r["n"]): r for r in rows}
    best = model.fastest(rows)
    out = []
    for n in sorted({r["n"] for r in rows}):
        line = {"n": n}
        for name in names:
            r = by.get((name, n))
            line[name] = r["gflops"] if r else None
        line["fastest of ours"] = best[n]["name"] if n in best else None
        out.append(line)
    return Table(out, caption="GFLOP/s, median of repeated calls (– : not timed at that n)")


def steps_table(rows: list[dict], facts: dict | None = None) -> Table:
    """Each step against the one before at each n: the speeds, the ratio, and why where it did not gain."""
    s = model.steps(rows, cpu.plan(), cpu.caches(), facts or {})
    return Table([{"step": r["step"], "n": r["n"], "before": r["previous GFLOP/s"], "after": r["GFLOP/s"],
                   "ratio": r["ratio"], "verdict": r["verdict"], "why (where it did not gain)": r["why"]} for r in s],
                 caption="Each step against the one before it, GFLOP/s (verdict from the 20-80% bands)")


def steps_text(rows: list[dict], facts: dict | None = None) -> Text:
    """The steps in words: which gained everywhere, and where and why one did not."""
    s = model.steps(rows, cpu.plan(), cpu.caches(), facts or {})
    lines = []
    for _, name in model.STEPS:
        mine = [r for r in s if r["step"] == name]
        if not mine:
            continue
        lo, hi = min(r["ratio"] for r in mine), max(r["ratio"] for r in mine)
        bad = [r for r in mine if r["verdict"] != "faster"]
        if not bad:
            lines.append(f"- **{name}** is faster than {mine[0]['previous']} at every n timed "
                         f"({lo:.2g}× to {hi:.2g}×).")
            continue
        good = [r["n"] for r in mine if r["verdict"] == "faster"]
        lead = (f"- **{name}** is faster than {mine[0]['previous']} at n = {', '.join(map(str, good))}, but not "
                "everywhere:" if good else f"- **{name}** is not faster than {mine[0]['previous']} at any n timed:")
        groups: dict = {}
        for r in bad:
            groups.setdefault((r["verdict"], r["why"]), []).append(r)
        subs = [f"  - at n = {', '.join(str(r['n']) for r in rs)} {VERDICT[verdict]} ("
                + "; ".join(f"{r['previous GFLOP/s']:.3g} → {r['GFLOP/s']:.3g}" for r in rs)
                + f" GFLOP/s): {why}." for (verdict, why), rs in groups.items()]
        lines.append("\n".join([lead] + subs))
    if s:
        top = max(s, key=lambda r: r["ratio"])
        lines.append(f"\nThe largest single gain: **{top['step']}** over {top['previous']}, {top['ratio']:.3g}× at "
                     f"n = {top['n']}.")
    return Text("\n".join(lines))


def common_n(rows: list[dict]) -> int:
    """The largest n at which every variant was timed."""
    names = {r["name"] for r in rows}
    return max(n for n in {r["n"] for r in rows} if {r["name"] for r in rows if r["n"] == n} == names)


def traffic_figure(rows: list[dict], n: int | None = None) -> go.Figure:
    """Model bytes of B per multiply-add (and where they come from) above the measured GFLOP/s at n
    (default: the largest n every variant ran)."""
    p, c = cpu.plan(), cpu.caches()
    n = n or common_n(rows)
    names = [v for v in cpu.VARIANTS if any(r["name"] == v and r["n"] == n for r in rows)]
    t = [model.traffic(v, n, p, c.get("line", 64)) for v in names]
    speed = [next(r for r in rows if r["name"] == v and r["n"] == n) for v in names]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=("model: bytes of B per multiply-add", f"measured at n = {n}"))
    fig.add_trace(go.Bar(x=names, y=[x["b_bytes_per_fma"] for x in t], marker_color=[colour(v) for v in names],
                         text=[f"{x['b_bytes_per_fma']:.2g} B, {model.level(x['reuse_bytes'], c)}" for x in t],
                         textposition="outside", cliponaxis=False, name="model"), 1, 1)
    fig.add_trace(go.Bar(x=names, y=[r["gflops"] for r in speed], marker_color=[colour(v) for v in names],
                         text=[f"{r['gflops']:.3g}" for r in speed], textposition="outside", cliponaxis=False,
                         name="measured"), 2, 1)
    for row, values, title in ((1, [x["b_bytes_per_fma"] for x in t], "bytes"),
                               (2, [r["gflops"] for r in speed], "GFLOP/s")):
        ticks = style.log_ticks(min(values) / 1.5, max(values) * 3)
        fig.update_yaxes(type="log", row=row, col=1, title=title, tickvals=ticks,
                         ticktext=[style.tick_text(v) for v in ticks], 
                         range=[math.log10(min(values) / 1.5), math.log10(max(values) * 3)])
    fig.update_xaxes(tickvals=names, ticktext=[SHORT.get(v, v) for v in names])   # tickangle: Plotly's auto
    fig = style.finish(fig, "Bytes of B per multiply-add, and speed", None, None, source(), height=640,
                       legend=False)
    return fig


def ratio_text(r: dict, rows: list[dict] = ()) -> Text:
    """Our best variant against NumPy, measured in alternating blocks; and, where the table's
    runs (each timed on its own) at the same n rank the two the other way, that they disagree."""
    a, b = r["ours"], r["numpy"]
    text = (f"At n = {r['n']}, **{r['name']}** ran at {r['gflops']:.3g} GFLOP/s "
            f"(20-80%: {a['gflops_p20']:.3g}-{a['gflops_p80']:.3g}) and NumPy at {r['numpy_gflops']:.3g} "
            f"({b['gflops_p20']:.3g}-{b['gflops_p80']:.3g}) through {cpu.blas_name()}: **{100 * r['ratio']:.0f}% "
            f"of NumPy** on {cpu.cpu_name()} with {cpu.cores()} cores.")
    at = {x["name"]: x for x in rows if x["n"] == r["n"]}
    if r["name"] in at and cpu.NUMPY in at:
        table = at[r["name"]]["gflops"] / at[cpu.NUMPY]["gflops"]
        if (table > 1) != (r["ratio"] > 1):
            text += (f" The table above, which timed each of them on its own a little earlier, had "
                     f"{at[r['name']]['gflops']:.3g} against {at[cpu.NUMPY]['gflops']:.3g} "
                     f"({100 * table:.0f}%): the two runs rank them the other way round, so on this machine the "
                     "gap between them is within how much its speed moves from one run to the next.")
    return Text(text)


def ceiling_text(ceiling: dict, rows: list[dict]) -> Text:
    """The micro-kernel's speed with its data in L1, and how close the timed variants came to it."""
    one, cores = ceiling.get("gflops_best", ceiling["gflops"]), cpu.cores()
    n = max(r["n"] for r in rows)
    at = {r["name"]: r for r in rows if r["n"] == n}
    parts = [f"With its data in L1, the {ceiling['MR']} × {ceiling['NR']} loop runs at **{one:.3g} GFLOP/s on one "
             f"core** (the fastest of {ceiling.get('calls', '?')} calls; median {ceiling['gflops']:.3g}, 20-80% "
             f"{ceiling['gflops_p20']:.3g}-{ceiling['gflops_p80']:.3g}), so at most {cores * one:.3g} on the "
             f"{cores} cores."]
    for name, limit, what in (("tiled, packed B", one, "one core's ceiling"),
                              ("tiled, parallel", cores * one, f"the {cores} cores' ceiling"),
                              (cpu.NUMPY, cores * one, f"the {cores} cores' ceiling of our loop")):
        if name in at:
            parts.append(f"At n = {n}, {name} reached {at[name]['gflops']:.3g} GFLOP/s, "
                         f"{100 * at[name]['gflops'] / limit:.0f}% of {what}.")
    return Text(" ".join(parts))
