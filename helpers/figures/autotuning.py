"""Figures, tables and sentences of the chapter "Autotuning" (book/11_autotuning.md).

The search itself lives in :mod:`helpers.measure.autotune`; this module shows a search's
rows (recorded, or a live :class:`~helpers.measure.autotune.TuneResult`): the funnel from
every combination to the configs worth timing, every timed config (parallel coordinates,
heatmaps, a ranking, the roofline), and the winner against the default, the dispatcher's
choice and the noise.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import plotly.graph_objects as go

from .. import hardware
from ..hardware import Device
from ..measure import autotune as tuning
from ..models.roofline import intensity
from ..runtime.specs import get
from ..tables import Table, Text
from . import final as final_figures
from . import results as result_figures
from . import style
from .. import settings


def _pct(r: dict) -> float:
    return 100 * r["tflops"] / r["cublas_tflops"]


def _params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


# ------------------------------------------------------------------ the space
def space_table(spec) -> Table:
    """A kernel's template parameters: allowed values, default, meaning."""
    spec = get(spec)
    return Table([{"parameter": p.name, "allowed values": ", ".join(map(str, p.allowed)), "default": p.default,
                   "meaning": p.doc} for p in spec.params], caption=f"Template parameters of {spec.file}")


def space_text(spec) -> Text:
    spec = get(spec)
    sizes = " × ".join(str(len(p.allowed)) for p in spec.params)
    return Text(f"{sizes} = **{tuning.space_size(spec):,}** combinations of the allowed values; the default is "
                f"`{spec.label(spec.defaults())}`.")


def rules_table(spec, device: Device) -> Table:
    """How many combinations each rule removes (each counted under the first rule it breaks)."""
    spec = get(spec)
    broken = tuning.rules_broken(spec, device)
    n_valid, _ = tuning.valid_counts(spec, device, {})
    total = tuning.space_size(spec)
    rows = [{"removed because": reason, "configs": n, "share of all": f"{100 * n / total:.1f}%"}
            for reason, n in broken.most_common()]
    rows.append({"removed because": "(obey every rule)", "configs": n_valid,
                 "share of all": f"{100 * n_valid / total:.1f}%"})
    return Table(rows, caption=f"The rules of {spec.name} on the {device.label}, checked in Python")


def pinned_text(spec, device: Device) -> Text:
    spec = get(spec)
    fixed = tuning.pinned(spec, tuning.SWEEP_PINNED)
    n_valid, n_held = tuning.valid_counts(spec, device, fixed)
    # what still varies among those configs (some flags are held by the rules: REDUCE needs a split)
    free = [n for n, v in tuning.held_values(spec, device, fixed).items() if len(v) > 1]
    return Text(f"With {_params(fixed)} held at their defaults, **{n_held:,}** of the {n_valid:,} "
                f"valid configs remain; among them, {', '.join(f'`{n}`' for n in free)} take more than one value.")


def compile_text(spec, params: dict | None, device: Device) -> Text:
    """The offline compile report of one config and what it means for occupancy."""
    spec = get(spec)
    p = spec.resolve(params)
    c = tuning.analyse(spec, p, device)
    if c.get("note"):
        return Text(f"`{spec.label(p)}`: {c['note']}.")
    if c["reason"] == "does not compile":
        return Text(f"`{spec.label(p)}` does not compile for {device.arch}: {c.get('error', '')}")
    spills = f"spills {c['spill_bytes']} B" if c["spill_bytes"] else "no spills"
    return Text(f"`{spec.label(p)}` for {device.arch}: {c['threads']} threads, "
                f"**{c['registers']} registers** per thread, "
                f"{c['smem']:,} B of shared memory, {spills}. On the {device.label}: {style.plural(c['blocks_per_sm'], 'block')} "
                f"per SM = {c['active_warps']} warps, limited by {c['limiter']}.")


# ------------------------------------------------------------------ a recorded search
def search_text(rs) -> Text:
    """Where a search's rows come from and how many configs it analysed."""
    analysed = sum(1 for r in rs.rows if r.get("status") in ("timed", "failed", "not timed", "pruned"))
    return Text(f"The search below was {rs.source}: {analysed} configs analysed offline, "
                f"{sum(1 for r in rs.rows if r.get('status') == 'timed')} of them timed.")


