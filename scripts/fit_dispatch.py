"""Fit the final kernel's dispatch model to a table of measurements.

    python scripts/fit_dispatch.py TUNE.json [--all]

TUNE.json is what scripts/tune_final.py writes on a GPU: every option of every candidate
(block tile x split of K x stream-K) timed on the suite and the broad suite, the
inner-loop variants at n = 4096 and 8192, and the layouts. The model
(helpers/runtime/specs/final.py: terms, combine) predicts a config's time from the
shape and the device up to a few constants:

* the efficiency of each block tile (its tile, stages and inner loop, whatever the split),
  with and without stream-K (its bookkeeping takes registers from the main loop): the
  ratio of the two is the candidate's stream-K factor,
* the pipeline fill cost in k-tiles, the fixed cost of a launch that shares tiles
  (split-K, stream-K), and the rate at which the last block reads a tile's parts,
* a factor per layout of A and B (NT, TN, TT against NN).

They are fitted by least squares on log(time), the efficiencies in closed form for each
grid point of the other constants. Printed: the fitted constants (and a snippet for
specs/final.py), how well the model predicts the times, and how well it chooses: per
shape, the measured time of the config the model would pick among those measured against
the best measured one (geometric mean of best/chosen), for the constants in the table and
for the fitted ones, with % of cuBLAS of the choice.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.hardware import Device  # noqa: E402
from helpers.runtime.specs import final  # noqa: E402
from helpers.runtime.specs.final import CANDIDATES, SPEC, Constants, combine, layout_name, terms  # noqa: E402

SHAPE_KEYS = ("SPLITK", "REDUCE", "A_T", "B_T", "PACK_A", "PACK_B")   # chosen per shape; the rest is the
                                                                      # block tile (and stream-K)
FILLS = np.arange(0.0, 8.01, 0.5)
SHARED_US = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0)
REDUCE_GBS = (25.0, 50.0, 100.0, 200.0, 400.0, 800.0)


def tile_key(p: dict) -> str:
    return json.dumps({k: v for k, v in sorted(p.items()) if k not in SHAPE_KEYS})


def candidate_efficiency(c, p: dict) -> float:
    """What the model uses for config ``p`` of candidate ``c`` before the layout: its
    efficiency, times its stream-K factor with stream-K (``c``: a Candidate or its record)."""
    get = c.get if isinstance(c, dict) else lambda k, d=None: getattr(c, k, d)
    return get("efficiency") * (get("stream_k", 1.0) if p["STREAMK"] else 1.0)


def candidate_efficiencies(candidates) -> dict:
    """{tile_key: efficiency} for every candidate's tile with and without stream-K."""
    out = {}
    for c in candidates:
        params = c["params"] if isinstance(c, dict) else c.params
        for sk in (0, 1):
            p = SPEC.resolve(dict(params, STREAMK=sk, SPLITK=1))
            out[tile_key(p)] = candidate_efficiency(c, p)
    return out


class Table:
    """The measured rows with the model's terms, as arrays."""

    def __init__(self, doc: dict, stages=("broad", "squares", "layouts")):
        self.device = Device.from_record(doc["device"])
        rows = [r for r in doc["rows"] if r.get("ok") and r.get("ms") and r["stage"] in stages]
        self.rows, t = [], []
        for r in rows:
            x = terms(r["params"], r["M"], r["N"], r["K"], self.device)
            if x is not None:
                self.rows.append(r)
                t.append(x)
        self.ms = np.array([r["ms"] for r in self.rows])
        self.path = np.array([x.k_tiles for x in t])
        self.fills = np.array([x.fills for x in t])
        self.tile_ms = np.array([x.tile_ms for x in t])
        self.traffic = np.array([x.traffic_ms if x.shared else 0.0 for x in t])
        self.reduce = np.array([x.reduce_bytes if x.shared else 0.0 for x in t])
        self.shared = np.array([x.shared for x in t])
        # slabs added by a second kernel (REDUCE=1): their constants are not fitted here
        c = final.CONSTANTS
        self.slabs = np.array([x.traffic_ms / c.slab_speed + c.slab_us * 1e-3 if x.slabs else 0.0 for x in t])
        self.memory = np.array([x.memory_ms for x in t])
        self.pack = np.array([x.pack_ms / c.pack_speed + x.packs * c.pack_us * 1e-3 for x in t])   # not fitted here
        self.groups = sorted({tile_key(r["params"]) for r in self.rows})
        self.group = np.array([self.groups.index(tile_key(r["params"])) for r in self.rows])
        self.layout = np.array([layout_name(r["params"]) for r in self.rows])   # as the kernel reads them

    def predict(self, eff: np.ndarray, fill: float, shared_us: float, reduce_gbs: float,
                layout: dict | None = None) -> np.ndarray:
        """Predicted ms of every row (the arrays' version of final.combine)."""
        e = eff[self.group] * np.array([(layout or {}).get(x, 1.0) for x in self.layout])
        ms = (self.path + fill * self.fills) * self.tile_ms / e
        ms = ms + self.shared * (self.traffic + self.reduce / (reduce_gbs * 1e9) * 1e3 + shared_us * 1e-3) + self.slabs
        return np.maximum(ms, self.memory) + self.pack


