"""Recorded measurements: the schema, the loader, and ``results()`` (live or recorded).

``book/data/<device>.json`` is written only by ``python -m helpers record`` on a
GPU. Layout::

    {"schema": 1,
     "device": {"name", "compute_capability", "sm_count", "driver", "cuda_runtime",
                "cupy", "l2_bytes", ...},
     "chapters": {"naive": {"recorded": ISO date, "git_commit": str, "command": str,
                            "kind": "timing" | "table", "rows": [...]}, ...}}

"timing" rows are :class:`helpers.bench.Result` dicts; "table" rows are free-form
dicts (sanitizer reports, profiler counters).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .registry import ROOT

DATA_DIR = ROOT / "book" / "data"
SCHEMA = 1
DEVICE_KEYS = {"name": str, "compute_capability": str, "sm_count": int, "driver": str,
               "cuda_runtime": str, "cupy": str}
CHAPTER_KEYS = {"recorded": str, "git_commit": str, "command": str, "kind": str, "rows": list}
TIMING_KEYS = {"kernel": str, "params": dict, "M": int, "N": int, "K": int, "ms": (int, float),
               "ms_p20": (int, float), "ms_p80": (int, float), "tflops": (int, float),
               "cublas_ms": (int, float), "cublas_tflops": (int, float),
               "rel_err": (int, float), "ok": bool}


class DataError(ValueError):
    """A recorded-data file is missing, malformed, or lacks what was asked for."""


def slug(device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", device_name).strip("_")


def _require(obj: dict, keys: dict, where: str):
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected an object, got {type(obj).__name__}")
    for key, typ in keys.items():
        if key not in obj:
            raise DataError(f"{where}: missing key {key!r}")
        if not isinstance(obj[key], typ) or (typ is int and isinstance(obj[key], bool)):
            raise DataError(f"{where}.{key}: expected {typ}, got {type(obj[key]).__name__}")


def validate(doc: dict, source: str = "data") -> dict:
    """Check a recorded-data document against the schema; raise DataError on any defect."""
    _require(doc, {"schema": int, "device": dict, "chapters": dict}, source)
    if doc["schema"] != SCHEMA:
        raise DataError(f"{source}: schema {doc['schema']} is not the supported {SCHEMA}")
    _require(doc["device"], DEVICE_KEYS, f"{source}.device")
    for name, ch in doc["chapters"].items():
        where = f"{source}.chapters.{name}"
        _require(ch, CHAPTER_KEYS, where)
        if ch["kind"] not in ("timing", "table"):
            raise DataError(f"{where}.kind: must be 'timing' or 'table', got {ch['kind']!r}")
        for i, row in enumerate(ch["rows"]):
            if ch["kind"] == "timing":
                _require(row, TIMING_KEYS, f"{where}.rows[{i}]")
                for k in ("ms", "tflops", "cublas_ms", "cublas_tflops"):
                    if not (math.isfinite(row[k]) and row[k] > 0):
                        raise DataError(f"{where}.rows[{i}].{k}: must be a positive number, got {row[k]}")
            elif not isinstance(row, dict):
                raise DataError(f"{where}.rows[{i}]: expected an object")
    return doc


@dataclass
class Recorded:
    path: Path
    doc: dict

    @property
    def device(self) -> dict:
        return self.doc["device"]

    def chapter(self, name: str) -> dict:
        try:
            return self.doc["chapters"][name]
        except KeyError:
            raise DataError(f"{self.path.name} has no recorded chapter {name!r} "
                            f"(it has {sorted(self.doc['chapters'])}); record it on a GPU with "
                            f"`python -m helpers record --chapter {name}`") from None

    def rows(self, name: str) -> list[dict]:
        return self.chapter(name)["rows"]

    def label(self, name: str) -> str:
        ch = self.chapter(name)
        return f"recorded on {self.device['name']}, {ch['recorded'][:10]}"


def data_dir() -> Path:
    """``book/data``, or ``SGEMM_BOOK_DATA_DIR`` when set (for testing the loader)."""
    return Path(os.environ.get("SGEMM_BOOK_DATA_DIR") or DATA_DIR)


def data_files() -> list[Path]:
    return sorted(data_dir().glob("*.json"))


def load(device: str | None = None, path: str | Path | None = None) -> Recorded:
    """Load and validate one device's recorded data.

    ``device`` (or ``SGEMM_BOOK_DEVICE``) picks a file by device name; by default
    the first file in ``book/data``.
    """
    if path is None:
        files = data_files()
        if not files:
            raise DataError(f"no recorded data in {data_dir()}; run `python -m helpers record` on a GPU")
        want = device or os.environ.get("SGEMM_BOOK_DEVICE")
        if want:
            matches = [f for f in files if f.stem == slug(want)]
            if not matches:
                raise DataError(f"no recorded data for device {want!r}; have {[f.stem for f in files]}")
            path = matches[0]
        else:
            path = files[0]
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path.name} is not valid JSON: {exc}") from None
    return Recorded(path, validate(doc, path.name))


@dataclass
class ResultSet:
    """Rows plus where they came from, for figure labels."""

    rows: list[dict]
    source: str  # "measured live on NVIDIA ..." or "recorded on NVIDIA ..., date"
    live: bool

    def where(self, **match) -> list[dict]:
        """Rows whose fields (or params) equal the given values."""
        out = []
        for r in self.rows:
            if all((r.get(k) if k in r else r["params"].get(k)) == v for k, v in match.items()):
                out.append(r)
        return out


def results(chapter: str, sweep: list | None = None) -> ResultSet:
    """A chapter's measurements: measured now on a GPU (live) or read from book/data."""
    from .mode import device_name, is_live

    if is_live():
        from .record import run_sweep
        from .specs import sweeps

        items = sweep if sweep is not None else sweeps().get(chapter)
        if not items:
            raise DataError(f"no sweep is defined for chapter {chapter!r}")
        rows = run_sweep(items)
        return ResultSet(rows, f"measured live on {device_name()}", True)
    rec = load()
    return ResultSet(rec.rows(chapter), rec.label(chapter), False)
