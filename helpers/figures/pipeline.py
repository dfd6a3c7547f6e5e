"""Figures, tables and computed sentences of the chapter "Double buffering" (book/09_double_buffering.md).

The machine-code models are :mod:`helpers.models.pipeline`; the timings are the chapter's
sweep (data source ``double_buffering``: the two-stage kernel, its racy twin and the
cp.async pipeline); the race evidence is compute-sanitizer's (data source ``sanitize``).
"""
from __future__ import annotations

import hashlib
import re

import plotly.graph_objects as go

from .. import hardware
from ..hardware import Device
from ..measure.sanitize import summary_rows
from ..models import pipeline
from ..models.occupancy import of_config
from ..runtime.specs import get
from ..tables import Table, Text
from . import results as rfig
from . import style
from .banks import Solution, finish, pct, roofline_configs, same_roof, step_text
from ..runtime import offline, sass
from ..runtime.source import _BEGIN as _REGION_BEGIN, _END as _REGION_END
from ..runtime.spec import inline_includes, read_worktree
from ..settings import KERNEL_DIR
import numpy as np
from ..hardware import occupancy
from .banks import largest_square

TWO_STAGE, RACY, ASYNC = "double_buffering", "double_buffering_racy", "cp_async"
COMPILED = "Solution (computed from the offline compile and the device model)"
__all__ = ["Solution", "roofline_configs", "same_roof", "step_text", "load_to_use_figure", "pipeline_diagram",
           "stages_figure", "registers", "register_roles", "cover", "race_runs", "race_report", "race_lines",
           "sanitizer_table", "barriers", "fix_cost", "published_table", "braces_text", "smem", "versus",
           "largest_square_rows", "load_to_use_table", "fix_diff", "correctness", "small_grid", "in_flight",
           "smem_exercise", "mix", "mix_text"]


# ------------------------------------------------------------ machine code
def load_to_use_figure(configs: list[tuple[str, str, dict]], device: Device | None = None,
                       title: str = "Arithmetic between a global load and its use") -> go.Figure:
    """Horizontal bars: FFMAs a warp issues between a 16-byte global load and the first use of its data."""
    names, values, per, colours = [], [], [], []
    for label, kernel, params in configs:
        r = pipeline.load_to_use(kernel, params, device)
        names.append(label)
        values.append(r["min"])
        per.append(r["per_iteration"])
        colours.append(style.colour(get(kernel).name))
    fig = go.Figure(go.Bar(y=names, x=values, orientation="h", marker_color=colours, cliponaxis=False,
                           # a label outside its bar two spaces off the axis, clear of the bar's name
                           text=[("" if v > 0.5 * max(values) else style.WHISKER_GAP)
                                 + (f"{v:,} ({v / p:.2g} tile{'' if v == p else 's'})" if v else "none: used at once")
                                 for v, p in zip(values, per)],
                           textposition=["inside" if v > 0.5 * max(values) else "outside" for v in values],
                           insidetextanchor="end", textfont=dict(size=style.FONT),
                           hovertext=[f"{n}: {v:,} FFMA between a 16-byte load and its first use; "
                                      f"{p:,} FFMA per loop iteration" for n, v, p in zip(names, values, per)],
                           hoverinfo="text"))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=style.FONT))
    fig.update_xaxes(range=[0, max(values + [1]) * 1.5])
    arch = device.arch if device else "the reference GPU's architecture"
    return finish(fig, title, "FFMA before the use", None,
                  f"machine code (SASS) of each kernel's inner loop, compiled offline for {arch}",
                  height=290 + 60 * len(names), legend=False)


def cover(configs: list[tuple[str, str, dict]], device: Device | None = None) -> Table:
    """Per config: how much arithmetic sits between each shared-memory load (LDS.128) and its use."""
    rows = []
    for label, kernel, params in configs:
        c = pipeline.shared_load_cover(kernel, params, device)
        rows.append({"kernel": label, "LDS.128 in the loop": c["loads"], "fewest FFMA before the use": c["min"],
                     "median": c["median"], f"loads with fewer than {pipeline.SHORT} FFMA": c["short"]})
    return Table(rows, caption="FFMAs between each shared-memory load of the inner loop and the first use of its "
                               "data (SASS, compiled offline; program order)")


def cover_text(configs: list[tuple[str, str, dict]], device: Device | None = None) -> Text:
    """The cover table in words, from the same counts: how many loads of each loop have little
    arithmetic of their own warp before their data is needed, and which loop has more of them."""
    covers = [(label, pipeline.shared_load_cover(kernel, params, device)) for label, kernel, params in configs]
    parts = [f"{label}: {c['short']} of its {c['loads']} LDS.128 have fewer than {pipeline.SHORT} FFMAs before "
             f"the first use (median {c['median']})" for label, c in covers]
    shares = {label: c["short"] / c["loads"] for label, c in covers}
    most = max(shares, key=shares.get)
    verdict = ("The same share of short covers in each." if len(set(shares.values())) == 1
               else f"The larger share of short covers: {most}.")
    return Text("; ".join(parts) + ". " + verdict)


