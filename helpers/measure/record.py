"""``python -m helpers record``: measure chapters on a GPU and save them in book/data.

For each chapter it runs the chapter's registered source (:mod:`helpers.measure.sources`)
and merges the rows into ``book/data/<device>.json`` (or ``SGEMM_BOOK_DATA_DIR``) with
the device, driver, CUDA and CuPy versions, the date and the git commit of that run.

Safe by construction: the existing file is read and validated *before* anything is
measured (a file this version cannot merge into is refused, untouched); each chapter
is written as soon as it is measured, through a temporary file renamed over the old
one, so a failure at any point leaves the previous file or the new one, never half of it.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import cupy

from .. import hardware, settings
from . import datafile, sources
from .results import measure_items


class RecordError(RuntimeError):
    """Recording cannot start (no GPU, quick mode, an unknown chapter, a file it may not merge into)."""


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _smi_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def device_block() -> dict:
    """The GPU and the software of this run, stored next to each chapter it records."""
    gpu = hardware.gpu()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return dict(gpu.as_record(), driver=_version(cupy.cuda.runtime.driverGetVersion()),
                cuda_runtime=_version(cupy.cuda.runtime.runtimeGetVersion()), cupy=cupy.__version__,
                nvrtc=".".join(map(str, cupy.cuda.nvrtc.getVersion())),
                memory_gib=round(props["totalGlobalMem"] / 2**30, 1), nvidia_smi_driver=_smi_driver())


def git_commit() -> str:
    if os.environ.get("SGEMM_BOOK_COMMIT"):
        return os.environ["SGEMM_BOOK_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=settings.ROOT,
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=settings.ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return "unknown" if head.returncode else head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def entry(device: dict, kind: str, rows: list, command: str | None = None) -> dict:
    return {"device": device, "recorded": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(), "command": command or "python -m " + " ".join(["helpers"] + sys.argv[1:]),
            "kind": kind, "rows": rows}


def check_can_record(chapters: list[str]) -> dict:
    """Everything that can refuse a recording, checked before the first measurement.
    Returns the device block."""
    for c in chapters:
        sources.get(c)
    if settings.target():
        raise RecordError(f"SGEMM_BOOK_TARGET={settings.target()} is set: recorded data must come from the GPU "
                          "itself, not an emulated target")
    if settings.quick():
        raise RecordError("SGEMM_BOOK_QUICK is set: recorded data must be full sweeps")
    if not hardware.gpu_available():
        raise RecordError("record needs a CUDA GPU (cupy.cuda.is_available() is False)")
    device = device_block()
    datafile.existing(device["name"])          # a file we may not merge into stops us here, untouched
    return device


def record(chapters: list[str] | None = None, log=print) -> list:
    """Measure the chapters (default: all) and save each one as soon as it is done."""
    names = chapters or list(sources.SOURCES)
    device = check_can_record(names)
    saved = []
    for chapter in names:
        log(f"== {chapter} ==")
        source = sources.get(chapter)
        if isinstance(source, sources.Sweep):
            rows, notes = measure_items(source.items(hardware.gpu()), hardware.gpu(), log=log, cached=False,
                                        target_s=source.target_s)
            for note in notes:
                log(f"   refused: {note}")
        else:
            rows = source.run()
        path = datafile.save_chapter(chapter, entry(device, source.kind, rows))
        log(f"   saved to {os.path.relpath(path, settings.ROOT)}")
        saved.append(path)
    return saved
