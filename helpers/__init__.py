"""The Python package behind the SGEMM book: what a chapter's cells call.

The package in layers, each importing only those below it:

* ``settings``, ``hardware``, ``shapes``, ``tables``: the environment, the device model
  (every hardware number), the problem shapes, tables that show themselves;
* ``runtime``: one spec per kernel file, and compiling, launching, checking and timing;
* ``models``: the analytic models the chapters teach (no GPU needed);
* ``measure``: recorded data, live results, and the commands that measure on a GPU;
* ``figures``: Plotly figures in one style, and the live panels;
* ``publish``: the book's Sphinx extension and the notebook export.
"""
from __future__ import annotations

from IPython.display import HTML, Markdown

from . import hardware, settings
from .figures.style import show
from .figures.widgets import panel
from .hardware import Device, is_live
from .measure.results import ResultSet, clear_live_cache, results, step
from .runtime.check import check
from .runtime.gemm import matmul as final_matmul
from .runtime.gemm import sgemm  # noqa: F401  (helpers.sgemm: C = alpha op(A) op(B) + beta C)
from .runtime.launch import matmul
from .runtime.source import kernel_source
from .runtime.spec import ConfigError
from .runtime.tune import tune  # noqa: F401  (helpers.tune: the fastest of the model's first options here)
from .runtime.specs import get as kernel
from .tables import Table, Text

__all__ = ["Device", "ConfigError", "ResultSet", "Table", "Text", "banner", "check", "clear_live_cache", "device",
           "final_matmul", "is_live", "kernel", "matmul", "panel", "results", "show", "show_kernel", "step",
           "validate"]


def device() -> Device:
    """The GPU this page is about: the one present (live), else the book's reference device."""
    return hardware.default()


def banner() -> HTML:
    """A note at the top of a chapter saying which mode it runs in."""
    if is_live():
        d = hardware.current()
        text = (f"<b>Live mode</b>: kernels are compiled and timed on your <b>{d.label}</b> as the cells run"
                + (f" (code compiled for {d.arch}, checked against that GPU's limits)" if d.emulated else "") + ".")
        colour = "#e6f4ea"
    else:
        text = (f"<b>Recorded mode</b>: no GPU here, so the figures show measurements recorded on an "
                f"<b>{settings.reference_device()}</b> with <code>python -m helpers record</code> (see the status "
                "page). Run the notebook on a CUDA GPU to measure your own.")
        colour = "#eef3fb"
    return HTML(f'<div class="sgemm-mode" style="background:{colour};padding:0.6em 1em;border-radius:6px;'
                f'margin:0.5em 0">{text}</div>')


def validate(name: str, **params) -> Text:
    """Check a config of a kernel against the device, as a sentence: valid, or the rule it
    breaks and the nearest valid config (the refusal ``prepare`` would raise, without a traceback)."""
    spec = kernel(name)
    try:
        full = spec.validate(params, device=device())
    except ConfigError as exc:
        return Text(f"**Refused.** {exc}")
    return Text(f"**Valid** on {device().label}: {spec.label(full)}, {spec.threads(full)} threads per block.")


def show_kernel(name: str, region: str | None = None) -> Markdown:
    """A kernel's source file (by kernel name, or a file name in kernels/ such as
    ``"common.cuh"``), as the book and any notebook show it: the file that runs. With
    ``region``, only the lines between ``// region NAME`` and ``// endregion NAME``."""
    return Markdown(kernel_source(name, region))