def registers(configs: list[tuple[str, str, dict]], device: Device) -> Table:
    """Registers, spills, shared memory and occupancy of each config, from the offline compile
    (a config the rules refuse is compiled anyway, and the table says why it is refused)."""
    rows = []
    for label, kernel, params in configs:
        spec = get(kernel)
        problems = spec.problems(spec.resolve(params), device)
        res, occ = of_config(kernel, params, device, validate=False)
        rows.append({"kernel": label, "the rules": f"refused: {problems[0]}" if problems else "valid",
                     "registers": res.registers,
                     "spills (bytes)": res.spill_stores + res.spill_loads, "shared memory (bytes)": res.smem,
                     "blocks per SM": occ.blocks_per_sm, "warps per SM": occ.active_warps, "limited by": occ.limiter})
    return Table(rows, caption=f"Offline compile for {device.arch} ({device.label}'s limits)")


def register_roles(configs: list[tuple[str, str, dict]]) -> Table:
    """Data registers per thread by role, from each kernel's declarations (a model)."""
    rows = [dict({"kernel": label}, **pipeline.data_registers(kernel, params)) for label, kernel, params in configs]
    return Table(rows, caption="Registers a thread holds for data, by role (from the declarations; addresses "
                               "and loop counters come on top)")


def barriers(device: Device | None = None) -> Table:
    """Barrier instructions in the racy and the fixed kernel's machine code."""

    rows = []
    for name in (RACY, TWO_STAGE):
        spec = get(name)
        ins = sass.instructions(offline.sass(spec, spec.defaults(), device))
        # NOPs only pad the code to an alignment: they would hide the barrier's one instruction
        rows.append({"kernel": spec.title, "BAR instructions": sum(i.base == "BAR" for i in ins),
                     "instructions, NOP padding left out": sum(i.base != "NOP" for i in ins)})
    return Table(rows, caption="Barriers in the machine code (SASS, compiled offline)")


# ------------------------------------------------------------ the fast path
def fast_path_table(rs) -> Table:
    """The two-stage kernel (BK = 8) with checked loads and with the fast path, size by size."""
    rows = {}
    for r in rfig.round_sizes(rs.rows):
        if r["kernel"] == TWO_STAGE and r["params"]["BK"] == 8 and r["ok"]:
            rows.setdefault(r["M"], {})[r["params"].get("FAST_PATH", 0)] = r
    out = [{"n": n, "checked loads (TFLOP/s)": pair[0]["tflops"], "fast path (TFLOP/s)": pair[1]["tflops"],
            "gain": f"{100 * (pair[1]['tflops'] / pair[0]['tflops'] - 1):+.1f}%",
            "cuBLAS (TFLOP/s)": pair[1]["cublas_tflops"]}
           for n, pair in sorted(rows.items()) if set(pair) == {0, 1}]
    return Table(out, caption=f"Two stages, BK = 8: FAST_PATH = 0 and 1, {rs.source}")


def fast_path_text(rs, previous: dict | None = None) -> Text:
    """The fast path's gain at the largest recorded size, how it compares with cuBLAS there and,
    given the previous chapter's row at that size, which of the two steps gained what."""
    t = fast_path_table(rs)
    if not t.rows:
        return Text("The two-stage kernel was not recorded with and without the fast path at a common size.")
    r = t.rows[-1]
    slow, fast, cub = r["checked loads (TFLOP/s)"], r["fast path (TFLOP/s)"], r["cuBLAS (TFLOP/s)"]
    text = (f"At n = {r['n']} the loop without checks runs **{fast:.1f} TFLOP/s** against {slow:.1f} with its "
            f"loads checked: **{r['gain']}**, {100 * fast / cub:.0f}% of cuBLAS in the same run. The kernel is "
            "the same in every other way, and so is the arithmetic; the difference is the instructions around it.")
    if previous and previous.get("M") == r["n"] and previous.get("tflops"):
        prev = previous["tflops"]
        text += (f" The previous chapter's kernel ran {prev:.1f} TFLOP/s at this size, so two stages with checked "
                 f"loads changed it by {100 * (slow / prev - 1):+.1f}% and the loop without checks by "
                 f"{100 * (fast / prev - 1):+.1f}%")
        bk = previous.get("params", {}).get("BK")
        other = f" (and BK = 8 where the previous kernel has {bk})" if bk and bk != 8 else ""
        text += (": at this size the gain over the previous kernel comes with the loop without checks; the second "
                 f"stage with checked loads{other} did not gain on its own."
                 if abs(slow / prev - 1) < 0.5 * abs(fast / prev - 1) else ".")
    return Text(text)


