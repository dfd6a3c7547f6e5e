"""Fit the final kernel's dispatch model to tables of measurements.

    python scripts/fit_dispatch.py TUNE.json [SPLITS.json ...] [--only exposed,alone] [--candidates narrow2]
        [--keep flat.efficiency,...] [--set fill_hidden=0.5] [--unseen-apart] [--rounds 8]

What it does and what it prints: helpers/measure/dispatch_fit.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.measure.dispatch_fit import (CANDIDATES, CONSTANT_STEPS, NEAR_BEST, PER_CANDIDATE, ROUNDS,  # noqa: E402
                                          Constants, fit, merged, read_table, report, squares_lines,
                                          table_numbers)
from helpers.measure.final_experiments import unseen_shapes  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", type=Path, nargs="+", help="the JSON scripts/tune_final.py wrote, and any of "
                    "scripts/final_experiments.py (tables of one GPU are taken together, each GPU's with its own "
                    "terms; the first table's numbers are the start)")
    ap.add_argument("--seed", type=int, default=0, help="how the shapes are split in two for the held-out check")
    ap.add_argument("--only", default="", help="comma-separated fields to fit (e.g. exposed,alone); the others "
                    "keep the table's numbers")
    ap.add_argument("--candidates", default="", help="comma-separated candidates whose own numbers are fitted "
                    "(e.g. a new one); the others keep the table's")
    ap.add_argument("--keep", default="", help="comma-separated candidate.field that keep the table's number "
                    "(e.g. flat.efficiency: the big squares, which few broad-suite rows measure)")
    ap.add_argument("--set", default="", help="comma-separated constant=value to start from instead of the "
                    "table's (e.g. fill_hidden=0.5, with --only pipeline_tiles: the rest fitted around it)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"coordinate-descent rounds (default {ROUNDS}; "
                    "fewer: a quicker, coarser fit)")
    ap.add_argument("--unseen-apart", action="store_true", help="fit on every shape but those of the unseen "
                    "suites (scripts/final_experiments.py UNSEEN_SEEDS), and judge the choice there")
    args = ap.parse_args(argv)
    only = tuple(f for f in args.only.split(",") if f)
    of = tuple(c for c in args.candidates.split(",") if c)
    keep = tuple(f for f in args.keep.split(",") if f)
    known = set(PER_CANDIDATE) | set(CONSTANT_STEPS)
    if set(only) - known:
        ap.error(f"--only: unknown field(s) {sorted(set(only) - known)}; known: {sorted(known)}")
    if set(of) - {c.name for c in CANDIDATES}:
        ap.error(f"--candidates: unknown {sorted(set(of) - {c.name for c in CANDIDATES})}; "
                 f"known: {[c.name for c in CANDIDATES]}")
    bad_keep = [k for k in keep if k.partition(".")[0] not in {c.name for c in CANDIDATES}
                or k.partition(".")[2] not in PER_CANDIDATE]
    if bad_keep:
        ap.error(f"--keep: {bad_keep}: candidate.field with a field of {list(PER_CANDIDATE)}")
    docs = [read_table(t) for t in args.tables]
    tabs = merged(docs)
    if not len(tabs.rows):
        print("no measured rows of the candidates in the table")
        return 1
    for t in tabs.tables:
        print(f"{len(t.rows)} measured rows of {len(set(t.cand))} candidates on {len(t.shapes)} shapes "
              f"({t.device.label}); {int(t.near.sum())} within {NEAR_BEST}x of their shape's best")

    cands0, constants0 = table_numbers(docs[0])
    try:
        constants0 = replace(constants0, **{k: float(v) for k, v in (x.split("=") for x in args.set.split(",") if x)})
    except (TypeError, ValueError) as exc:
        ap.error(f"--set: {exc} (constant=value, of {[f.name for f in dataclasses.fields(Constants)]})")
    everything, unseen = tabs.shapes, []
    if args.unseen_apart:
        apart = set(unseen_shapes())
        unseen = [s for s in everything if tabs.key(s)[:3] in apart]
        everything = [s for s in everything if tabs.key(s)[:3] not in apart]
    cands, constants, spread = fit(tabs, everything, cands0, constants0, args.rounds, only=only, of=of, keep=keep)
    err = np.abs(np.log(np.concatenate([t.predict(cands, constants) / t.ms for t in tabs.tables])))
    err = err[np.concatenate([t.near for t in tabs.tables])]
    print(f"spread within shapes (rms of log): {math.sqrt(tabs.spread(cands0, constants0, everything)):.3f} with the "
          f"table's numbers, {math.sqrt(spread):.3f} fitted; fitted |error| of the options near the best: median "
          f"{100 * (math.exp(np.median(err)) - 1):.1f}%, 90th percentile {100 * (math.exp(np.percentile(err, 90)) - 1):.1f}%")

    # held out: fit on one half of the shapes (the same half on every GPU), choose on the other
    keys = sorted({tabs.key(s) for s in everything})
    random.Random(args.seed).shuffle(keys)
    first = set(keys[: len(keys) // 2])
    halves = ([s for s in everything if tabs.key(s) in first], [s for s in everything if tabs.key(s) not in first])
    fitted_halves = [(fit(tabs, fit_on, cands0, constants0, args.rounds, only=only, of=of, keep=keep)[:2], judge)
                     for fit_on, judge in (halves, halves[::-1])]
    lines = []
    for i, t in enumerate(tabs.tables):
        title = f" ({t.device.label})" if len(tabs.tables) > 1 else ""
        lines += report(tabs.choices(cands0, constants0, everything, i), "numbers of the table" + title)
        lines += report(tabs.choices(cands, constants, everything, i), "fitted numbers" + title)
        held = dict(ratio=[], pct=[], best_pct=[], worst=[])
        for (c_half, k_half), judge in fitted_halves:
            for k, v in tabs.choices(c_half, k_half, judge, i).items():
                held[k] += v
        lines += report(held, "fitted on the other half of the shapes" + title)
        if unseen:
            lines += report(tabs.choices(cands0, constants0, unseen, i), "unseen shapes, numbers of the table" + title)
            lines += report(tabs.choices(cands, constants, unseen, i), "unseen shapes, fitted numbers" + title)
    print("\n".join(lines + squares_lines(tabs.tables[0].doc)))     # the first GPU's tables, all of them

    print("\nfitted numbers (to ship a fit: name its tables and fitted fields in "
          "helpers/runtime/specs/final_dispatch.json and run python -m helpers refit):")
    for c in CANDIDATES:
        f = cands[c.name]
        stream_k = "none" if f.stream_k is None else f"{f.stream_k:.3f}"
        print(f"    {c.name}: efficiency {f.efficiency:.3f}, stream_k {stream_k}, edge {f.edge:.3f}")
    print(f"CONSTANTS = {constants!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
