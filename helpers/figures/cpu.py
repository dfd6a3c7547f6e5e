"""Figures, tables and sentences of the chapter "On the CPU" (book/01_cpu.md) and its deep dive.

Everything here reads one :class:`helpers.measure.cpu.CpuRun`: the machine, the compiled
loops and the timings of one run, recorded on a named machine (the online book) or
measured on this one (live). Nothing about a machine is assumed. Where the run is None
(the ``cpu`` source is not recorded yet), every function returns a note saying so.
"""
from __future__ import annotations

import inspect
import math
import textwrap

import plotly.graph_objects as go
from IPython.display import Markdown
from plotly.subplots import make_subplots

from ..measure import cpu as data
from ..measure.cpu import CpuRun
from ..models import cpu as model
from ..runtime import cpu
from ..tables import Table, Text
from . import style

# one line each: Plotly turns them (30 or 90 degrees) only where they would run into each other (a phone)
SHORT = {"ikj (reordered)": "ikj reordered", "ikj, k unrolled x4": "ikj unrolled", "4x4 register block":
         "4x4 register block", "tiled, packed B": "tiled packed B", "tiled, parallel": "tiled parallel"}
VERDICT = {"faster": "it is faster", "slower": "it is slower", "no clear difference": "there is no clear difference"}
FLOATS = {4: "xmm", 8: "ymm", 16: "zmm"}


def colour(name: str) -> str:
    if name == cpu.NUMPY:
        return style.CUBLAS
    return style.PALETTE[list(cpu.VARIANTS).index(name) % len(style.PALETTE)]


def not_recorded() -> Text:
    """The note shown in place of every number while the ``cpu`` source is not recorded."""
    return Text("**Not recorded yet.** This page shows measurements of a named machine, and none have been "
                f"recorded for it: `{data.RECORD_COMMAND}` measures them (on the machine that records the GPU "
                "data) and stores them in `book/data`. To measure your own CPU instead, run the notebook with "
                "`SGEMM_BOOK_MODE=live`.")


# the figures and sentences of one recorded run; a short note where nothing is recorded yet (the
# page's first cell, :func:`machine`, gives the whole :func:`not_recorded` note)
needs_run = style.needs_run(data.RECORD_COMMAND)
show = style.show_or_note


def code(name: str, start: str | None = None, stop: str | None = None) -> Markdown:
    """A function of :mod:`helpers.runtime.cpu` as a Python code block (the code that runs); with
    ``start`` and ``stop``, only the lines from the first that contains ``start`` to the first
    after it that contains ``stop`` (an excerpt, dedented)."""
    fn = getattr(cpu, name)
    fn = getattr(fn, "py_func", fn)               # a Numba function: its Python source
    text = inspect.getsource(fn).rstrip()
    title = f"`helpers/runtime/cpu.py`: `{name}`"
    if start is not None:
        lines = text.splitlines()
        first = next(i for i, line in enumerate(lines) if start in line)
        last = next(i for i in range(first, len(lines)) if stop is None or stop in lines[i])
        text = textwrap.dedent("\n".join(lines[first:last + 1]))
        title += " (excerpt)"
    return Markdown(f"{title}\n\n```python\n{text}\n```")


# ------------------------------------------------------------------ the machine
def isa(flags: dict) -> str:
    """The widest vector instruction set of the flags, in words."""
    if flags.get("avx512f"):
        return "AVX-512" + (" and AVX-512VL" if flags.get("avx512vl") else "")
    if flags.get("avx2"):
        return "AVX2" + (" and FMA" if flags.get("fma") else "")
    return "no AVX2" if flags else "an instruction set it did not report"


def machine(run: CpuRun | None) -> Text:
    """Where the numbers come from: the CPU, its vector instructions, caches and software
    (or, with no run, the note that none is recorded yet and how to record it)."""
    if run is None:
        return not_recorded()
    m, c, p = run.machine, run.caches, run.plan
    when = "measured on this machine as the page ran" if run.live else f"recorded on {run.date}"
    levels = [k for k in sorted(c) if k.startswith("L") and k[1:].isdigit()]
    caches = (", ".join(f"{model.kib(c[k])} {k}" for k in levels) + f" (lines of {c.get('line', '?')} bytes)"
              if levels else "no cache sizes")
    return Text(f"The numbers on this page were {when} on **{m['cpu']}**, {run.cores} cores, {isa(run.flags)}; "
                f"its system reports {caches}. NumPy {m['numpy']} calls {m['blas']}; the kernels are compiled by "
                f"Numba {m['numba']}. From the caches, the tiled kernels of step 4 take blocks of KC = {p['KC']} "
                f"by NC = {p['NC']}.")


