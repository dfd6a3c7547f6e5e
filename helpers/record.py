"""``python -m helpers record``: measure the chapters' sweeps on a GPU and save them.

Writes ``book/data/<device>.json`` (merging with chapters already recorded there
for the same device) with the device, driver, CUDA and CuPy versions, the date and
the git commit. Prints one progress line per measurement.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

from .data import DATA_DIR, SCHEMA, slug, validate
from .mode import quick
from .registry import ROOT


def device_info() -> dict:
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def ver(v):
        return f"{v // 1000}.{(v % 1000) // 10}"

    return {
        "name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": int(props["multiProcessorCount"]),
        "driver": ver(cupy.cuda.runtime.driverGetVersion()),
        "cuda_runtime": ver(cupy.cuda.runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "l2_bytes": int(props["l2CacheSize"]),
        "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
        "clock_mhz": int(props.get("clockRate", 0)) // 1000,
        "nvidia_smi_driver": _smi_driver(),
    }


def _smi_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except Exception:
        return ""


def git_commit() -> str:
    env = os.environ.get("SGEMM_BOOK_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
        if out.returncode:
            return "unknown"
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except Exception:
        return "unknown"


def shrink(items: list) -> list:
    """Quick mode: keep only shapes up to 1024 in every dimension (at least one item)."""
    small = [it for it in items if max(it[2]) <= 1024]
    return small or items[:1]


def run_sweep(items: list, log=None) -> list[dict]:
    """Measure (spec, params, shape) items, printing progress; returns Result dicts."""
    from .bench import measure

    log = log or (lambda line: print(line, flush=True))

    if quick():
        items = shrink(items)
    cache: dict = {}
    rows = []
    t0 = time.time()
    for i, (spec, params, (M, N, K)) in enumerate(items, 1):
        r = measure(spec, M, N, K, params, cublas_cache=cache, target_s=0.1 if quick() else 0.4)
        rows.append(r.as_dict())
        flag = "ok" if r.ok else f"WRONG (rel err {r.rel_err:.1e})"
        log(f"[{i}/{len(items)}] {spec.name} {spec.label_of(r.params)} {M}x{N}x{K}: "
            f"{r.tflops:6.2f} TFLOP/s, cuBLAS {r.cublas_tflops:6.2f}  {flag}  ({time.time() - t0:.0f} s)")
    return rows


def save_chapter(chapter: str, rows: list, kind: str = "timing", command: str | None = None) -> str:
    """Merge one chapter's rows into this device's data file; returns the path."""
    info = device_info()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / f"{slug(info['name'])}.json"
    doc = {"schema": SCHEMA, "device": info, "chapters": {}}
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("schema") == SCHEMA:
            doc["chapters"] = old.get("chapters", {})
    doc["chapters"][chapter] = {
        "recorded": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "command": command or "python -m " + " ".join(["helpers"] + sys.argv[1:]),
        "kind": kind,
        "rows": rows,
    }
    doc["chapters"] = dict(sorted(doc["chapters"].items()))
    validate(doc, path.name)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return str(path)


def record(chapters: list[str] | None = None) -> None:
    from .mode import gpu_available
    from .specs import sweeps

    if not gpu_available():
        sys.exit("record needs a CUDA GPU (cupy.cuda.is_available() is False)")
    if quick():
        sys.exit("refusing to record with SGEMM_BOOK_QUICK set: recorded data must be full sweeps")
    table = sweeps()
    extra = extra_recorders()
    names = chapters or sorted(table) + sorted(extra)
    unknown = [c for c in names if c not in table and c not in extra]
    if unknown:
        sys.exit(f"unknown chapter(s) {unknown}; known: {sorted(table) + sorted(extra)}")
    for chapter in names:
        print(f"== {chapter} ==", flush=True)
        if chapter in table:
            path = save_chapter(chapter, run_sweep(table[chapter]))
        else:
            path = save_chapter(chapter, extra[chapter](), kind="table")
        print(f"   saved to {os.path.relpath(path, ROOT)}", flush=True)


TABLE_RECORDERS: dict = {}


def table_recorder(chapter: str):
    """Register ``fn() -> list[dict]`` as the recorder of a "table" chapter.

    For data that are not timing sweeps: profiler counters, sanitizer reports.
    The module defining it must live in the ``helpers`` package.
    """
    def wrap(fn):
        TABLE_RECORDERS[chapter] = fn
        return fn
    return wrap


def extra_recorders() -> dict:
    """Chapters whose data are tables rather than timing sweeps (profiler, sanitizer)."""
    import importlib
    import pkgutil

    import helpers

    for info in pkgutil.iter_modules(helpers.__path__):
        if info.name not in ("__main__",) and not info.ispkg:
            importlib.import_module(f"helpers.{info.name}")
    return dict(TABLE_RECORDERS)
