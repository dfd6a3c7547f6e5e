"""The feature ladder of the chapter "The final kernel" (book/12_final.md): the final kernel's
template with every feature off (the *reduced* kernel), then one feature switched on at a time,
each on a shape where it matters, every row checked against cuBLAS and timed with it in one run.

``python -m helpers record --chapter final_features`` records it (a few configs, timed briefly);
until then the chapter shows a note naming that command.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Device
from ..runtime.specs.final import SPEC

CHAPTER = "final_features"
RECORD_COMMAND = f"python -m helpers record --chapter {CHAPTER}"
TARGET_S = 0.1          # seconds of timed launches per config (and as many for cuBLAS)

SQUARE = (4096, 4096, 4096)
ODD = (4097, 4097, 4097)          # tiles over the last row and column of C
DEEP = (1024, 1024, 16384)        # 32 tiles of 128 x 256 for 132 SMs, 1,024 k-tiles of 16 each

# The reduced kernel: chapter 10's block (128 x 128, four warps of 64 x 64, 16 x 8 per thread,
# k-slices of 8) fed by two cp.async stages; the whole k-slice unrolled, blocks row by row, A read
# row-major (4-byte copies), tiles over an edge on the guarded path, one block per tile.
REDUCED = SPEC.resolve(dict(BM=128, BN=128, BK=8, WM=64, WN=64, TM=16, TN=8, STAGES=2, SPLITK=1, GROUP=0,
                            KU=0, STREAMK=0, A_T=0, B_T=0, PACK_A=0, PACK_B=0, REDUCE=0, EDGES=0))


@dataclass(frozen=True)
class Step:
    name: str           # the feature, as the chapter names it
    label: str          # the step in a few words, as the ladder's figure and table show it
    shape: tuple        # where it is measured
    change: dict        # the parameters it sets
    base: str = ""      # the step it is compared with ("": the one before it)


# Cumulative: each step is the step it names as its base with its own change. Stream-K takes the
# place of split-K, so both are compared with the same base.
STEPS = (
    Step("reduced", "reduced kernel", SQUARE, {}),
    Step("block tile", "+ 128 × 256 block tile", SQUARE, dict(BN=256, TM=8, TN=16)),
    Step("pipeline", "+ 5 stages of k-slices of 16", SQUARE, dict(BK=16, STAGES=5)),
    Step("short trips", "+ 2 k-steps per trip", SQUARE, dict(KU=2)),
    Step("grouping", "+ groups of 8 block-rows", SQUARE, dict(GROUP=8)),
    Step("packing", "+ A packed", SQUARE, dict(PACK_A=1, A_T=1)),
    Step("at the odd square", "the same, odd square", ODD, {}),
    Step("edges", "+ edge tiles moved back", ODD, dict(EDGES=1)),
    Step("at long K", "the same, long K", DEEP, {}),
    Step("split-K", "+ split-K by 4", DEEP, dict(SPLITK=4)),
    Step("stream-K", "stream-K instead", DEEP, dict(STREAMK=1), base="at long K"),
)
# What each feature changes, by name (a step whose change is {} only moves to another shape)
FEATURES = {s.name: s.change for s in STEPS if s.change}


def base_of(i: int) -> int | None:
    """Index of the step that step i is compared with (None: the reduced kernel)."""
    s = STEPS[i]
    if i == 0:
        return None
    return next(j for j, t in enumerate(STEPS) if t.name == s.base) if s.base else i - 1


def params_of(i: int) -> dict:
    """The full config of step i: its base's with its change."""
    b = base_of(i)
    return SPEC.resolve(dict(REDUCED if b is None else params_of(b), **STEPS[i].change))


def plan() -> list[tuple[Step, dict]]:
    """(step, config) of every step, in order."""
    return [(s, params_of(i)) for i, s in enumerate(STEPS)]


def items(device: Device) -> list:
    """The sweep: (spec, config, shape) of each step, each config and shape once."""
    out = []
    for s, p in plan():
        if (SPEC, p, s.shape) not in out:
            out.append((SPEC, p, s.shape))
    return out