@needs_run
def agreement(run: CpuRun) -> Table:
    """Each variant against ``ijk`` and a float64 reference on a 37 x 67 x 45 product."""
    return Table(run.agreement, caption="C = A @ B with A 37 x 45, B 45 x 67 (sizes that are multiples of nothing)")


# ------------------------------------------------------------------ the model
@needs_run
def traffic_table(run: CpuRun, variants, n: int) -> Table:
    """The traffic model of some variants at n: loads, stores, bytes, where B's reuse lives."""
    c = run.caches
    rows = []
    for v in variants:
        t = model.traffic(v, n, run.plan, c.get("line", 64))
        rows.append({"variant": v, "loads per multiply-add": t["loads_per_fma"],
                     "stores per multiply-add": t["stores_per_fma"], "bytes per FLOP": t["bytes_per_flop"],
                     "multiply-adds per value of B": t["reuse_b"],
                     "B used again after": model.kib(t["reuse_bytes"]),
                     "so B comes from": model.level(t["reuse_bytes"], c) if len(c) > 1 else "?"})
    return Table(rows, caption=f"What the inner loop moves, n = {n} (a model: counted from the code)")


# ------------------------------------------------------------------ the loop
def _loop_sentence(t: dict, flags: dict) -> str:
    """One compiled loop's counts in words; the register count held against the CPU's instruction sets."""
    width = t["floats_per_vector"]
    kind = FLOATS.get(width, "vector")
    spills = (f"**{t['spill_loads']} loads and {t['spill_stores']} stores go to the stack** (`%rsp`): values the "
              "compiler could not keep in a register (spills)" if t["spill_loads"] or t["spill_stores"]
              else "nothing goes to the stack (no spills)")
    have = data.vector_registers(flags).get(kind, 16)
    if kind == "zmm":
        names = f"{t['registers']} vector registers, of the 32 zmm registers AVX-512 has"
    elif t["registers"] <= 16 or not flags:
        names = f"{t['registers']} vector registers"
    else:
        names = (f"{t['registers']} vector registers, more than the 16 of AVX2: {kind}16 to {kind}31 exist only "
                 f"with AVX-512VL, which this CPU has ({have} {kind} registers)")
    return (f"one iteration does {t['fmas']} fused multiply-adds on {kind} registers ({width} floats each), with "
            f"{t['vector_loads']} vector loads and {t['vector_stores']} vector stores, naming {names}; {spills}")


@needs_run
def registers_text(run: CpuRun) -> Text:
    """Which register tile the tiled kernels use on the run's machine, and why (from its loop and flags)."""
    first, used = run.loops[0], run.loops[-1]
    kind = FLOATS.get(first["floats_per_vector"], "vector")
    have = data.vector_registers(run.flags).get(kind, 16)
    fits = not (first["spill_loads"] or first["spill_stores"])
    text = (f"On this machine the compiler used {kind} registers ({first['floats_per_vector']} floats each); with "
            f"{isa(run.flags)} the CPU has {have} of them, and the {first['MR']} × {first['NR']} loop names "
            f"{first['registers']}: ")
    if fits:
        return Text(text + "it fits with no spill, so the tiled kernels use that tile.")
    return Text(text + f"it spills values to the stack, so the tiled kernels use the {used['MR']} × {used['NR']} "
                "tile instead.")


@needs_run
def loop(run: CpuRun) -> Markdown:
    """The micro-kernel's compiled k loop on the run's machine, and what it does, counted."""
    parts = []
    for t in run.loops:
        parts.append(f"**The {t['MR']} × {t['NR']} tile** ({t['MR'] * t['NR']} sums): "
                     f"{_loop_sentence(t, run.flags)}.\n\n```text\n{t['asm']}\n```")
    first, used = run.loops[0], run.loops[-1]
    if len(run.loops) > 1:
        parts.append(f"The {first['MR']} × {first['NR']} tile does not fit this machine's vector registers, so "
                     f"the tiled kernels here use the {used['MR']} × {used['NR']} tile.")
    else:
        parts.append(f"It fits, so the tiled kernels here use the {used['MR']} × {used['NR']} tile.")
    return Markdown("\n\n".join(parts))


# ------------------------------------------------------------------ timings
def _source(run: CpuRun) -> str:
    return run.source


@needs_run
def figure(run: CpuRun) -> go.Figure:
    """GFLOP/s against n with the 20-80% band; a menu shows all variants or one step
    (a variant and the one before it), NumPy dashed in each."""
    rows = run.rows
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
    style.log_axis(fig, "y", [r.get("gflops_p20", r["gflops"]) for r in rows] + [r.get("gflops_p80", r["gflops"]) for r in rows],
                   cover=True)
    return style.finish(fig, "Each step against the last", "n (M = N = K)", "GFLOP/s (bars: 20-80%)",
                        _source(run), height=560)


