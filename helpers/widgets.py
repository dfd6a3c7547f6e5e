"""Live-mode panels (ipywidgets): pick a kernel config, then compile, check and time it.

Taught in the naive-kernel chapter. Panels exist only in live mode (a CUDA GPU is
present); the built book shows the same exploration as Plotly figures with sliders
over recorded sweeps. Every run is checked against cuBLAS before it is timed, and
each measured config becomes a point in the panel's figure next to cuBLAS.
"""
from __future__ import annotations

import html
import time

from .registry import ConfigError, get


def _resource_line(spec, params) -> str:
    """Registers, shared memory, spills and occupancy, from the offline compile."""
    try:
        from .resources import resources

        res = resources(spec, params)
    except Exception as exc:  # no NVRTC wheel, or a compile error
        return f"<i>resource report unavailable: {html.escape(str(exc).splitlines()[0])}</i>"
    spills = '<b style="color:#b00">spills</b>' if res.spills else "no spills"
    text = f"{res.registers} registers/thread, {res.smem} B shared memory/block, {spills}"
    try:
        from .occupancy import occupancy

        bx, by, bz = spec.block(params)
        occ = occupancy(bx * by * bz, res.registers, res.smem)
        text += (f"; occupancy {occ.active_warps}/{occ.max_warps} warps per SM "
                 f"({occ.blocks_per_sm} blocks, limited by {occ.limiter})")
    except Exception:
        pass
    return text


def kernel_panel(kernel: str, params: list[str] | None = None, sizes=(1024, 2048, 4096)):
    """A panel with one dropdown per template parameter and a size.

    The config is validated as you choose (a refusal names the broken rule and a
    valid alternative); "Compile, check and time" compiles it, checks it against
    cuBLAS on random data, times it and cuBLAS in the same run, and adds the
    result to the panel's table and figure.
    """
    import ipywidgets as W
    from IPython.display import display

    from . import plots
    from .bench import measure

    spec = get(kernel)
    names = params or [p.name for p in spec.params]
    by_name = {p.name: p for p in spec.params}
    pickers = {n: W.Dropdown(options=list(by_name[n].allowed), value=by_name[n].default,
                             description=n, layout=W.Layout(width="160px"),
                             style={"description_width": "48px"})
               for n in names}
    size = W.Dropdown(options=list(sizes), value=sizes[min(1, len(sizes) - 1)], description="n",
                      layout=W.Layout(width="160px"), style={"description_width": "48px"})
    button = W.Button(description="Compile, check and time", button_style="primary",
                      layout=W.Layout(width="220px"))
    status = W.HTML()
    report = W.HTML()
    figure = W.Output()
    rows: list[dict] = []

    def config():
        return {n: w.value for n, w in pickers.items()}

    def on_change(_=None):
        try:
            full = spec.validate(config())
        except ConfigError as exc:
            report.value = f'<span style="color:#b00">{html.escape(str(exc))}</span>'
            button.disabled = True
            return
        button.disabled = False
        report.value = "checking resources…"
        report.value = _resource_line(spec, full)

    def on_click(_):
        n = size.value
        button.disabled = True
        t0 = time.time()
        try:
            full = spec.validate(config())
            status.value = f"compiling, checking against cuBLAS and timing {spec.label_of(full)} at n={n}…"
            r = measure(spec, n, n, n, full)
        except Exception as exc:
            status.value = f'<span style="color:#b00">{html.escape(type(exc).__name__ + ": " + str(exc))}</span>'
            button.disabled = False
            return
        rows.append(r.as_dict())
        verdict = ("matches cuBLAS" if r.ok else
                   f'<b style="color:#b00">WRONG: relative error {r.rel_err:.1e}</b>')
        status.value = (f"{spec.label_of(full)}, n={n}: <b>{r.tflops:.2f} TFLOP/s</b> "
                        f"({100 * r.tflops / r.cublas_tflops:.0f}% of cuBLAS {r.cublas_tflops:.2f}); "
                        f"{verdict} ({time.time() - t0:.1f} s)")
        with figure:
            figure.clear_output(wait=True)
            plots.show(plots.configs_measured(rows, f"measured live on {_device()}",
                                              title=f"{spec.title}: your runs"))
        button.disabled = False

    for w in pickers.values():
        w.observe(on_change, names="value")
    button.on_click(on_click)
    on_change()
    return W.VBox([W.HBox(list(pickers.values()) + [size]), report, W.HBox([button]), status, figure])


def _device() -> str:
    from .mode import device_name

    return device_name()