def reasons_table(spec, rows: list, device: Device) -> Table:
    reasons = tuning.reasons_from_rows(get(spec), rows, device)
    return Table([{"removed because": r, "configs": n} for r, n in reasons.items()],
                 caption="Why configs left the search: the rules (recomputed), then the compile reports (recorded)")


def pruned_table(spec, rows: list, n: int = 6) -> Table | Text:
    """A few configs the compile report removed, with their threads, registers and spills."""
    spec = get(spec)
    pruned = [r for r in rows if r.get("status") == "pruned"][:n]
    if not pruned:
        return Text("In this search the compiler's report removed no config: the rules had caught them all.")
    return Table([{"config": spec.label(r["params"]), "threads": r.get("threads"), "registers": r.get("registers"),
                   "spills (B)": r.get("spill_bytes"), "warps per SM": r.get("active_warps"), "removed": r["reason"]}
                  for r in pruned], caption="Configs the compiler's report removed (first few)")


def timing_text(rows: list) -> Text:
    timed = [r for r in rows if r.get("status") == "timed"]
    good = tuning.timed_rows(rows)
    failed = sum(r.get("status") == "failed" for r in rows)
    left = sum(r.get("status") == "not timed" for r in rows)
    n = rows[0]["M"] if rows else tuning.SWEEP_N
    return Text(f"{len(timed)} configs timed at n = {n}: {len(good)} correct, {len(timed) - len(good)} wrong; "
                f"{failed} failed to compile or launch; {left} survivors were not in the timed sample.")


def funnel_figure(stages: list, source: str,
                  title: str = "From every combination to the configs worth timing") -> go.Figure:
    """The pruning funnel as horizontal bars on a log scale (each step keeps a fraction of the one before)."""
    text = [f"{n:,}" if i == 0 else f"{n:,} ({100 * n / max(stages[i - 1][1], 1):.0f}%)"
            for i, (_, n) in enumerate(stages)]
    # Each step's name above its bar, not as an axis label: the bars keep the whole width on a phone.
    ys = list(range(len(stages)))
    width = 0.5                                                     # of a row: the rest holds the name
    fig = go.Figure(go.Bar(y=ys, x=[max(n, 0.8) for _, n in stages], orientation="h", text=text, width=width,
                           textposition="auto", textfont=dict(size=style.FONT), insidetextanchor="end",
                           textangle=0, hoverinfo="text", hovertext=[f"{s}: {t}" for (s, _), t in zip(stages, text)],
                           marker_color=[style.PALETTE[i % len(style.PALETTE)] for i in range(len(stages))]))
    names = [style.wrap(name, 48) for name, _ in stages]            # a long one would run off a phone's screen
    for y, name in zip(ys, names):                                  # on the bar's top edge, not on the bar
        fig.add_annotation(x=0, y=y - width / 2, xref="x", yref="y", text=name, showarrow=False, xanchor="left",
                           yanchor="bottom", yshift=2, align="left", font=dict(size=style.FONT - 1))
    top = max(n for _, n in stages)
    decades = [10 ** e for e in range(0, math.ceil(math.log10(max(top, 10))) + 1)]
    fig.update_xaxes(type="log", range=[0, math.log10(top * 1.6)], tickvals=decades,
                     ticktext=[f"{d:,}" for d in decades],
                     title="configs left (log scale)")
    fig.update_yaxes(autorange="reversed", showticklabels=False, range=[len(stages) - 0.5, -0.9])
    lines = sum(n.count("<br>") for n in names)                     # each line more takes a row's room above its bar
    return style.finish(fig, title, source=source, height=180 + 62 * len(stages) + 16 * lines, legend=False)


