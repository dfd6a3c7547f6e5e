"""The "try it" panel of every chapter: pick a config, see what it costs, then time it.

``panel(kernel)`` on a GPU (live mode) is an ipywidgets panel: one drop-down per
template parameter and a size. Every change is validated at once against the GPU's
limits (a refusal names the broken rule and a valid alternative, in milliseconds);
a valid config shows its tile's arithmetic intensity, its registers, spills and
occupancy from the offline compile, before anyone waits for a timing. "Compile, check
and time" then checks it against cuBLAS on random data and times both; each run
becomes a bar next to cuBLAS and a point on the GPU's roofline.

With no GPU (the online book) the same call shows what the panel would have measured: the
kernel's recorded configs at every size as a figure (a menu over the sizes) and, in a
collapsed block, what the panel does on a GPU and a table of the fastest recorded configs at
the largest size, each against cuBLAS at the same shape.

Taught in the chapter "The naive kernel".
"""
from __future__ import annotations

import html
import time

from .. import hardware
from ..hardware import occupancy
from ..measure import datafile
from ..measure.results import results
from ..models.roofline import intensity
from ..runtime import offline
from ..runtime.spec import ConfigError
from ..runtime.specs import get
from ..runtime.timing import measure
from ..tables import Table, Text
from . import results as result_figures
from . import style


def _report(spec, params, n: int, device) -> str:
    """What a valid config costs, before it runs: intensity, registers, spills, occupancy."""
    ai = intensity(spec, params, n, n, n)
    text = (f"arithmetic intensity {ai:.2f} FLOP/byte at n={n} (the {device.label}'s roofs meet at "
            f"{device.ridge:.1f}); {spec.threads(params)} threads per block")
    try:
        res = offline.resources(spec, params, device)
    except (offline.ToolMissing, offline.CompileError) as exc:
        return text + f"; <i>no offline compile report: {html.escape(str(exc).splitlines()[0])}</i>"
    spills = (f'<b style="color:#b00">spills {res.spill_stores + res.spill_loads} B to local memory</b>'
              if res.spills else "no spills")
    occ = occupancy(spec.threads(params), res.registers, res.smem, device)
    return (text + f"; {res.registers} registers/thread, {res.smem:,} B shared memory/block, {spills}; "
            f"{occ.active_warps}/{occ.max_warps} warps per SM ({occ.blocks_per_sm} blocks, limited by {occ.limiter})")


def _figure(spec, rows, device):
    bars = result_figures.configs_measured(rows, f"measured live on {device.label}", title=f"{spec.title}: your runs")
    points = [{"name": f"{result_figures.config_label(r)} n={r['M']}", "kernel": r["kernel"],
               "intensity": intensity(spec, r["params"], r["M"], r["N"], r["K"]), "tflops": r["tflops"]}
              for r in rows]
    roof = result_figures.roofline(points, device, f"measured live on {device.label}",
                                   title="Your runs on this GPU's roofline")
    return bars, roof


def live_panel(kernel: str, params: list[str] | None = None, sizes=(1024, 2048, 4096)):
    import ipywidgets as W                     # noqa: PLC0415  (widgets exist only in live notebooks)
    from IPython.display import display        # noqa: PLC0415

    spec, device = get(kernel), hardware.current()
    names = params or spec.param_names
    by_name = {p.name: p for p in spec.params}
    layout, label_style = W.Layout(width="150px"), {"description_width": "52px"}
    pickers = {n: W.Dropdown(options=list(by_name[n].allowed), value=by_name[n].default, description=n,
                             layout=layout, style=label_style) for n in names}
    size = W.Dropdown(options=list(sizes), value=sizes[min(1, len(sizes) - 1)], description="n",
                      layout=layout, style=label_style)
    button = W.Button(description="Compile, check and time", button_style="primary", layout=W.Layout(width="220px"))
    report, status, out = W.HTML(), W.HTML(), W.Output()
    rows: list[dict] = []

    def config():
        return {n: w.value for n, w in pickers.items()}

    def on_change(_=None):
        try:
            full = spec.validate(config(), device=device)
        except ConfigError as exc:
            report.value = f'<span style="color:#b00">{html.escape(str(exc))}</span>'
            button.disabled = True
            return
        button.disabled = False
        report.value = "compiling offline for the resource report…"
        report.value = _report(spec, full, size.value, device)

    def on_click(_):
        n, t0 = size.value, time.time()
        button.disabled = True
        try:
            full = spec.validate(config(), device=device)
            status.value = f"checking against cuBLAS and timing {spec.label(full)} at n={n}…"
            r = measure(spec, n, n, n, full, device=device).as_dict()
        except Exception as exc:        # shown in the panel; the notebook keeps running
            status.value = f'<span style="color:#b00">{html.escape(type(exc).__name__ + ": " + str(exc))}</span>'
            button.disabled = False
            return
        rows.append(r)
        verdict = "matches cuBLAS" if r["ok"] else f'<b style="color:#b00">WRONG: relative error {r["rel_err"]}</b>'
        status.value = (f"{spec.label(full)}, n={n}: <b>{r['tflops']:.2f} TFLOP/s</b> "
                        f"({100 * r['tflops'] / r['cublas_tflops']:.0f}% of cuBLAS {r['cublas_tflops']:.2f}); "
                        f"{verdict} ({time.time() - t0:.1f} s)")
        with out:
            out.clear_output(wait=True)
            for fig in _figure(spec, rows, device):
                style.show(fig)
        button.disabled = False

    for w in list(pickers.values()) + [size]:
        w.observe(on_change, names="value")
    button.on_click(on_click)
    on_change()
    display(W.VBox([W.HBox(list(pickers.values()) + [size], layout=W.Layout(flex_flow="row wrap")),
                    report, button, status, out]))


