"""Recorded measurements on disk: the schema, choosing a device's file, reading and writing it safely.

``book/data/<device>.json`` is written only by ``python -m helpers record`` (and
``bench --record``) on a GPU. Layout (schema 2)::

    {"schema": 2,
     "chapters": {"naive": {"device": {"name", "compute_capability", "sm_count", "clock_mhz",
                                       "l2_bytes", "bandwidth_gbs", "driver", "cuda_runtime", "cupy", ...},
                            "recorded": ISO date, "git_commit": str, "command": str,
                            "kind": "timing" | "table", "rows": [...]}, ...}}

Each chapter keeps the device block and versions of the run that recorded it. "timing"
rows are :class:`helpers.runtime.timing.Result` dicts, with the hash of the kernel
source they measured; "table" rows are free-form (sanitizer reports, profiler counters).
The files are strict JSON: no NaN or Infinity, a missing number is ``null``.

Several device files may sit side by side (that is how readers contribute theirs);
the book reads the one of its reference device (``pyproject.toml``, or
``SGEMM_BOOK_DEVICE``). A file that is not valid device data is ignored with a warning.
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import settings

SCHEMA = 2
DEVICE_KEYS = {"name": str, "compute_capability": str, "sm_count": int, "clock_mhz": int, "l2_bytes": int,
               "bandwidth_gbs": (int, float), "driver": str, "cuda_runtime": str, "cupy": str}
CHAPTER_KEYS = {"device": dict, "recorded": str, "git_commit": str, "command": str, "kind": str, "rows": list}
TIMING_KEYS = {"kernel": str, "params": dict, "M": int, "N": int, "K": int, "ms": (int, float),
               "ms_p20": (int, float), "ms_p80": (int, float), "tflops": (int, float),
               "cublas_ms": (int, float), "cublas_tflops": (int, float), "rel_err": (int, float, type(None)),
               "ok": bool, "source_hash": str}


class DataError(ValueError):
    """A recorded-data file is missing, malformed, ambiguous, or lacks what was asked for."""


def slug(device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", device_name).strip("_")


def _require(obj, keys: dict, where: str) -> None:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected an object, got {type(obj).__name__}")
    for key, typ in keys.items():
        if key not in obj:
            raise DataError(f"{where}: missing key {key!r}")
        if not isinstance(obj[key], typ) or (typ is int and isinstance(obj[key], bool)):
            raise DataError(f"{where}.{key}: expected {typ}, got {type(obj[key]).__name__}")


def validate(doc, source: str = "data") -> dict:
    """Check a recorded-data document against the schema; raise DataError on any defect."""
    _require(doc, {"schema": int, "chapters": dict}, source)
    if doc["schema"] != SCHEMA:
        raise DataError(f"{source}: schema {doc['schema']}, but this version of the book reads and writes "
                        f"schema {SCHEMA}; record the device again, or move the file aside")
    names = set()
    for name, ch in doc["chapters"].items():
        where = f"{source}.chapters.{name}"
        _require(ch, CHAPTER_KEYS, where)
        _require(ch["device"], DEVICE_KEYS, f"{where}.device")
        names.add(ch["device"]["name"])
        if ch["kind"] not in ("timing", "table"):
            raise DataError(f"{where}.kind: must be 'timing' or 'table', got {ch['kind']!r}")
        for i, row in enumerate(ch["rows"]):
            if not isinstance(row, dict):
                raise DataError(f"{where}.rows[{i}]: expected an object")
            if ch["kind"] == "timing":
                _require(row, TIMING_KEYS, f"{where}.rows[{i}]")
                for k in ("ms", "tflops", "cublas_ms", "cublas_tflops"):
                    if not (math.isfinite(row[k]) and row[k] > 0):
                        raise DataError(f"{where}.rows[{i}].{k}: must be a positive number, got {row[k]}")
    if len(names) > 1:
        raise DataError(f"{source}: chapters of several devices in one file ({sorted(names)})")
    return doc


def device_name(doc: dict) -> str | None:
    return next((ch["device"]["name"] for ch in doc["chapters"].values()), None)


def dumps(doc: dict) -> str:
    """Strict JSON (``allow_nan=False``): what any JSON parser reads."""
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def shown(path: Path) -> str:
    """A file's path as a reader types it: relative to the working folder when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read(path: Path) -> dict:
    restore = f": re-record it (`python -m helpers record`) or restore it from git (`git checkout -- {shown(path)}`)"
    try:
        text = path.read_text()
    except OSError as exc:
        raise DataError(f"{shown(path)}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise DataError(f"{shown(path)} is not text (not UTF-8){restore}") from None
    try:
        doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(DataError(
            f"{shown(path)}: {c} is not JSON (a missing number is null)")))
    except json.JSONDecodeError as exc:
        raise DataError(f"{shown(path)} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                        f"{exc.msg}){restore}") from None
    try:
        return validate(doc, path.name)
    except DataError as exc:
        raise DataError(f"{shown(path).removesuffix(path.name)}{exc}{restore}") from None