def parallel_figure(rows: list, source: str,
                    title: str = "Every timed config: drag along an axis to filter") -> go.Figure:
    """Parallel coordinates: one line per correct timed config, coloured by TFLOP/s."""
    good = tuning.timed_rows(rows)
    if not good:
        raise ValueError("no correct timed config in these rows")
    names = [k for k in good[0]["params"] if len({r["params"][k] for r in good}) > 1]
    dims = [dict(label=k, values=[r["params"][k] for r in good], tickvals=sorted({r["params"][k] for r in good}))
            for k in names]
    # the template parameters that vary and the speed: few axes, short names, so that they share
    # a phone's width; the colour bar under the plot says what the colours mean
    tflops = [r["tflops"] for r in good]
    dims.append(dict(label="TFLOP/s", values=tflops, tickvals=_few_ticks(tflops), tickformat=".1f"))
    bar = dict(title=dict(text="TFLOP/s (colour)", side="top"), orientation="h", x=0.5, xanchor="center",
               y=-0.08, yanchor="top", thickness=12, len=0.9, tickformat=".0f")
    fig = go.Figure(go.Parcoords(line=dict(color=tflops, colorscale="Viridis", showscale=True, colorbar=bar),
                                 dimensions=dims, labelangle=-90, labelside="top", labelfont=dict(size=style.FONT - 1),
                                 tickfont=dict(size=style.FONT - 3), rangefont=dict(size=style.FONT - 3)))
    fig = style.finish(fig, title, source=source, height=560, legend=False)
    # the axes' names stand upright above the plot, under the title: the top margin grows by the
    # longest of them, and the figure with it; the colour bar sits below
    names_px = max(style.text_px(d["label"]) for d in dims) + 12
    fig.update_layout(height=fig.layout.height + names_px,
                      margin=dict(l=30, r=14, t=fig.layout.margin.t + names_px, b=110))
    return fig


def _few_ticks(vals: list, most: int = 3) -> list:
    """The least and the largest value, and at most ``most`` round ticks (1, 2 or 5 x 10^k apart)
    between them, none so close to an end that their labels would touch."""
    lo, hi = min(vals), max(vals)
    if hi == lo:
        return [lo]
    unit = 10 ** math.floor(math.log10((hi - lo) / most))
    step = next(m * unit for m in (1, 2, 5, 10) if (hi - lo) / (m * unit) <= most)
    inner = [k * step for k in range(math.floor(lo / step) + 1, math.ceil(hi / step))]
    return [lo] + [t for t in inner if lo + 0.15 * (hi - lo) < t < hi - 0.15 * (hi - lo)] + [hi]


def heatmap_figure(rows: list, x: str, y: str, source: str, title: str | None = None) -> go.Figure:
    """Best TFLOP/s over two parameters; the menu leaves the others free or fixes one of them.

    A cell is the fastest correct timed config with that (x, y) pair among those the menu
    allows; empty where none was timed. More than a few choices become a slider.
    """
    good = tuning.timed_rows(rows)
    if not good:
        raise ValueError("no correct timed config in these rows")
    others = [k for k in good[0]["params"] if k not in (x, y) and len({r["params"][k] for r in good}) > 1]
    xs = sorted({r["params"][x] for r in good})
    ys = sorted({r["params"][y] for r in good})
    zmax = max(r["tflops"] for r in good)
    zmin = min(r["tflops"] for r in good)
    groups: OrderedDict = OrderedDict()
    groups["best over the others"] = good
    for k in others:
        for v in sorted({r["params"][k] for r in good}):
            groups[f"{k}={v}"] = [r for r in good if r["params"][k] == v]
    title = title or f"TFLOP/s over {x} and {y}"
    steps = []
    for label, sel in groups.items():
        best: dict = {}
        for r in sel:
            key = (r["params"][y], r["params"][x])
            if key not in best or r["tflops"] > best[key]["tflops"]:
                best[key] = r
        z = [[best[(yy, xx)]["tflops"] if (yy, xx) in best else None for xx in xs] for yy in ys]
        text = [[f"{best[(yy, xx)]['tflops']:.1f}" if (yy, xx) in best else "" for xx in xs] for yy in ys]
        hover = [[(_params(best[(yy, xx)]["params"]) + f"<br>{best[(yy, xx)]['tflops']:.2f} TFLOP/s "
                   f"({_pct(best[(yy, xx)]):.0f}% of cuBLAS)") if (yy, xx) in best else "not timed"
                  for xx in xs] for yy in ys]
        steps.append((label, [go.Heatmap(x=[str(v) for v in xs], y=[str(v) for v in ys], z=z, text=text,
                                         texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                                         zmin=zmin, zmax=zmax, colorscale="Viridis",
                                         colorbar=dict(title="TFLOP/s", thickness=12))],
                      f"{title} ({label})"))
    fig = style.steps_figure(steps, active=0, prefix="")
    fig.update_xaxes(title=x, type="category")
    fig.update_yaxes(title=y, type="category")
    return style.finish(fig, fig.layout.title.text, source=source, height=500, legend=False)


