"""The book's main line: one kernel per chapter, each building on the fastest kernel so far.

This is the one place that says which kernel, in which config, stands for each chapter on
the leaderboard (book/13_leaderboard.md), and which measured kernels are *variants*: kept
to teach something (a race, a pipeline the main line does not take, a kernel without edge
checks), measured beside the main line, never on it.

A step's config is the kernel's own choice for the shape (``spec.config_for``: its defaults,
or its ``choose``), except the autotuning step, which runs the warp-tiling kernel with the
config the recorded autotuning search of the same GPU found fastest (:func:`tuned_params`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.specs import get
from . import datafile

TUNED = "warptiling_tuned"    # the row name of the autotuning step
TIE = 0.01                    # a step within 1% of the one before is level with it, not above


@dataclass(frozen=True)
class Step:
    chapter: str        # the chapter this step stands for
    kernel: str         # the spec that runs
    name: str           # the rows' name on the leaderboard (the kernel's, or TUNED)
    config: str         # how its config is chosen, in words
    tie: str = ""       # why this step may be level with the one before (its chapter says so)


STEPS = (
    Step("naive", "naive", "naive", "defaults"),
    Step("coalescing", "coalescing", "coalescing", "defaults"),
    Step("smem_tiling", "smem_tiling", "smem_tiling", "defaults"),
    Step("thread_tile_1d", "thread_tile_1d", "thread_tile_1d", "defaults"),
    Step("thread_tile_2d", "thread_tile_2d", "thread_tile_2d", "defaults"),
    Step("vectorized", "vectorized", "vectorized", "defaults"),
    Step("bank_conflicts", "bank_conflicts", "bank_conflicts", "defaults"),
    Step("double_buffering", "double_buffering", "double_buffering",
         "the fast path (no edge checks) on shapes of whole 128 x 128 tiles"),
    Step("warptiling", "warptiling", "warptiling", "defaults",
         tie="the warp tile gives each shared-memory read more FFMA, but its 16 x 8 thread tile takes so "
             "many registers that an SM holds half the warps of the two-stage kernel"),
    Step("autotuning", "warptiling", TUNED, "the fastest config of the recorded autotuning search",
         tie="the search stays within the warp-tiling kernel's own space, whose best configs lie close "
             "to its default"),
    Step("final", "final", "final", "chosen per shape by its dispatcher"),
)

# Measured kernels that are not on the main line, and why they are kept.
VARIANTS = {
    "smem_tiling_unguarded": "chapter 4 without edge checks: only for shapes of whole tiles",
    "double_buffering_racy": "chapter 9 without the barrier after the first tile: kept to study the race",
    "cp_async": "chapter 9's cp.async pipeline: the final kernel builds on it, the main line does not",
}
CHECKED = "the checked two-stage kernel (FAST_PATH = 0), chapter 9's default for shapes of any size"

# The kernels the leaderboard runs besides the main line.
EXTRA = ("cp_async",)


def names() -> list[str]:
    """The main line's row names, in chapter order."""
    return [s.name for s in STEPS]


def step(name: str) -> Step:
    return next(s for s in STEPS if s.name == name)


def is_main(name: str) -> bool:
    return any(s.name == name for s in STEPS)


def entries() -> list[str]:
    """What the leaderboard runs: the main line, then the variants of :data:`EXTRA`."""
    return names() + [k for k in EXTRA if k not in names()]


def kernel_of(name: str) -> str:
    """The spec a leaderboard row name runs."""
    return next((s.kernel for s in STEPS if s.name == name), name)


def title(name: str) -> str:
    if name == TUNED:
        return "Warp tiling, autotuned"
    return get(kernel_of(name)).title


def tuned_params(device_name: str) -> tuple[dict | None, str]:
    """(config, where it comes from) of the autotuning step on a GPU: the tuned config of the
    autotuning search recorded on that GPU (``None`` and the reason where there is none)."""
    from .autotune import tuned_row
    try:
        rec = datafile.load(device_name)
        row = tuned_row(rec.chapter("autotuning")["rows"])
    except (datafile.DataError, KeyError) as exc:
        return None, f"no autotuning search recorded on {device_name} ({str(exc).splitlines()[0][:120]})"
    if row is None or row.get("kernel") != kernel_of(TUNED):
        return None, (f"the autotuning search recorded on {device_name} did not tune the warp-tiling kernel; "
                      "record it again: python -m helpers record --chapter autotuning")
    return get(kernel_of(TUNED)).resolve(row["params"]), f"tuned (autotuning search of {rec.label('autotuning')[12:]})"


def climb(rows: list[dict], n: int) -> list[tuple[str, float | None]]:
    """(row name, TFLOP/s) of each main-line step at n x n x n in leaderboard rows (None:
    not measured correctly there)."""
    out = []
    for name in names():
        r = next((r for r in rows if r.get("entry", r["kernel"]) == name and r["M"] == r["N"] == r["K"] == n), None)
        good = r is not None and r.get("status", "measured") == "measured" and r.get("ok")
        out.append((name, r["tflops"] if good else None))
    return out


def falls(rows: list[dict], n: int) -> list[tuple[str, str, float]]:
    """Steps of the main line at n that do not rise above the step before them: (previous, this,
    ratio). A step whose chapter explains a tie (``Step.tie``) falls only if it is more than
    :data:`TIE` below; every other step must be faster. Steps not measured are left out (a
    kernel too slow to run at n, the naive one, counts as below every later one)."""
    seen, out = None, []
    for name, tf in climb(rows, n):
        if tf is None:
            continue
        floor = 1 - TIE if step(name).tie else 1.0
        if seen is not None and tf <= seen[1] * floor:
            out.append((seen[0], name, tf / seen[1]))
        seen = (name, tf)
    return out


def level(rows: list[dict], n: int) -> list[tuple[str, str, float]]:
    """Steps within :data:`TIE` of the step before them at n, where their chapter explains it:
    (previous, this, ratio)."""
    out, seen = [], None
    for name, tf in climb(rows, n):
        if tf is None:
            continue
        if seen is not None and step(name).tie and abs(tf / seen[1] - 1) <= TIE:
            out.append((seen[0], name, tf / seen[1]))
        seen = (name, tf)
    return out


def awaiting_record(rows: list[dict]) -> list[str]:
    """Main-line rows that leaderboard rows lack, or whose kernel has changed since they were
    measured (:mod:`helpers.measure.freshness`): the climb waits for the next record."""
    from .freshness import config_key, stale_rows
    found = {r.get("entry") or r["kernel"] for r in rows}
    out = [f"{n}: not recorded" for n in names() if n not in found]
    stale = {(k, p) for c, k, p in stale_rows() if c == "leaderboard"}
    out += sorted({f"{r.get('entry') or r['kernel']}: measured on an earlier build" for r in rows
                   if is_main(r.get("entry") or r["kernel"]) and (r["kernel"], config_key(r.get("params", {}))) in stale})
    return out
