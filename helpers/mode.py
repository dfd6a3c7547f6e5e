"""Live or recorded: which mode the notebooks run in.

Live: a CUDA GPU is present, so widgets compile and time kernels now.
Recorded: no GPU (the online book), so figures read `book/data/*.json`, which
`python -m helpers record` measured on a real GPU.

The environment variable ``SGEMM_BOOK_MODE`` (``live`` or ``recorded``) forces a
mode; ``live`` with no GPU is an error rather than a silent fallback.
"""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy
    except Exception:  # no CuPy at all, or a broken CUDA install
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


def mode() -> str:
    """``"live"`` or ``"recorded"``."""
    forced = os.environ.get("SGEMM_BOOK_MODE", "").strip().lower()
    if forced == "recorded":
        return "recorded"
    if forced == "live":
        if not gpu_available():
            raise RuntimeError("SGEMM_BOOK_MODE=live but no CUDA GPU is available to CuPy")
        return "live"
    if forced:
        raise ValueError(f"SGEMM_BOOK_MODE must be 'live' or 'recorded', got {forced!r}")
    return "live" if gpu_available() else "recorded"


def is_live() -> bool:
    return mode() == "live"


def quick() -> bool:
    """Live sweeps shrink to small sizes (for testing notebooks quickly on a GPU)."""
    return os.environ.get("SGEMM_BOOK_QUICK", "") not in ("", "0")


def device_name() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def banner():
    """A visible note saying which mode this page runs in (displayed as HTML)."""
    from IPython.display import HTML

    if is_live():
        text = (f"<b>Live mode</b>: kernels are compiled and timed on your "
                f"<b>{device_name()}</b> as the cells run.")
        colour = "#e6f4ea"
    else:
        from .data import load

        d = load()
        text = (f"<b>Recorded mode</b>: no GPU here, so the figures show measurements "
                f"recorded on an <b>{d.device['name']}</b> with <code>python -m helpers record</code> "
                f"(see the status page). Run the notebook on a CUDA GPU to measure your own.")
        colour = "#eef3fb"
    return HTML(f'<div class="sgemm-mode" style="background:{colour};padding:0.6em 1em;'
                f'border-radius:6px;margin:0.5em 0">{text}</div>')