def ranked_figure(rows: list, source: str, title: str = "Every timed config, slowest to fastest") -> go.Figure:
    """Bars of each timed config's TFLOP/s with its 20/80 band, sorted; the default and the
    dispatcher's choice in their own colours, wrong results in red, cuBLAS dashed."""
    timed = sorted((r for r in rows if r.get("status") == "timed"), key=lambda r: r["tflops"])
    spec = get(timed[0]["kernel"]) if timed else None

    def kind(r):
        if not r["ok"]:
            return "wrong result"
        if r.get("chosen"):
            return "the dispatcher's choice"
        return "the default" if r.get("default") else "other configs"

    colours = {"other configs": style.PALETTE[0], "the default": style.PALETTE[1],
               "the dispatcher's choice": style.PALETTE[2], "wrong result": style.WRONG}
    fig = go.Figure()
    for name, colour in colours.items():
        idx = [i for i, r in enumerate(timed) if kind(r) == name]
        if not idx:
            continue
        sel = [timed[i] for i in idx]
        fig.add_trace(go.Bar(x=idx, y=[r["tflops"] for r in sel], name=name, marker_color=colour,
                             error_y=result_figures.band(sel), hoverinfo="text",
                             hovertext=[f"{spec.label(r['params'])}<br>{r['tflops']:.2f} TFLOP/s "
                                        f"({_pct(r):.0f}% of cuBLAS)"
                                        f"<br>{r.get('registers')} registers, {r.get('active_warps')} warps/SM"
                                        for r in sel]))
    if timed:
        fig.add_trace(go.Scatter(x=[-0.5, len(timed) - 0.5], y=[timed[0]["cublas_tflops"]] * 2, mode="lines",
                                 name="cuBLAS, same run", line=dict(color=style.CUBLAS, dash="dash")))
    fig.update_xaxes(showticklabels=False)
    return style.finish(fig, title, "configs, slowest to fastest", "TFLOP/s", source, height=440)


def roofline_figure(rows: list, device: Device, source: str,
                    title: str = "Every timed config on the roofline") -> go.Figure:
    """The timed configs at their tiles' arithmetic intensity: the best and the default named."""
    good = tuning.timed_rows(rows)
    if not good:
        raise ValueError("no correct timed config in these rows")
    spec = get(good[0]["kernel"])
    best = tuning.best_row(rows)
    # the default drawn first, the best over it as a ring: configs of one block tile share an
    # intensity, so the two may sit on one spot; their names go on opposite sides
    named = [(r, "default") for r in good if r.get("default") and r is not best] + [(best, "best")]
    pts = [{"name": f"{what}: {spec.label(r['params'])}", "short": what,
            "kernel": "" if what == "default" else spec.name,
            "textposition": "bottom center" if what == "default" else "top center",
            **({"symbol": "circle-open"} if what == "best" else {}),
            "intensity": intensity(spec, r["params"], r["M"], r["N"], r["K"]), "tflops": r["tflops"]}
           for r, what in named]
    fig = result_figures.roofline(pts, device, source, title=title)
    cloud = go.Scatter(
        x=[intensity(spec, r["params"], r["M"], r["N"], r["K"]) for r in good], y=[r["tflops"] for r in good],
        mode="markers", name="every timed config", marker=dict(size=7, color="#9a9a9a", opacity=0.7),
        hovertext=[f"{spec.label(r['params'])}<br>{r['tflops']:.2f} TFLOP/s" for r in good], hoverinfo="text")
    fig.add_trace(cloud)
    fig.data = (fig.data[0], fig.data[-1]) + fig.data[1:-1]  # the named points drawn over the cloud
    every = [{"intensity": x, "tflops": y} for x, y in zip(cloud.x, cloud.y)]
    return final_figures.tidy_roofline(fig, every, device)