def fit_efficiencies(tab: Table, idx: np.ndarray, fill, shared_us, reduce_gbs, iters: int = 3) -> np.ndarray:
    """Per group, the efficiency minimising the squared log error (closed form on the rows the
    compute term dominates, refined a few times)."""
    eff = np.full(len(tab.groups), 0.6)
    work = (tab.path + fill * tab.fills) * tab.tile_ms
    extra = tab.shared * (tab.traffic + tab.reduce / (reduce_gbs * 1e9) * 1e3 + shared_us * 1e-3) + tab.slabs
    for g in range(len(tab.groups)):
        sel = idx[tab.group[idx] == g]
        if not len(sel):
            continue
        e = 0.6
        for _ in range(iters):
            # rows where compute dominates: ms - extra = work / e
            rest = tab.ms[sel] - extra[sel] - tab.pack[sel]
            use = (rest > 0.2 * tab.ms[sel]) & (work[sel] / e > tab.memory[sel])
            if not use.any():
                break
            e = float(np.exp(np.mean(np.log(work[sel][use] / rest[use]))))
            e = min(max(e, 0.02), 1.0)
        eff[g] = e
    return eff


def loss(tab: Table, idx, eff, fill, shared_us, reduce_gbs, layout=None) -> float:
    pred = tab.predict(eff, fill, shared_us, reduce_gbs, layout)
    return float(np.mean((np.log(pred[idx]) - np.log(tab.ms[idx])) ** 2))


def fit(tab: Table):
    """(efficiencies, fill, shared_us, reduce_gbs, layout factors, rms log error) on the NN rows,
    then the layout factors on the others."""
    nn = np.flatnonzero(tab.layout == "NN")
    best = None
    for fill, us, gbs in itertools.product(FILLS, SHARED_US, REDUCE_GBS):
        eff = fit_efficiencies(tab, nn, fill, us, gbs)
        value = loss(tab, nn, eff, fill, us, gbs)
        if best is None or value < best[0]:
            best = (value, eff, fill, us, gbs)
    value, eff, fill, us, gbs = best
    layout = {}
    for name in ("NT", "TN", "TT"):
        sel = np.flatnonzero(tab.layout == name)
        if len(sel):
            pred = tab.predict(eff, fill, us, gbs)
            layout[name] = round(float(np.exp(np.mean(np.log(pred[sel] / tab.ms[sel])))), 3)
    return eff, float(fill), float(us), float(gbs), layout, math.sqrt(value)


def group_names(tab: Table, doc: dict) -> list[str]:
    """A readable name per group: the candidate or variant that has that block tile (" sk":
    with stream-K)."""
    named = {}
    for name, p in [(c.name, c.params) for c in CANDIDATES] + list(doc.get("variants", {}).items()) + \
            [(n, c["params"]) for n, c in doc.get("candidates", {}).items()]:
        for sk in (0, 1):
            named.setdefault(tile_key(SPEC.resolve(dict(p, STREAMK=sk, SPLITK=1))), name + " sk" * sk)
    return [named.get(g, SPEC.label(json.loads(g) | {k: 0 for k in SHAPE_KEYS} | {"SPLITK": 1})) for g in tab.groups]


def choice_quality(tab: Table, doc: dict, eff_of, constants: Constants) -> dict:
    """Per broad/suite shape: the measured time of the config the model picks among the
    measured options of the dispatcher's candidates, against the best measured one."""
    cub = {(c["M"], c["N"], c["K"], c["layout"]): c["ms"] for c in doc["cublas"]}
    cand = set(candidate_efficiencies(CANDIDATES))
    out = dict(ratio=[], pct=[], best_pct=[], worst=[])
    shapes = dict.fromkeys((r["M"], r["N"], r["K"]) for r in tab.rows if r["stage"] == "broad")
    for s in shapes:
        at = [r for r in tab.rows if r["stage"] == "broad" and (r["M"], r["N"], r["K"]) == s
              and tile_key(r["params"]) in cand]
        if not at:
            continue
        best = min(at, key=lambda r: r["ms"])
        pred = []
        for r in at:
            t = terms(r["params"], *s, tab.device)
            pred.append(combine(t, eff_of(r["params"]) * constants.layout_factor(r["params"]), constants))
        pick = at[int(np.argmin(pred))]
        c = cub[s + ("NN",)]
        out["ratio"].append(best["ms"] / pick["ms"])
        out["pct"].append(100 * c / pick["ms"])
        out["best_pct"].append(100 * c / best["ms"])
        out["worst"].append((100 * c / pick["ms"], s, SPEC.label(pick["params"]), SPEC.label(best["params"]),
                             100 * c / best["ms"]))
    return out