# ------------------------------------------------------------------ reading
@dataclass
class Recorded:
    """One device's recorded data."""

    path: Path
    doc: dict

    @property
    def device_name(self) -> str:
        return device_name(self.doc)

    def chapter(self, name: str) -> dict:
        try:
            return self.doc["chapters"][name]
        except KeyError:
            raise DataError(f"{self.path.name} has no recorded chapter {name!r} "
                            f"(it has {sorted(self.doc['chapters'])}); record it on a GPU with "
                            f"`python -m helpers record --chapter {name}`") from None

    def has(self, name: str) -> bool:
        return name in self.doc["chapters"]

    def label(self, name: str) -> str:
        ch = self.chapter(name)
        return f"recorded on {ch['device']['name']}, {ch['recorded'][:10]}"


def device_files() -> dict[str, Path]:
    """{device name: file} for every valid device file in the data folder; others are ignored
    with a warning. Two files for one device are an error: the book could not know which."""
    found: dict[str, list[Path]] = {}
    for path in sorted(settings.data_dir().glob("*.json")):
        try:
            doc = read(path)
        except DataError as exc:
            warnings.warn(f"ignoring {path.name}: {exc}", stacklevel=2)
            continue
        name = device_name(doc)
        if name is None:
            warnings.warn(f"ignoring {path.name}: it records no chapter", stacklevel=2)
            continue
        found.setdefault(name, []).append(path)
    twice = {n: ps for n, ps in found.items() if len(ps) > 1}
    if twice:
        raise DataError("several files record the same device: " + "; ".join(
            f"{n}: {', '.join(p.name for p in ps)}" for n, ps in twice.items()) + "; keep one")
    return {n: ps[0] for n, ps in found.items()}


def load(device: str | None = None) -> Recorded:
    """The recorded data of ``device`` (default: the book's reference device)."""
    want = device or settings.reference_device()
    own = path_for(want)
    if own.exists():          # the device's own file: any defect in it is the error, not "no data"
        doc = read(own)
        if device_name(doc) in (None, want):
            device_files()    # two files for one device stay an error
            if device_name(doc) is None:
                raise DataError(f"{shown(own)} records no chapter yet: run `python -m helpers record` on a {want}")
            return Recorded(own, doc)
    files = device_files()
    if want not in files:
        have = ", ".join(sorted(files)) or "none"
        raise DataError(f"no recorded data for {want!r} in {settings.data_dir()} (devices recorded: {have}); "
                        "set SGEMM_BOOK_DEVICE to one of them, or run `python -m helpers record` on that GPU")
    path = files[want]
    return Recorded(path, read(path))


# ------------------------------------------------------------------ writing
def path_for(name: str) -> Path:
    return settings.data_dir() / f"{slug(name)}.json"


def existing(name: str) -> dict:
    """The device's current document, validated, before anything is measured.

    Raises DataError (and leaves the file alone) when it cannot be merged into."""
    path = path_for(name)
    if not path.exists():
        return {"schema": SCHEMA, "chapters": {}}
    doc = read(path)
    if device_name(doc) not in (None, name):
        raise DataError(f"{path.name} records {device_name(doc)!r}, not {name!r}")
    return doc


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file, flushed to disk, renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def save_chapter(chapter: str, entry: dict) -> Path:
    """Merge one chapter (``device``, ``recorded``, ``git_commit``, ``command``, ``kind``, ``rows``)
    into its device's file; every other chapter stays as it was."""
    name = entry["device"]["name"]
    doc = existing(name)
    doc["chapters"][chapter] = entry
    doc["chapters"] = dict(sorted(doc["chapters"].items()))
    path = path_for(name)
    validate(doc, path.name)
    write_atomic(path, dumps(doc))
    return path