def fast_path_loops(device: Device | None = None) -> Table:
    """The two-stage kernel's main loop with and without checks, compiled offline: what the
    checks add to the machine code of one k-tile (both sides of its branches counted: the
    scalar loads for the edges sit in the loop too, though interior tiles jump over them)."""
    rows = []
    for fast in (0, 1):
        loop = pipeline.executed_loop(TWO_STAGE, {"FAST_PATH": fast}, device)
        count = lambda *bases: sum(i.base in bases for i in loop)  # noqa: E731
        rows.append({"loop": "fast path (no checks)" if fast else "checked loads",
                     "instructions": len(loop), "FFMA": count("FFMA"), "branches (BRA)": count("BRA"),
                     "compares (ISETP)": count("ISETP"), "global loads (LDG)": count("LDG"),
                     "FFMA share": f"{100 * count('FFMA') / len(loop):.1f}%"})
    return Table(rows, caption="One pass of the two-stage kernel's main loop (one k-tile), SASS compiled offline "
                               f"for {(device or hardware.default()).arch}")


def fast_path_loops_text(rs, device: Device | None = None) -> Text:
    """The two loops' instruction counts against the measured gain of the fast path."""
    checked, fast = fast_path_loops(device).rows
    t = fast_path_table(rs)
    extra = checked["instructions"] / fast["instructions"] - 1
    text = (f"The checked loop holds {checked['instructions'] - fast['instructions']} more instructions than the fast "
            f"path's for the same {fast['FFMA']} FFMA, {100 * extra:.0f}% more, among them "
            f"{checked['branches (BRA)']} branches and {checked['compares (ISETP)']} compares against "
            f"{fast['branches (BRA)']} and {fast['compares (ISETP)']}.")
    if t.rows:
        r = t.rows[-1]
        gain = r["fast path (TFLOP/s)"] / r["checked loads (TFLOP/s)"] - 1
        text += (f" If every instruction took one issue slot and all of them ran, the checks would cost about "
                 f"{100 * extra:.0f}% more time; the fast path measured {r['gain']} at n = {r['n']}. Not all of them "
                 "run (interior tiles jump over the scalar loads for the edges), so the count is an upper bound on "
                 "the slots they take"
                 + (", and the measured gain is larger still. The rest is not in the count; the likeliest place "
                    "is how the compiler schedules a loop with branches in it (which instructions it may move "
                    "across them)." if gain > extra else
                    ", and the measured gain is within it."))
    return Text(text)


# ------------------------------------------------------------ the race
def _plain(r: dict) -> bool:
    """A two-stage row with BK = 8 and every load checked: the configs the racy and fixed kernels share."""
    return r["params"]["BK"] == 8 and r["params"].get("FAST_PATH", 0) == 0


def race_runs(rs) -> Table:
    """The recorded runs of the racy and the fixed kernel: error against cuBLAS and speed."""
    rows = sorted((r for r in rs.rows if r["kernel"] in (RACY, TWO_STAGE) and _plain(r)),
                  key=lambda r: (r["M"], r["kernel"] != RACY))
    out = [{"kernel": get(r["kernel"]).title, "n": r["M"],
            "relative error": r["rel_err"] if r["rel_err"] is not None else float("nan"),
            "result": "correct" if r["ok"] else ("NaN in C" if r["rel_err"] is None else "WRONG"),
            "TFLOP/s": r["tflops"]} for r in rows]
    return Table(out, caption=f"BK = 8, {rs.source}")


def race_report(san) -> Text:
    """What racecheck reported for the racy kernel, and for every other kernel, from the sanitizer rows."""
    racy = [r for r in san.rows if r.get("expected_broken") and r["tool"] == "racecheck"]
    if not racy:
        return Text(f"No racecheck run of the racy kernel in these data ({san.source}).")
    kinds = {}
    for r in racy:
        for k, v in (r.get("kinds") or {}).items():
            kinds[k] = kinds.get(k, 0) + v
    shapes = ", ".join(f"{r['M']}x{r['N']}x{r['K']} ({r['hazards']:,} hazards)" for r in racy)
    kind = ", ".join(f"{v:,} of a {k.split('/')[0].lower()} followed by a {k.split('/')[-1].lower()}"
                     for k, v in kinds.items())
    fixed = [r for r in san.rows if r["kernel"] == TWO_STAGE and r["tool"] == "racecheck"]
    others = [r for r in san.rows if r["tool"] == "racecheck" and not r.get("expected_broken")]
    bad = sorted({r["kernel"] for r in others if (r.get("hazards") or 0) or (r.get("errors") or 0)})
    tail = (f"Every other racecheck run, {len(others)} of them over {len({r['kernel'] for r in others})} kernels "
            f"({len(fixed)} of the fixed kernel), reports **no hazard**." if not bad else
            f"Other kernels with hazards in these data: {', '.join(bad)}.")
    return Text(f"`compute-sanitizer --tool racecheck` on the racy kernel ({san.source}): {shapes}. "
                f"Kinds: {kind}: one thread accesses an address, another then accesses it, with no barrier between "
                f"them. {tail}")


def enclosing(lines: list[str], n: int) -> str | None:
    """The lambda of the kernel file that holds line n ("store_tile"), by the nearest ``auto x = [&]`` above."""
    for i in range(n - 1, -1, -1):
        text = lines[i].strip()
        if text.startswith("auto ") and "= [&]" in text:
            return text.split()[1]
        if text.startswith("__global__") or text.startswith("template"):
            return None
    return None