def geomean(v) -> float:
    v = [x for x in v if x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


def report(q: dict, title: str) -> list[str]:
    if not q["ratio"]:
        return [f"{title}: no broad-suite rows"]
    worst = sorted(q["worst"])[:5]
    return [f"{title}: choice quality (best/chosen) {100 * geomean(q['ratio']):.1f}% over {len(q['ratio'])} shapes, "
            f"worst {100 * min(q['ratio']):.1f}%; chosen {geomean(q['pct']):.1f}% of cuBLAS (geometric mean), "
            f"lowest {min(q['pct']):.1f}%; best measured {geomean(q['best_pct']):.1f}%",
            "  lowest chosen: " + "; ".join(f"{'x'.join(map(str, s))} {p:.0f}% ({lab}; best {bp:.0f}% {bl})"
                                            for p, s, lab, bl, bp in worst)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path, help="the JSON scripts/tune_final.py wrote")
    ap.add_argument("--all", action="store_true", help="print every group's efficiency, not only the candidates'")
    args = ap.parse_args(argv)
    doc = json.loads(args.table.read_text())
    tab = Table(doc)
    if not len(tab.rows):
        print("no measured rows in the table")
        return 1
    names = group_names(tab, doc)
    print(f"{len(tab.rows)} measured rows on {tab.device.label}, {len(tab.groups)} block tiles")

    # ---- the constants the table was measured with ----
    c0 = doc.get("constants", {})
    old = Constants(**{k: c0.get(k, v) for k, v in dataclasses.asdict(final.CONSTANTS).items()})
    old = replace(old, layout=tuple(dict(old.layout).items()))
    old_eff = candidate_efficiencies(doc.get("candidates", {}).values())
    default = float(np.median(list(old_eff.values()))) if old_eff else 0.6

    # ---- fit ----
    eff, fill, us, gbs, layout, rms = fit(tab)
    new = replace(final.CONSTANTS, pipeline_tiles=fill, shared_us=us, reduce_gbs=gbs, layout=tuple(layout.items()))
    fitted = {g: float(e) for g, e in zip(tab.groups, eff)}
    pred = tab.predict(eff, fill, us, gbs, layout)
    err = np.abs(np.log(pred / tab.ms))
    print(f"fitted: pipeline_tiles={fill:g}, shared_us={us:g}, reduce_gbs={gbs:g}, layout={layout}")
    print(f"prediction error: rms of log {rms:.3f}; median {100 * (math.exp(np.median(err)) - 1):.1f}%, "
          f"90th percentile {100 * (math.exp(np.percentile(err, 90)) - 1):.1f}%")
    print("efficiency (fraction of the FP32 peak a full SM sustains) per block tile:")
    cand_keys = set(candidate_efficiencies(CANDIDATES))
    for g, name, e in sorted(zip(tab.groups, names, eff), key=lambda x: -x[2]):
        if args.all or g in cand_keys or name in doc.get("variants", {}):
            n = int((tab.group == tab.groups.index(g)).sum())
            print(f"  {name:16s} {e:.3f}   ({n} rows){'  candidate' if g in cand_keys else ''}")

    # ---- choice quality: table constants vs fitted ----
    lines = report(choice_quality(tab, doc, lambda p: old_eff.get(tile_key(p), default), old),
                   "constants of the table")
    lines += report(choice_quality(tab, doc, lambda p: fitted.get(tile_key(p), default), new), "fitted constants")
    print("\n".join(lines))

    # ---- the inner-loop variants at the big squares: which one the large candidate should be ----
    squares = [r for r in tab.rows if r["stage"] == "squares"]
    if squares:
        cub = {(c["M"], c["N"], c["K"], c["layout"]): c["ms"] for c in doc["cublas"]}
        sizes = sorted({r["M"] for r in squares})
        print("\nsquares (NN), % of cuBLAS:")
        score = {}
        for name in dict.fromkeys(r["name"] for r in squares):
            pct = {r["M"]: 100 * cub[(r["M"], r["N"], r["K"], "NN")] / r["ms"] for r in squares if r["name"] == name}
            if len(pct) == len(sizes):
                score[name] = geomean(pct.values())
            print(f"  {name:14s} " + "  ".join(f"n={n}: {pct[n]:5.1f}%" if n in pct else f"n={n}:   -  " for n in sizes))
        if score:
            best = max(score, key=score.get)
            p = next(r["params"] for r in squares if r["name"] == best)
            base = {k: v for k, v in p.items() if k not in SHAPE_KEYS}
            print(f"  best over {sizes}: {best} ({score[best]:.1f}% geometric mean); as the large candidate "
                  f"(the split and stream-K are the model's choice per shape):")
            print(f"    Candidate(\"large\", {base}, {fitted[tile_key(p)]:.3f}),")

    print("\nfor helpers/runtime/specs/final.py:")
    for c in CANDIDATES:
        e, sk = (fitted.get(tile_key(SPEC.resolve(dict(c.params, STREAMK=s, SPLITK=1)))) for s in (0, 1))
        print((f"    {c.name}: efficiency {e:.3f}" if e else f"    {c.name}: not measured")
              + (f", stream_k {sk / e:.3f}" if e and sk else ""))
    print(f"CONSTANTS = {replace(new, layout=tuple(sorted(layout.items())))!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
