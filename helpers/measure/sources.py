"""Where each chapter's data comes from, registered once, here.

A chapter's data is either a :class:`Sweep` (kernel configs timed at shapes, the rows
``record`` stores and live mode measures) or a :class:`Table` (a function that returns
rows: profiler counters, sanitizer reports, a tuning run, the leaderboard). ``record``
and :func:`helpers.measure.results.results` both read this table, so live and recorded
data always come from the same code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import settings
from ..hardware import Device
from ..runtime import gemm
from ..runtime.specs import (bank_conflicts, coalescing, cp_async, double_buffering, naive, smem_tiling,
                             thread_tile_1d, thread_tile_2d, vectorized, warptiling)
from . import autotune, bench, calls, cpu, final_features, ncu, sanitize, schedule, tensor_cores


@dataclass(frozen=True)
class Sweep:
    """Timed (spec, params, shape) items; ``items(device)`` may depend on the GPU."""

    items: Callable[[Device], list]
    kind: str = "timing"
    live: bool = True
    target_s: float = 0.4     # seconds of timed launches per item (and as many for cuBLAS)


@dataclass(frozen=True)
class Table:
    """Rows from a function. ``live``: whether live mode runs it (False: too slow, or it
    needs a tool a reader may not have; live pages then show the recorded rows)."""

    run: Callable[[], list]
    live: bool = False
    kind: str = "table"


# Sources added since the last full record: their pages show a note naming the record command
# until they are recorded, and the book builds without them.
AWAITING_FIRST_RECORD: tuple = ()


def required() -> list[str]:
    """The sources the book needs recorded: all but those awaiting their first record."""
    return [n for n in SOURCES if n not in AWAITING_FIRST_RECORD]


def constant(items: list) -> Callable[[Device], list]:
    return lambda device: list(items)


SOURCES = {
    "cpu": Table(cpu.record_rows),
    "naive": Sweep(constant(naive.SWEEP)),
    "coalescing": Sweep(constant(coalescing.SWEEP)),
    "coalescing_schedule": Table(schedule.record_rows, live=True),
    "smem_tiling": Sweep(constant(smem_tiling.SWEEP)),
    "thread_tile_1d": Sweep(constant(thread_tile_1d.SWEEP)),
    "thread_tile_2d": Sweep(constant(thread_tile_2d.SWEEP)),
    "vectorized": Sweep(constant(vectorized.SWEEP)),
    "bank_conflicts": Sweep(constant(bank_conflicts.SWEEP)),
    "bank_conflicts_ncu": Table(ncu.record_rows),
    "double_buffering": Sweep(constant(double_buffering.SWEEP + cp_async.SWEEP)),
    "warptiling": Sweep(constant(warptiling.SWEEP)),
    "warptiling_ncu": Table(ncu.record_warp_tiles),
    "stall_profile": Table(ncu.record_stalls),
    "autotuning": Table(autotune.record_rows),
    "final": Sweep(gemm.chapter_sweep),
    "final_features": Sweep(final_features.items, target_s=final_features.TARGET_S),
    "leaderboard": Table(lambda: bench.run(quick=settings.quick()), live=True),
    "broad_suite": Table(bench.record_broad),
    "layouts": Table(bench.record_layouts),
    "calls": Table(calls.record_rows),
    "sanitize": Table(sanitize.record_rows),
    "tensor_cores": Table(tensor_cores.record_tensor_cores),
    "tf32x3": Table(tensor_cores.record_tf32x3),
}


class UnknownChapter(KeyError):
    def __str__(self):
        return self.args[0]


def get(chapter: str) -> Sweep | Table:
    try:
        return SOURCES[chapter]
    except KeyError:
        raise UnknownChapter(f"no data source for chapter {chapter!r}; known: {', '.join(SOURCES)}") from None