def _unmarked(text: str | None) -> str | None:
    """A kernel file's text without its ``// region`` and ``// endregion`` lines (comments the
    book uses to show part of a file)."""
    if text is None:
        return None
    return "\n".join(ln for ln in text.splitlines() if not (_REGION_BEGIN.match(ln) or _REGION_END.match(ln)))


def unmarked_hash(spec) -> str:
    """The source hash the kernel had before its region markers: :meth:`KernelSpec.source_hash`
    of the files with those comment lines left out."""
    read = lambda path: _unmarked(read_worktree(path))
    text = inline_includes(spec.path, read) + "".join(inline_includes(KERNEL_DIR / f, read) for f in spec.also_runs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def report_lines(spec, row: dict) -> list[int] | None:
    """The lines a sanitizer row names, as line numbers of today's file: as recorded when the file is
    the one it checked, moved past the region markers added since when only those differ, else None."""
    if row.get("source_hash") == spec.source_hash():
        return list(row["lines"])
    if row.get("source_hash") != unmarked_hash(spec):
        return None
    kept = [n for n, ln in enumerate(spec.path.read_text().splitlines(), 1)
            if not (_REGION_BEGIN.match(ln) or _REGION_END.match(ln))]
    return [kept[n - 1] for n in row["lines"] if 0 < n <= len(kept)]


def race_lines(san) -> Table | Text:
    """The source lines racecheck names, read from the kernel file (when the file is the one it checked)."""
    racy = [r for r in san.rows if r.get("expected_broken") and r["tool"] == "racecheck" and r.get("lines")]
    if not racy:
        return Text("The recorded report names no source lines.")
    r = racy[0]
    spec = get(r["kernel"])
    numbers = report_lines(spec, r)
    if numbers is None:
        return Text(f"The report names lines {', '.join(map(str, r['lines']))} of the file it checked, an earlier "
                    f"version of `kernels/{spec.file}` (its source hash differs from today's file), so they are not "
                    "shown here; `python -m helpers sanitize` records them again.")
    text = spec.path.read_text().splitlines()
    now = dict(zip(r["lines"], numbers))
    kinds: dict = {}
    for m in re.finditer(r"(Write|Read) access .*? in \S+?:(\d+)", r.get("excerpt", "")):
        kinds.setdefault(now.get(int(m.group(2)), int(m.group(2))), set()).add(m.group(1).lower())
    rows = [{"line": n, "access": " and ".join(sorted(kinds.get(n, ()))), "in": enclosing(text, n) or "",
             "source": src} for n, src in pipeline.named_lines(spec, numbers)]
    return Table(rows, caption=f"kernels/{spec.file}: the lines racecheck names ({r['M']}x{r['N']}x{r['K']})")


def sanitizer_table(san) -> Table:
    """memcheck and racecheck over this chapter's kernels: runs, errors, hazards, verdict."""
    mine = {TWO_STAGE, RACY, ASYNC}
    rows = [dict(a, kernel=get(a["kernel"]).title) for a in summary_rows(san.rows) if a["kernel"] in mine]
    return Table(rows, ["kernel", "tool", "runs", "errors", "hazards", "verdict"], caption=san.source)


def fix_cost(rs) -> Text:
    """The racy and the fixed kernel side by side at every recorded n: what the barrier costs."""
    racy = {r["M"]: r for r in rs.rows if r["kernel"] == RACY and _plain(r)}
    fixed = {r["M"]: r for r in rs.rows if r["kernel"] == TWO_STAGE and _plain(r)}
    common = sorted(set(racy) & set(fixed))
    if not common:
        return Text("The racy and the fixed kernel were not recorded at a common size.")
    parts = [f"n = {n}: {racy[n]['tflops']:.1f} racy, {fixed[n]['tflops']:.1f} fixed "
             f"({pct(fixed[n]['tflops'], racy[n]['tflops']):+.1f}%)" for n in common]
    widest = max(100 * (r["ms_p80"] - r["ms_p20"]) / r["ms"] for n in common for r in (racy[n], fixed[n]))
    biggest = max(abs(pct(fixed[n]["tflops"], racy[n]["tflops"])) for n in common)
    verdict = ("every difference is inside that: the barrier costs nothing this measurement can see"
               if biggest <= widest else
               f"the largest difference, {biggest:.1f}%, is outside it. The band is the spread of one timing's "
               "launches; two timings taken one after the other can also differ by the GPU's clock and "
               "temperature between them, which only repeated, interleaved runs would separate, and one barrier "
               "per block is little work to be worth that much")
    return Text("TFLOP/s, " + "; ".join(parts) + f". The 20-80% band of these timings is at most {widest:.1f}% "
                f"wide, and {verdict}.")


def published_table(Ks=(8, 16, 24, 4096), BK: int = 8, seed: int = 0, fixed: bool = False) -> Table:
    """The widely copied two-stage kernel's stage bookkeeping on the CPU, for several K:
    which tiles it multiplies and what that does to the product (``fixed``: with the epilogue
    reading the stage the last tile went to)."""

    rng = np.random.default_rng(seed)
    rows = []
    for K in Ks:
        tiles = -(-K // BK)
        sched = pipeline.published_schedule(tiles, fixed)
        used = [s["tile"] for s in sched]
        A = rng.uniform(-1, 1, (32, K)).astype(np.float32)
        B = rng.uniform(-1, 1, (K, 32)).astype(np.float32)
        ref = A.astype(np.float64) @ B
        C = pipeline.published_product(A, B, BK, fixed)
        err = float(np.abs(C - ref).max() / np.abs(ref).max())
        shown = used if len(used) <= 6 else used[:3] + ["…"] + used[-2:]
        rows.append({"K": K, "k-tiles": tiles, "tiles multiplied, in order": ", ".join(
            "unwritten stage" if t is None else str(t) for t in shown),
            "epilogue reads": "a stage nobody wrote" if sched[-1]["tile"] is None else f"tile {sched[-1]['tile']}",
            "relative error": err, "correct": bool(err < 1e-5)})
    what = "with the epilogue fixed" if fixed else "as published"
    return Table(rows, caption=f"The stage bookkeeping {what}, BK = {BK}, emulated with NumPy "
                               "(helpers.models.pipeline.published_schedule)")


def braces_text(device: Device | None = None) -> Text:
    """The braces experiment, as a sentence: same machine code or not."""
    b = pipeline.braces(device=device)
    if b["identical"]:
        return Text(f"With the prologue in braces and without, the two-stage kernel compiles to the same "
                    f"{b['instructions']:,} instructions, operand for operand: **0 differences**.")
    return Text(f"With the prologue in braces, {b['differences']} of {b['instructions']:,} instructions differ.")


# ------------------------------------------------------------ cp.async
def pipeline_diagram(stages=(2, 3, 4), tiles: int = 8) -> go.Figure:
    """Which shared stage holds which k-tile over time, for several pipeline depths: a bar per
    tile from the iteration its copies are issued (light) to the one that computes on it (dark)."""
    steps = []
    for S in stages:
        traces = []
        # labels upright on two small lines: an iteration's width on a phone holds them
        for t in range(tiles):
            issue = t - (S - 1) if t >= S - 1 else -1      # -1: the prologue, before the loop
            colour = style.PALETTE[t % len(style.PALETTE)]
            traces.append(go.Bar(y=[f"stage {t % S}"], x=[t - issue], base=[issue], orientation="h",
                                 marker=dict(color=colour, opacity=0.35), showlegend=False, text=f"copy<br>{t}",
                                 textposition="inside", insidetextanchor="middle", textangle=0,
                                 # dark ink: Plotly picks it for the full colour, not the pale one drawn
                                 insidetextfont=dict(color="#222222", size=style.FONT - 2),
                                 hovertext=f"tile {t}: copies in flight from "
                                           + ("the prologue" if issue < 0 else f"iteration {issue}"), hoverinfo="text"))
            traces.append(go.Bar(y=[f"stage {t % S}"], x=[1], base=[t], orientation="h", marker=dict(color=colour),
                                 showlegend=False, text=f"FFMA<br>{t}", textposition="inside", insidetextanchor="middle",
                                 textangle=0, insidetextfont=dict(color=style.ink(colour), size=style.FONT - 2),
                                 hovertext=f"tile {t}: computed in iteration {t}", hoverinfo="text"))
        steps.append((f"{S} stages", traces, f"{S} stages: {S - 1} tiles in flight, 1 computed"))
    fig = style.steps_figure(steps, active=min(1, len(steps) - 1))
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    # each label in the middle of its iteration (iteration i runs from i to i + 1), a whole step
    # from the next, so "pro-logue" stays clear of "0" on a phone; grid lines where iterations meet
    fig.update_xaxes(tickvals=[i + 0.5 for i in range(-1, tiles)], ticktext=["pro-<br>logue"] + [str(i) for i in range(tiles)],
                     tickangle=0, showgrid=False, range=[-1, tiles],
                     minor=dict(tickvals=list(range(-1, tiles + 1)), showgrid=True, gridcolor=style.GRID, ticks=""))
    return finish(fig, steps[min(1, len(steps) - 1)][2], "loop iteration (one k-tile)", None,
                        "light: the tile's copies in flight; dark: the iteration that computes on it", height=440,
                        legend=False)


def smem(device: Device, BKs=(8, 16, 32), stages=(2, 3, 4)) -> Table:
    """Shared memory per block of each cp.async config, and the blocks an SM has room for."""

    spec = get(ASYNC)
    rows = []
    for bk in BKs:
        for s in stages:
            p = spec.resolve({"BK": bk, "STAGES": s})
            b = spec.smem_bytes(p)
            occ = occupancy(spec.threads(p), 1, b, device)
            rows.append({"BK": bk, "stages": s, "shared memory (KB)": b / 1024,
                         "blocks per SM (shared memory alone)": occ.by_limit["shared memory"]})
    return Table(rows, caption=f"cp.async: shared memory per block ({device.label}: {device.smem_per_sm // 1024} KB "
                               f"per SM, {device.smem_reserved_per_block // 1024} KB reserved per block)")


def largest_square_rows(rs, kernel: str) -> list[dict]:
    """A kernel's rows at the square size with the most of its configs."""

    n = largest_square(rs.rows, kernel)
    return [r for r in rs.rows if r["kernel"] == kernel and r["M"] == r["N"] == r["K"] == n]


def stages_figure(rs, BK: int = 16) -> go.Figure:
    """TFLOP/s against n of the cp.async kernel, one menu entry per pipeline depth, with the
    two-stage register kernel (its default) and cuBLAS from the same rows."""
    square = rfig.round_sizes(rs.rows)
    two_p = get(TWO_STAGE).defaults()
    two = sorted((r for r in square if r["kernel"] == TWO_STAGE and r["params"] == two_p), key=lambda r: r["M"])
    depths = sorted({r["params"]["STAGES"] for r in square if r["kernel"] == ASYNC and r["params"]["BK"] == BK})
    steps = []

    def line(sel, y, name, colour, dash=None):
        return go.Scatter(x=[r["M"] for r in sel], y=[y(r) for r in sel], name=name, mode="lines+markers",
                          line=dict(color=colour, dash=dash), hovertext=[rfig.hover(r) for r in sel], hoverinfo="text")

    for s in depths:
        sel = sorted((r for r in square if r["kernel"] == ASYNC and r["params"] == {"BK": BK, "STAGES": s}),
                     key=lambda r: r["M"])
        steps.append((f"{s} stages", [
            line(sel, lambda r: r["tflops"], f"cp.async, BK = {BK}, {s} stages", style.colour(ASYNC)),
            line(two, lambda r: r["tflops"], f"two stages in registers, {get(TWO_STAGE).label(two_p)}",
                 style.colour(TWO_STAGE)),
            line(sel, lambda r: r["cublas_tflops"], "cuBLAS, same run", style.CUBLAS, "dash")],
            f"cp.async, {s} stages, against two stages"))
    fig = style.steps_figure(steps, active=min(1, len(steps) - 1))
    style.log_axis(fig, "x", sorted({r["M"] for r in square}), exact=True)
    return finish(fig, steps[min(1, len(steps) - 1)][2], "n (M = N = K)", "TFLOP/s", rs.source)


def versus(rs, device: Device) -> Text:
    """How the cp.async pipeline compares with the two-stage register kernel, size by size, and
    what the offline compile says about registers and occupancy: all from the rows and reports."""
    two_p = get(TWO_STAGE).defaults()
    two = {r["M"]: r for r in rfig.round_sizes(rs.rows) if r["kernel"] == TWO_STAGE and r["params"] == two_p}
    asy = [r for r in rfig.round_sizes(rs.rows) if r["kernel"] == ASYNC]
    parts = []
    for n in sorted(two):
        here = [r for r in asy if r["M"] == n]
        if not here:
            continue
        best = max(here, key=lambda r: r["tflops"])
        verb = "ahead of" if best["tflops"] > two[n]["tflops"] else "behind"
        parts.append(f"at n = {n} the best of {len(here)} cp.async configs ({get(ASYNC).label(best['params'])}) runs "
                     f"{best['tflops']:.1f} TFLOP/s, {abs(pct(best['tflops'], two[n]['tflops'])):.1f}% {verb} the "
                     f"two-stage kernel's {two[n]['tflops']:.1f}")
    if not parts:
        return Text("The two kernels were not recorded at a common size.")
    a_def = get(ASYNC).defaults()
    (ra, oa), (rt, ot) = of_config(ASYNC, a_def, device), of_config(TWO_STAGE, two_p, device)
    ta, tt = pipeline.data_registers(ASYNC, a_def), pipeline.data_registers(TWO_STAGE, two_p)
    same = (oa.blocks_per_sm, oa.active_warps) == (ot.blocks_per_sm, ot.active_warps)
    occ = ("the **same occupancy**" if same
           else f"different occupancy ({ot.active_warps} warps per SM against {oa.active_warps})")
    saved = tt["next tile (staging)"] + tt["B values"] - ta["B values"]
    spent = ta["A values"] - tt["A values"]
    budget = (f"Dropping the staging registers ({tt['next tile (staging)']} per thread) did not buy a single extra "
              "warp. " if same else "")
    return Text(
        "Measured: " + "; ".join(parts) + ".\n\n"
        f"Compiled offline for {device.arch}, the two-stage kernel uses {rt.registers} registers per thread and "
        f"the cp.async kernel ({get(ASYNC).label(a_def)}) {ra.registers}: {ot.blocks_per_sm} and {oa.blocks_per_sm} "
        f"blocks per SM, {ot.active_warps} and {oa.active_warps} warps, {occ}. {budget}The registers a thread "
        f"holds for data add up to {tt['total']} in the two-stage kernel and {ta['total']} in the cp.async kernel: "
        f"it saves {saved} (the staging registers, and one of the two B fragments) and spends {spent} more on A, "
        f"because with the row-major A tile a thread holds {ta['A values']} values of A (4 k of each of its rows) "
        f"where the transposed tile let it hold {tt['A values']}, in two alternating fragments.")



def load_to_use_table(configs: list[tuple[str, str, dict]], device: Device | None = None) -> Table:
    """The numbers of :func:`load_to_use_figure` as a table."""
    rows = []
    for label, kernel, params in configs:
        r = pipeline.load_to_use(kernel, params, device)
        rows.append({"kernel": label, "16-byte global loads in the loop": r["loads"],
                     "fewest FFMA before the use": r["min"], "most": r["max"], "FFMA per loop iteration": r["per_iteration"]})
    return Table(rows, caption="Global loads of the inner loop and the arithmetic before their first use (SASS)")


def fix_diff() -> Text:
    """The racy and the fixed kernel, diffed: the one line FIXED = 1 adds."""
    return Text("```diff\n" + pipeline.fix_diff(TWO_STAGE) + "\n```")


def correctness(rs) -> Text:
    """The chapter's recorded runs against cuBLAS: the correct kernels, and the racy one."""
    good = [r for r in rs.rows if not get(r["kernel"]).broken]
    bad = [r for r in rs.rows if get(r["kernel"]).broken]
    ok = sum(bool(r["ok"]) for r in good)
    worst = max((r["rel_err"] for r in good if r["rel_err"] is not None), default=0.0)
    wrong = sum(not r["ok"] for r in bad)
    return Text(f"{ok} of {len(good)} recorded runs of the two correct kernels match cuBLAS (largest relative error "
                f"{worst:.1e}); {wrong} of {len(bad)} runs of the racy kernel do not ({rs.source}).")


def small_grid(rs, device: Device, BM: int = 128, BN: int = 128) -> Text:
    """Blocks of the 128 x 128 kernels at each recorded n against the SMs of the rows' device."""
    sizes = sorted({r["M"] for r in rfig.round_sizes(rs.rows)})
    parts = [f"n = {n}: {(n // BM) * (n // BN):,} blocks" for n in sizes]
    few = [n for n in sizes if (n // BM) * (n // BN) < device.sm_count]
    tail = (f" At n = {', '.join(map(str, few))} the grid has fewer blocks than the {device.label} has SMs "
            f"({device.sm_count}): part of the GPU idles whatever the kernel does." if few else "")
    return Text("Blocks of 128 × 128 per grid: " + "; ".join(parts) + "." + tail)


def in_flight(device: Device) -> Solution:
    """Exercise: bytes of A and B in flight per SM, register kernel against the cp.async pipeline."""
    two, asy = get(TWO_STAGE), get(ASYNC)
    p2, pa = two.defaults(), asy.resolve({"BK": 16, "STAGES": 3})
    _, o2 = of_config(two, p2, device)
    _, oa = of_config(asy, pa, device)
    per_thread = pipeline.data_registers(two, p2)["next tile (staging)"] * 4
    b2 = o2.blocks_per_sm * two.threads(p2) * per_thread
    t = asy.tiles(pa)
    tile = (t.BM * t.BK + t.BK * t.BN) * 4
    ba = oa.blocks_per_sm * (pa["STAGES"] - 1) * tile
    return Solution(summary=COMPILED, text=
        f"Two stages: {o2.blocks_per_sm} blocks per SM (the occupancy above) x {two.threads(p2)} threads x "
        f"{per_thread} bytes of the next tile in registers = **{b2 // 1024} KB per SM**, one tile per block. cp.async, "
        f"BK = {pa['BK']}, {pa['STAGES']} stages: up to {pa['STAGES'] - 1} tiles per block in flight, each "
        f"({t.BM} x {t.BK} + {t.BK} x {t.BN}) x 4 bytes = {tile // 1024} KB, and {oa.blocks_per_sm} blocks per SM: "
        f"**{ba // 1024} KB per SM**. Deeper pipelines keep more bytes in flight, which is what a memory system "
        "with a long latency needs (Little's law: bytes in flight = bandwidth x latency).")


def smem_exercise(device: Device, BK: int = 32, stages: int = 4) -> Solution:
    """Exercise: how many blocks of the deepest cp.async config fit on an SM of ``device``."""

    spec = get(ASYNC)
    p = spec.resolve({"BK": BK, "STAGES": stages})
    b = spec.smem_bytes(p)
    if b > device.smem_per_block:       # a GPU with less shared memory than the H100's per block
        alt = spec.suggest(p, device)
        return Solution(summary=COMPILED, text=
            f"None: {b // 1024} KB is more than the {device.smem_per_block // 1024} KB a block may use on the "
            f"{device.label}, so the kernel refuses this config before launch"
            + (f" and names the nearest that fits, {spec.label(alt)}" if alt else "") + ". Deeper or wider "
            "stages are bought with shared memory, and on this GPU that budget ends first.")
    occ = occupancy(spec.threads(p), 1, b, device)
    n = occ.by_limit["shared memory"]
    need = (n + 1) * (b + device.smem_reserved_per_block)
    _, real = of_config(spec, p, device)
    return Solution(summary=COMPILED, text=
        f"{n}: {n + 1} blocks would need {n + 1} x ({b // 1024} + {device.smem_reserved_per_block // 1024}) = "
        f"{need // 1024} KB, more than the {device.smem_per_sm // 1024} KB of an SM of the {device.label}. With its "
        f"registers counted too, the offline compile gives {style.plural(real.blocks_per_sm, 'block')}, "
        f"{real.active_warps} warps per SM (limited by {real.limiter}). A warp stalled at the barrier or on shared "
        "memory then has fewer others to take its place: deeper is not always better, and the measured depths "
        "above show where it stops paying.")


def mix(configs: list[tuple[str, str, dict]], device: Device | None = None) -> Table:
    """Instruction mix of each kernel's main loop as interior tiles of aligned matrices run it."""
    rows = []
    for label, kernel, params in configs:
        c = pipeline.loop_mix(kernel, params, device)
        rows.append({"kernel": label, "instructions per pass": c["total"], "FFMA": c["ffma"], "LDS.128": c["lds128"],
                     "other": c["other"], "FFMA share": f"{100 * c['ffma_share']:.1f}%"})
    arch = device.arch if device else "the reference GPU's architecture"
    return Table(rows, caption=f"One pass of the main loop as interior tiles of aligned matrices run it (SASS "
                               f"compiled offline for {arch})")


def mix_text(configs: list[tuple[str, str, dict]], device: Device | None = None) -> Text:
    """The FFMA share of each kernel's interior loop, as a sentence: which issues more besides FFMA."""
    shares = [(label, pipeline.loop_mix(kernel, params, device)) for label, kernel, params in configs]
    parts = [f"{label} {100 * c['ffma_share']:.1f}% ({c['total'] - c['ffma']} other instructions per "
             f"{c['ffma']} FFMA)" for label, c in shares]
    lean = max(shares, key=lambda x: x[1]["ffma_share"])[0]
    return Text("FFMA share of one pass of the main loop, interior tiles: " + "; ".join(parts)
                + f". The larger FFMA share: {lean}.")


# ------------------------------------------------------------ the main line and its variants
def main_line_params(lb, n: int = 4096) -> dict:
    """The params of the double-buffered kernel on the book's main line: its leaderboard row at n,
    or, where the leaderboard has none (a quick live run), the kernel's own choice for that shape."""
    rows = [r for r in lb.rows if r["kernel"] == TWO_STAGE and r["M"] == r["N"] == r["K"] == n]
    if not rows:
        return get(TWO_STAGE).config_for(n, n, n, lb.device)
    return max(rows, key=lambda r: r["tflops"])["params"]


def main_line_text(lb, n: int = 4096) -> Text:
    """Which instantiation is "the double-buffered kernel", read from the leaderboard's data."""
    p = main_line_params(lb, n)
    return Text("The double-buffered kernel, as the leaderboard records it at n = "
                f"{n}: `{', '.join(f'{k}={v}' for k, v in p.items())}`.")


def variants_table(rs, n: int | None = None) -> Table:
    """The double-buffered kernel and its variants at one size: TFLOP/s and the change against it."""
    n = n or max(r["M"] for r in rs.rows if r["M"] == r["N"] == r["K"])
    at = [r for r in rs.rows if r["M"] == r["N"] == r["K"] == n]
    main = next(r for r in at if r["kernel"] == TWO_STAGE and r["params"].get("FAST_PATH") == 1)
    checked = next(r for r in at if r["kernel"] == TWO_STAGE and r["params"].get("FAST_PATH") == 0)
    racy = next(r for r in at if r["kernel"] == RACY)
    d = get(ASYNC).defaults()
    dflt = next(r for r in at if r["kernel"] == ASYNC and r["params"] == d)
    best = max((r for r in at if r["kernel"] == ASYNC), key=lambda r: r["tflops"])
    named = [("the double-buffered kernel (fast path)", main), ("checked loads (FAST_PATH=0)", checked),
             ("published, racy (FIXED=0, checked loads)", racy), (f"cp.async, default ({rfig.config_label(dflt)})", dflt),
             (f"cp.async, best ({rfig.config_label(best)})", best)]
    out = [{"kernel": name, "TFLOP/s": round(r["tflops"], 1), "against the double-buffered kernel":
            "" if r is main else f"{pct(r['tflops'], main['tflops']):+.1f}%",
            "correct": "yes" if r["ok"] else "WRONG"} for name, r in named]
    return Table(out, caption=f"n = {n}, {rs.source}")


def cp_async_why(device: Device | None = None) -> Text:
    """Why cp.async does not pay here, from the machine code and the declarations: the register
    kernel already covers each global load with most of a tile, and the registers cp.async frees
    from staging go to holding four k of A at once."""
    cover = pipeline.load_to_use(TWO_STAGE, {"BK": 8, "FAST_PATH": 1}, device)
    two, asy = pipeline.data_registers(TWO_STAGE, {"BK": 8}), pipeline.data_registers(ASYNC)
    return Text(f"The double-buffered kernel already issues at least **{cover['min']} FFMAs** of its own between "
                f"each global load and its use, so a deeper pipeline has little left to hide. And the registers "
                f"cp.async saves on staging it spends on A: it holds {asy['A values']} values of A against "
                f"{two['A values']}, for the same {two['total']} data registers in all.")