# ------------------------------------------------------------------ the winner
def best_text(rows: list) -> Text:
    """The best config against the default and the dispatcher's choice, and against the noise."""
    best = tuning.best_row(rows)
    if best is None:
        return Text("No correct config was timed.")
    spec = get(best["kernel"])
    good = tuning.timed_rows(rows)
    text = (f"Best: `{spec.label(best['params'])}`, **{best['tflops']:.1f} TFLOP/s**, {_pct(best):.0f}% of cuBLAS "
            f"({best['cublas_tflops']:.1f} TFLOP/s in the same run); {best.get('threads')} threads, "
            f"{best.get('registers')} registers, {best.get('active_warps')} warps per SM.")
    for flag, name in (("default", "the default"), ("chosen", "the dispatcher's choice at this size")):
        r = next((r for r in good if r.get(flag)), None)
        if r is None:
            continue
        if r is best:
            text += f" It is also {name}."
            continue
        rank = 1 + sum(o["tflops"] > r["tflops"] for o in good)
        text += (f" {name[0].upper() + name[1:]}, `{spec.label(r['params'])}`, ranks {rank} of {len(good)} at "
                 f"{r['tflops']:.1f} TFLOP/s, {100 * (best['tflops'] / r['tflops'] - 1):.1f}% behind.")
    ties = [r for r in good if r is not best and r["ms_p20"] <= best["ms_p80"]]
    band = 100 * (best["ms_p80"] / best["ms_p20"] - 1)
    text += f" The best config's 20/80 band is {band:.1f}% wide; " + (
        "no other config's band reaches into it: it stands apart from the launch-to-launch noise of this run, though "
        "a second run, at another clock or temperature, can still move configs this close." if not ties else
        "one other config's band reaches into it, so on another run that one could come first." if len(ties) == 1
        else f"{len(ties)} other configs' bands reach into it, so on another run any of them could come first.")
    return Text(text)


def searched_kernel(rows: list) -> str:
    """The kernel a recorded search tuned."""
    return next((r["kernel"] for r in rows if r.get("kernel")), tuning.TUNED_KERNEL)


def awaiting_text(rows: list) -> Text | None:
    """A line where the recorded search tuned another kernel than this chapter's (None otherwise)."""
    k = searched_kernel(rows)
    if k == tuning.TUNED_KERNEL:
        return None
    return Text(f"*This search was recorded on the `{k}` kernel, before this chapter tuned `{tuning.TUNED_KERNEL}`; "
                "the figures below show that search until the next record replaces it.*")


def comparison_rows(rows: list) -> tuple[dict | None, dict | None]:
    """(default, tuned): the two rows timed side by side at the end of the search, or, in a search
    recorded without them, the default's and the best config's rows of the search."""
    default = tuning.compared(rows, "default") or next((r for r in tuning.timed_rows(rows) if r.get("default")), None)
    return default, tuning.tuned_row(rows)


def comparison_table(rows: list) -> Table | Text:
    """The default config and the tuned one at the same shape: TFLOP/s, % of cuBLAS, registers, warps."""
    default, tuned = comparison_rows(rows)
    if tuned is None:
        return Text("No correct config was timed.")
    spec = get(tuned["kernel"])
    out = [{"config": what, "params": spec.label(r["params"]), "TFLOP/s": f"{r['tflops']:.1f}",
            "20/80 band": f"{r['tflops'] * r['ms'] / r['ms_p80']:.1f}–{r['tflops'] * r['ms'] / r['ms_p20']:.1f}",
            "% of cuBLAS": f"{_pct(r):.0f}%", "threads": r.get("threads"), "registers": r.get("registers"),
            "warps per SM": r.get("active_warps")}
           for what, r in (("default", default), ("tuned", tuned)) if r is not None]
    same = default is not None and default.get("status") == tuned.get("status") == "compared"
    return Table(out, caption=f"n = {tuned['M']}: " + ("both timed back to back at the end of the search, cuBLAS in "
                                                      "the same run" if same else "rows of the search"))