RECORDED_ROWS = 8      # the fastest configs the recorded stand-in lists


def recorded_table(spec, rows: list[dict], source: str) -> Table:
    """The fastest recorded configs at the largest recorded size, each against cuBLAS at that shape."""
    big = max((r["M"] * r["N"] * r["K"], (r["M"], r["N"], r["K"])) for r in rows)[1]
    at = sorted((r for r in rows if (r["M"], r["N"], r["K"]) == big), key=lambda r: -r["tflops"])
    out = [{"config": result_figures.config_label(r), "TFLOP/s": round(r["tflops"], 2),
            "cuBLAS TFLOP/s": round(r["cublas_tflops"], 2), "% of cuBLAS": round(100 * r["tflops"] / r["cublas_tflops"]),
            "matches cuBLAS": "yes" if r["ok"] else "NO"} for r in at[:RECORDED_ROWS]]
    shown = "" if len(at) <= RECORDED_ROWS else f"the fastest {RECORDED_ROWS} of {len(at)} "
    return Table(out, caption=f"{spec.title}: {shown}configs at {big[0]} x {big[1]} x {big[2]}, {source}")


def panel(kernel: str, params: list[str] | None = None, sizes=(1024, 2048, 4096), recorded_figure: bool = True):
    """The live panel on a GPU; without one, what it would show: the kernel's recorded configs as
    a figure (``recorded_figure=False``: where the page shows that figure already), and
    (collapsed) what the panel does and a table of the fastest recorded configs."""
    from IPython.display import HTML, display  # noqa: PLC0415  (a notebook's or the book's display)

    spec = get(kernel)
    if hardware.is_live():
        return live_panel(spec.name, params, sizes)
    names = params or spec.param_names
    try:
        rs = results(spec.chapter)
    except datafile.DataError as exc:
        return Text(f"*No GPU here*, and nothing recorded to stand in for this panel ({exc}).")
    rows = [r for r in rs.rows if r.get("kernel") == spec.name and r.get("tflops")]
    if not rows:
        return Text(f"*No GPU here*, and nothing recorded to stand in for this panel ({rs.source} has no row "
                    f"of {spec.name}).")
    if recorded_figure:
        display(Text(f"*No GPU here, so this panel shows what it measured:* {spec.name}'s configs {rs.source}."))
        style.show(result_figures.configs_by_size(rows, rs.source, title=f"{spec.title}: the recorded configs"))
    else:
        display(Text(f"*No GPU here:* what this panel measured is the figure of {spec.name}'s configurations "
                     f"earlier on this page ({rs.source})."))
    what = (f"On a CUDA GPU this cell is a panel: pick {', '.join(names)} and a size n. It refuses a config that "
            "breaks a rule of the GPU and names the rule; for a valid one it shows the registers, spills and "
            "occupancy the compiler gives, then compiles it, checks it against cuBLAS and times both. The table "
            "lists what it measured for the fastest recorded configs.")
    return HTML(f"<details class='sgemm-panel'><summary>What this panel does on a GPU, and the fastest recorded "
                f"configs</summary><p>{html.escape(what)}</p>{recorded_table(spec, rows, rs.source)._repr_html_()}"
                "</details>")
