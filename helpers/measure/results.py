"""One data path for every chapter: ``results(chapter)``, live or recorded.

* Recorded mode (no GPU, the online book): the chapter's rows from the reference
  device's file in ``book/data``, with that chapter's device block.
* Live mode (a GPU): the rows measured on this GPU. Each measured row is cached on disk,
  keyed by the device, the kernel's source hash, the config and the shape, so a later
  chapter that compares with an earlier one reads the earlier one's rows instead of
  measuring them again, and a notebook run twice measures once. Changing a kernel file
  changes its hash: its rows are measured anew.

Either way a :class:`ResultSet` carries its rows, the :class:`~helpers.hardware.Device`
they were measured on (figures draw that device's roofs), and a label saying where
they came from.

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from dataclasses import dataclass

from .. import hardware, settings
from ..hardware import Device
from ..shapes import label as shape_label
from ..tables import Table
from ..runtime.spec import ConfigError, KernelSpec
from ..runtime.specs import get
from ..runtime.timing import measure
from . import datafile, sources
from .datafile import DataError


@dataclass
class ResultSet:
    """A chapter's rows and where they came from."""

    chapter: str
    rows: list
    device: Device
    source: str           # "measured live on ...", "recorded on ..., date"
    live: bool
    notes: tuple = ()     # configs the live device refused, and why

    def where(self, **match) -> list[dict]:
        """Rows whose fields (or params) equal the given values."""
        return [r for r in self.rows
                if all((r[k] if k in r else r.get("params", {}).get(k)) == v for k, v in match.items())]

    def row(self, kernel: str, params: dict | None = None, shape=None) -> dict:
        """The row of one kernel config at one shape (default: its default config, the largest square)."""
        spec = get(kernel)
        params = spec.resolve(params)
        rows = [r for r in self.rows if r["kernel"] == spec.name and r["params"] == params
                and (shape is None or (r["M"], r["N"], r["K"]) == tuple(shape))]
        if shape is None:
            rows = [r for r in rows if r["M"] == r["N"] == r["K"]]
        if not rows:
            raise KeyError(f"{self.source}: no row for {spec.name} {spec.label(params)}"
                           + (f" at {'x'.join(map(str, shape))}" if shape else ""))
        return max(rows, key=lambda r: r["M"] * r["N"] * r["K"])

    @property
    def all_correct(self) -> bool:
        return all(r.get("ok", True) for r in self.rows)

    def correctness(self) -> str:
        """One line: how many rows, whether all were correct, the largest error."""
        errs = [r["rel_err"] for r in self.rows if r.get("rel_err") is not None]
        wrong = sum(1 for r in self.rows if r.get("ok") is False)
        verdict = "all correct" if not wrong else f"{wrong} WRONG"
        worst = f"; largest relative error {max(errs):.1e}" if errs else ""
        return f"{len(self.rows)} measurements ({self.source}): {verdict}{worst}"

    def __repr__(self):
        return self.correctness()

    def table(self, rows: list | None = None, columns=("kernel", "config", "shape", "TFLOP/s", "% of cuBLAS",
                                                       "cuBLAS TFLOP/s", "correct")) -> Table:
        """The rows (default: all) as a table; columns from :func:`describe`."""
        return Table([describe(r) for r in (self.rows if rows is None else rows)], list(columns))


def describe(r: dict) -> dict:
    """A timing row in words: config label, shape, speeds, the time band, correctness."""
    try:
        config = get(r["kernel"]).label(r["params"])
    except KeyError:
        config = ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items())
    pct = 100 * r["tflops"] / r["cublas_tflops"] if r.get("tflops") and r.get("cublas_tflops") else None
    return {"kernel": r["kernel"], "config": config, "shape": shape_label((r["M"], r["N"], r["K"])),
            "TFLOP/s": r.get("tflops"), "% of cuBLAS": pct, "cuBLAS TFLOP/s": r.get("cublas_tflops"),
            "ms": r.get("ms"), "ms (20-80%)": f"{r['ms_p20']:.3g}-{r['ms_p80']:.3g}" if r.get("ms_p20") else None,
            "correct": r.get("ok"), "relative error": r.get("rel_err")}


# ------------------------------------------------------------------ live rows
def _cache_file(device: Device):
    return settings.cache_dir() / "live" / f"{datafile.slug(device.label)}.json"