@needs_run
def speeds_table(run: CpuRun) -> Table:
    """GFLOP/s of every variant at every n, and the fastest of ours at each n."""
    rows = run.rows
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
    return Table(out, caption=f"GFLOP/s, median of repeated calls (– : not timed at that n); {run.source}")


def _steps(run: CpuRun) -> list[dict]:
    return model.steps(run.rows, run.plan, run.caches, run.all_facts())


@needs_run
@needs_run
def steps_text(run: CpuRun) -> Text:
    """The steps in words, one line each: where each gained, and, where it did not, the reason
    (once per reason, with the sizes it applies to)."""
    s = _steps(run)
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
    return Text("\n".join(lines))


@needs_run
def gains_text(run: CpuRun) -> Text:
    """Two sentences for the chapter: the whole climb at the largest n every variant ran, and which
    steps did not gain somewhere (the deep dive gives each reason)."""
    s, n = _steps(run), common_n(run.rows)
    at = {r["name"]: r for r in run.rows if r["n"] == n}
    first, last = at["ijk"], at[cpu.BEST]
    text = (f"At n = {n}, the largest size every variant ran, the steps take the loop from "
            f"{first['gflops']:.3g} to {last['gflops']:.3g} GFLOP/s, {last['gflops'] / first['gflops']:.0f}× faster "
            "with the same arithmetic.")
    missed = list(dict.fromkeys(r["step"] for r in s if r["verdict"] != "faster"))
    if missed:
        text += (" Not every step gains at every size: " + ", ".join(f"**{m}**" for m in missed)
                 + (" does" if len(missed) == 1 else " do") + " not everywhere, and the deep dive says why at each n.")
    else:
        text += " Every step is faster than the one before at every size timed."
    return Text(text)


def common_n(rows: list[dict]) -> int:
    """The largest n at which every variant was timed."""
    names = {r["name"] for r in rows}
    return max(n for n in {r["n"] for r in rows} if {r["name"] for r in rows if r["n"] == n} == names)


@needs_run
def traffic_figure(run: CpuRun, n: int | None = None) -> go.Figure:
    """Model bytes of B per multiply-add (and where they come from) above the measured GFLOP/s at n
    (default: the largest n every variant ran)."""
    rows, c = run.rows, run.caches
    n = n or common_n(rows)
    names = [v for v in cpu.VARIANTS if any(r["name"] == v and r["n"] == n for r in rows)]
    t = [model.traffic(v, n, run.plan, c.get("line", 64)) for v in names]
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
    return style.finish(fig, "Bytes of B per multiply-add, and speed", None, None, _source(run), height=640,
                        legend=False)


@needs_run
def ratio_text(run: CpuRun) -> Text:
    """Our best variant against NumPy, measured in alternating blocks; and, where the table's
    runs (each timed on its own) at the same n rank the two the other way, that they disagree."""
    r, rows = run.ratio, run.rows
    a, b = r["ours"], r["numpy"]
    text = (f"At n = {r['n']}, **{r['name']}** ran at {r['gflops']:.3g} GFLOP/s "
            f"(20-80%: {a['gflops_p20']:.3g}-{a['gflops_p80']:.3g}) and NumPy at {r['numpy_gflops']:.3g} "
            f"({b['gflops_p20']:.3g}-{b['gflops_p80']:.3g}) through {run.machine['blas']}: **{100 * r['ratio']:.0f}% "
            f"of NumPy** on {run.name}.")
    at = {x["name"]: x for x in rows if x["n"] == r["n"]}
    if r["name"] in at and cpu.NUMPY in at:
        table = at[r["name"]]["gflops"] / at[cpu.NUMPY]["gflops"]
        if (table > 1) != (r["ratio"] > 1):
            text += (f" The speeds table, which timed each of them on its own a little earlier, had "
                     f"{at[r['name']]['gflops']:.3g} against {at[cpu.NUMPY]['gflops']:.3g} "
                     f"({100 * table:.0f}%): the two runs rank them the other way round, so on this machine the "
                     "gap between them is within how much its speed moves from one run to the next.")
    return Text(text)


@needs_run
def ceiling_text(run: CpuRun) -> Text:
    """The micro-kernel's speed with its data in L1, and how close the timed variants came to it."""
    ceiling, rows, cores = run.ceiling, run.rows, run.cores
    one = ceiling.get("gflops_best", ceiling["gflops"])
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