def comparison_text(rows: list) -> Text:
    """The tuned config against the default it started from, in one sentence."""
    default, tuned = comparison_rows(rows)
    if tuned is None or default is None:
        return Text("The search has no timed default to compare with.")
    gain = 100 * (tuned["tflops"] / default["tflops"] - 1)
    if tuned["params"] == default["params"]:
        return Text(f"The search found nothing faster than the default, `{get(tuned['kernel']).label(tuned['params'])}`"
                    f" ({tuned['tflops']:.1f} TFLOP/s).")
    verdict = "faster than" if gain > 0 else "slower than"
    return Text(f"The tuned config is **{abs(gain):.1f}% {verdict}** the default at n = {tuned['M']}: "
                f"{tuned['tflops']:.1f} against {default['tflops']:.1f} TFLOP/s.")


def phase_text(rows: list) -> Text:
    """How many configs each phase of the search timed, and where the best came from."""
    timed = tuning.timed_rows(rows)
    by = {p: sum(r.get("phase") == p for r in timed) for p in ("sample", "local")}
    best = tuning.best_row(rows)
    if not by["local"]:
        return Text(f"{len(timed)} correct configs timed, no local search recorded.")
    return Text(f"The random sample timed {by['sample']} configs, the local search {by['local']} more; the best came "
                f"from the {best.get('phase', 'sample')} phase.")


def warps_table(rows: list, top: int = 10) -> Table:
    """The fastest correct configs with their resident warps and registers (exercise 1)."""
    good = sorted(tuning.timed_rows(rows), key=lambda r: -r["tflops"])[:top]
    if not good:
        return Table([])
    spec = get(good[0]["kernel"])
    return Table([{"config": spec.label(r["params"]), "TFLOP/s": r["tflops"], "threads": r.get("threads"),
                   "registers": r.get("registers"), "warps per SM": r.get("active_warps")} for r in good],
                 caption=f"The {len(good)} fastest configs")


def warps_text(rows: list) -> Text:
    """Whether more resident warps went with more speed in the timed configs (rank correlation)."""
    good = [r for r in tuning.timed_rows(rows) if r.get("active_warps") is not None]
    if len(good) < 3:
        return Text("Too few timed configs to compare.")
    rho = _spearman([r["active_warps"] for r in good], [r["tflops"] for r in good])
    best = max(good, key=lambda r: r["tflops"])
    most = max(r["active_warps"] for r in good)
    return Text(f"Over {len(good)} correct configs the rank correlation between resident warps per SM and TFLOP/s "
                f"is {rho:+.2f}; the fastest config runs {best['active_warps']} warps per SM, where the most any "
                f"timed config has is {most}.")


def _spearman(a: list, b: list) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else 0.0


# ------------------------------------------------------------------ your GPU
def tune_here(kernel: str = tuning.TUNED_KERNEL, sample: int = 24, seed: int = 1):
    """On a GPU: prune offline, then check and time a sample of the survivors at n = 4096
    (1024 in quick mode), with a progress bar. Without one: how to run it."""
    spec = get(kernel)
    if not hardware.is_live():
        return Text(f"*No GPU here.* On a CUDA GPU this cell prunes the space of `{spec.name}` offline, then "
                    f"compiles, checks and times a sample of {sample} survivors on that GPU, with a progress bar, "
                    "and reports the fastest correct config.")

    quick = settings.quick()
    found = tuning.candidates(spec, hardware.current(), sample=max(40, sample), seed=seed,
                              fixed=tuning.pinned(spec, tuning.SWEEP_PINNED))
    chosen = tuning.sample_configs(found.configs, 6 if quick else sample, seed=seed, keep=[spec.defaults()])
    return tuning.tune(spec, 1024 if quick else tuning.SWEEP_N, chosen)