def _key(spec: KernelSpec, params: dict, shape, device: Device) -> str:
    text = json.dumps([device.label, spec.name, params, list(shape), spec.source_hash(), settings.quick()],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _load_cache(device: Device) -> dict:
    try:
        return json.loads(_cache_file(device).read_text())
    except (OSError, ValueError):
        return {}


def _store(device: Device, new: dict) -> None:
    if not new:
        return
    cache = _load_cache(device) | new           # re-read: another notebook may have added rows
    try:
        datafile.write_atomic(_cache_file(device), json.dumps(cache, allow_nan=False))
    except OSError:
        pass


def clear_live_cache() -> None:
    """Forget every row measured live on this GPU: the next request measures again."""
    path = _cache_file(hardware.current())
    if path.exists():
        path.unlink()


def shrink(items: list) -> list:
    """Quick mode: only shapes up to 1024 in every dimension (at least one item)."""
    small = [it for it in items if max(it[2]) <= 1024]
    return small or items[:1]


def measure_items(items: list, device: Device, log=None, cached: bool = True,
                  target_s: float = 0.4) -> tuple[list[dict], list[str]]:
    """Rows of (spec, params, shape) items measured on this GPU, and a note for each config
    the device refuses. ``cached``: reuse (and keep) rows of the live cache; ``record``
    measures everything afresh. ``target_s``: seconds of timed launches per item."""
    log = log if log is not None else (lambda line: print(line, flush=True))
    cache, new, rows, notes = (_load_cache(device) if cached else {}), {}, [], []
    t0 = time.time()
    for i, (spec, params, (M, N, K)) in enumerate(items, 1):
        key = _key(spec, spec.resolve(params), (M, N, K), device)
        if key in cache:
            rows.append(cache[key])
            continue
        try:
            r = measure(spec, M, N, K, params, target_s=min(0.1, target_s) if settings.quick() else target_s,
                        device=device).as_dict()
        except ConfigError as exc:
            notes.append(str(exc).split(" A valid alternative")[0])
            log(f"[{i}/{len(items)}] refused on {device.label}: {notes[-1]}")
            continue
        r["measured"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        rows.append(r)
        new[key] = r
        flag = "ok" if r["ok"] else f"WRONG (rel err {r['rel_err']})"
        log(f"[{i}/{len(items)}] {spec.name} {spec.label(r['params'])} {M}x{N}x{K}: {r['tflops']:6.2f} TFLOP/s, "
            f"cuBLAS {r['cublas_tflops']:6.2f}  {flag}  ({time.time() - t0:.0f} s)")
    if cached:
        _store(device, new)
    return rows, notes


# ------------------------------------------------------------------ the path
def results(chapter: str) -> ResultSet:
    """A chapter's measurements: measured on this GPU (live) or read from book/data (recorded)."""
    source = sources.get(chapter)
    if hardware.is_live() and source.live:
        device = hardware.current()
        if isinstance(source, sources.Sweep):
            items = source.items(device)
            rows, notes = measure_items(shrink(items) if settings.quick() else items, device, target_s=source.target_s)
        else:
            rows, notes = source.run(), []
        return ResultSet(chapter, rows, device, f"measured live on {device.label}", True, tuple(notes))
    return recorded(chapter)


def recorded(chapter: str) -> ResultSet:
    """A chapter's rows as recorded in book/data, in either mode."""
    rec = datafile.load()
    ch = rec.chapter(chapter)
    return ResultSet(chapter, ch["rows"], Device.from_record(ch["device"]), rec.label(chapter), False)


def step(kernel: str, n: int = 4096, params: dict | None = None) -> tuple[dict, str]:
    """(row, source) of one kernel config at n x n x n, for comparing chapters.

    Recorded: the row in the kernel's chapter. Live: measured now (or read from the live
    cache); a quick live run measures n = 1024 at most, and the row says which n it is.
    """
    spec = get(kernel)
    params = spec.resolve(params)
    if hardware.is_live():
        device = hardware.current()
        n = min(n, 1024) if settings.quick() else n
        rows, notes = measure_items([(spec, params, (n, n, n))], device, log=lambda line: None)
        if not rows:
            raise ConfigError(notes[0])
        return rows[0], f"measured live on {device.label}"
    rs = results(spec.chapter)
    return rs.row(spec.name, params, (n, n, n)), rs.source


__all__ = ["ResultSet", "results", "step", "clear_live_cache", "DataError"]
