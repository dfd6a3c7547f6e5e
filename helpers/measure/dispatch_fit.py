"""Fitting the final kernel's dispatch model to tables of measurements (``scripts/fit_dispatch.py`` runs it).

    python scripts/fit_dispatch.py TUNE.json [SPLITS.json ...] [--only exposed,alone] [--candidates narrow2]
        [--keep flat.efficiency,...] [--set fill_hidden=0.5] [--unseen-apart] [--rounds 8]

TUNE.json is what scripts/tune_final.py writes on a GPU: every option of every candidate
(block tile x split of K x stream-K) timed on the suite and the broad suite, the
inner-loop variants at n = 4096 and 8192, and the layouts. Further tables from
scripts/final_experiments.py --only splits add the big and odd squares in every layout. The model
(helpers/runtime/specs/final.py: terms, combine) predicts a config's time from the
shape and the device up to a few numbers:

* per candidate: its efficiency, its stream-K factor (the bookkeeping takes registers from
  the main loop) and its edge factor (tiles over an edge of C copy with guards);
* the pipeline fill cost in k-tiles, the fixed cost of a launch that shares tiles
  (split-K, stream-K) and the rate at which the last block reads a tile's parts, the
  fixed cost and speed of slabs, how much faster blocks run on an SM they leave part
  empty (``alone``) and how fast a block alone on its SM can go (``full_warps``), the cost
  of any launch, and the share of the partial tiles' traffic that other blocks' compute
  does not hide (``exposed``).

The dispatcher only has to rank the options of one shape, so the fit is for that: it
minimises the spread, within each shape, of log(predicted / measured) over the options
that measured within 1.6x of the shape's fastest (how far off the slow ones are does not
matter), by coordinate descent from the constants in the table (``--only``: just the named
numbers, say one constant checked on another GPU; ``--keep``: all but these candidates' numbers).
Tables of several GPUs are fitted together: one set of numbers, each row's terms computed for
its own GPU, and the held-out check holds out the same shapes on every GPU. The layout and
packing constants come from scripts/final_experiments.py and are not fitted here.

Printed: the fitted numbers (and a snippet for specs/final.py), and how well each set
of numbers chooses: per shape, the measured time of the config the model picks among
those measured against the best measured one (geometric mean of best/chosen), with % of
cuBLAS of the choice; for the numbers in the table, the fitted ones, and the fitted ones
judged on shapes they were not fitted on (two halves of the shapes, each fitted on the
other).
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np


from .. import settings
from ..hardware import Device
from ..runtime.specs import final
from ..runtime.specs.final import CANDIDATES, SPEC, Candidate, Constants, candidate_of, combine, terms

NEAR_BEST = 1.6      # options slower than this times the shape's fastest do not count in the fit
ROUNDS = 8           # coordinate-descent rounds
# fitted numbers: (name, step of the first round; steps on a log scale where the name says log)
PER_CANDIDATE = ("efficiency", "stream_k", "edge")                            # log scale
CONSTANT_STEPS = {"pipeline_tiles": 1.0, "shared_us": 1.5, "reduce_gbs": 0.7, "slab_us": 4.0,
                  "slab_speed": 0.5, "alone": 0.2, "full_warps": 1.0, "launch_us": 2.0, "exposed": 0.3,
                  "fill_hidden": 0.3}
LOG_CONSTANTS = ("reduce_gbs", "slab_speed")
# stream-K only costs; an edge tile may cost (guarded copies) or gain (fewer results stored);
# the rest: at least 0
BOUNDS = {"alone": (0.0, 1.0), "exposed": (0.0, 1.0), "fill_hidden": (0.0, 1.0), "slab_speed": (0.05, 1.0),
          "stream_k": (0.0, 1.0), "edge": (0.5, 2.0)}


class Table:
    """The measured rows of the dispatcher's candidates, with the model's terms."""

    def __init__(self, doc: dict, stages=("broad", "splits", "tiles", "small", "candidates", "chosen", "unseen", "fill",
                                           "micro")):
        self.doc, self.device = doc, Device.from_record(doc["device"])
        self.cublas = {(c["M"], c["N"], c["K"], c["layout"]): c["ms"] for c in doc["cublas"]}
        self.rows, self.terms, self.cand = [], [], []
        for r in doc["rows"]:
            c = candidate_of(r["params"]) if r.get("ok") and r.get("ms") and r["stage"] in stages else None
            t = terms(r["params"], r["M"], r["N"], r["K"], self.device) if c else None
            if t is not None:
                self.rows.append(r)
                self.terms.append(t)
                self.cand.append(c.name)
        self.ms = np.array([r["ms"] for r in self.rows])
        self.shapes = list(dict.fromkeys((r["M"], r["N"], r["K"], r["layout"]) for r in self.rows))
        self.shape = np.array([self.shapes.index((r["M"], r["N"], r["K"], r["layout"])) for r in self.rows])
        best = np.array([self.ms[self.shape == s].min() for s in range(len(self.shapes))])
        self.near = self.ms <= NEAR_BEST * best[self.shape]
        # the terms as arrays, and each row's efficiency split into what is fitted and the rest
        # (layout, unaligned rows), so that predict calls the model once on the whole table
        self.stacked = final.stack(self.terms)
        self.index = np.array([[c.name for c in CANDIDATES].index(n) for n in self.cand])
        self.streamk = np.array([r["params"]["STREAMK"] for r in self.rows])
        self.edges = np.array([1 - (r["M"] // r["params"]["BM"]) * (r["N"] // r["params"]["BN"])
                               / final.tiles_of(r["params"], r["M"], r["N"]) for r in self.rows])
        plain = {c.name: replace(c, efficiency=1.0, stream_k=1.0, edge=1.0) for c in CANDIDATES}
        self.rest = np.array([plain[n].efficiency_on(r["params"], r["M"], r["N"], r["K"], self.device)
                              for r, n in zip(self.rows, self.cand)])

    def predict(self, cands: dict, constants: Constants) -> np.ndarray:
        """The model's ms of every row (final.combine on the table's terms at once)."""
        value = lambda c, f: 1.0 if getattr(cands[c.name], f) is None else getattr(cands[c.name], f)  # noqa: E731
        get = lambda f: np.array([value(c, f) for c in CANDIDATES])[self.index]  # noqa: E731  (None: no stream-K)
        eff = (get("efficiency") * get("stream_k") ** self.streamk * get("edge") ** self.edges * self.rest
               * np.array([constants.layout_factor(r["params"]) for r in self.rows]))
        return combine(self.stacked, eff, constants)

    def spread(self, cands: dict, constants: Constants, shapes) -> float:
        """Mean squared deviation of log(predicted / measured) from its mean within each shape,
        over the options near the shape's best."""
        total, count = self.spread_sum(cands, constants, shapes)
        return total / max(count, 1)

    def spread_sum(self, cands: dict, constants: Constants, shapes) -> tuple[float, int]:
        """The squared deviations summed, and how many options they are over."""
        err, total, count = np.log(self.predict(cands, constants) / self.ms), 0.0, 0
        for s in shapes:
            sel = (self.shape == s) & self.near
            if sel.sum() > 1:
                total += float(((err[sel] - err[sel].mean()) ** 2).sum())
                count += int(sel.sum())
        return total, count

    def choices(self, cands: dict, constants: Constants, shapes) -> dict:
        """Per shape: measured best/chosen, % of cuBLAS of the choice and of the best."""
        pred = self.predict(cands, constants)
        out = dict(ratio=[], pct=[], best_pct=[], worst=[])
        for s in shapes:
            rows = np.flatnonzero(self.shape == s)
            pick, best = rows[np.argmin(pred[rows])], rows[np.argmin(self.ms[rows])]
            cub = self.cublas[self.shapes[s]]
            out["ratio"].append(self.ms[best] / self.ms[pick])
            out["pct"].append(100 * cub / self.ms[pick])
            out["best_pct"].append(100 * cub / self.ms[best])
            out["worst"].append((100 * cub / self.ms[pick], self.shapes[s][:3], SPEC.label(self.rows[pick]["params"]),
                                 SPEC.label(self.rows[best]["params"]), 100 * cub / self.ms[best]))
        return out


class Tables:
    """Tables of several GPUs fitted together: each row's terms are its own GPU's (SM count,
    bandwidth), and one set of numbers must rank the options on all of them. A shape here is
    (table, shape of that table); ``key`` is the shape without the GPU, so that a held-out half
    holds a shape on every GPU or on none."""

    def __init__(self, tables: list[Table]):
        self.tables = tables
        self.rows = [r for t in tables for r in t.rows]
        self.cand = [c for t in tables for c in t.cand]
        self.shapes = [(i, s) for i, t in enumerate(tables) for s in range(len(t.shapes))]

    def key(self, shape) -> tuple:
        return self.tables[shape[0]].shapes[shape[1]]

    def _mine(self, shapes, i) -> list[int]:
        return [s for j, s in shapes if j == i]

    def spread(self, cands: dict, constants: Constants, shapes) -> float:
        sums = [t.spread_sum(cands, constants, self._mine(shapes, i)) for i, t in enumerate(self.tables)]
        return sum(x for x, _ in sums) / max(sum(n for _, n in sums), 1)

    def choices(self, cands: dict, constants: Constants, shapes, table: int | None = None) -> dict:
        """Table.choices over the shapes of every table (``table``: of that one)."""
        out = dict(ratio=[], pct=[], best_pct=[], worst=[])
        for i, t in enumerate(self.tables):
            if table is None or i == table:
                for k, v in t.choices(cands, constants, self._mine(shapes, i)).items():
                    out[k] += v
        return out


# ------------------------------------------------------------------ the numbers as one vector
def fitted_names(tab: Table | Tables) -> list[tuple[str, str]]:
    """(candidate or "", field) of every number the table can fit: a candidate's stream-K
    factor only where it has stream-K rows, its edge factor only where it has edge tiles."""
    names = []
    for c in CANDIDATES:
        mine = [r for r, n in zip(tab.rows, tab.cand) if n == c.name]
        if not mine:
            continue
        names.append((c.name, "efficiency"))
        if any(r["params"]["STREAMK"] for r in mine):
            names.append((c.name, "stream_k"))
        if any(r["M"] % r["params"]["BM"] or r["N"] % r["params"]["BN"] for r in mine):
            names.append((c.name, "edge"))
    return names + [("", k) for k in CONSTANT_STEPS]


def is_log(name) -> bool:
    return name[0] != "" or name[1] in LOG_CONSTANTS


def to_vector(names, cands: dict, constants: Constants) -> np.ndarray:
    v = [getattr(cands[c], f) if c else getattr(constants, f) for c, f in names]
    return np.array([math.log(x) if is_log(n) else x for n, x in zip(names, v)])


def from_vector(names, x, cands: dict, constants: Constants) -> tuple[dict, Constants]:
    cands, changes = dict(cands), {}
    for (c, f), v in zip(names, x):
        v = math.exp(v) if is_log((c, f)) else v
        lo, hi = BOUNDS.get(f, (0.0, math.inf))
        v = float(min(max(v, lo), hi))
        if c:
            cands[c] = replace(cands[c], **{f: v})
        else:
            changes[f] = v
    return cands, replace(constants, **changes)


def fit(tab: Table | Tables, shapes, cands: dict, constants: Constants, rounds: int = ROUNDS, only=(), of=(),
        keep=()):
    """Coordinate descent on Table.spread from the given numbers: (candidates, constants, spread).
    ``only``: fit just these fields; ``of``: just these candidates' own numbers; ``keep``: not
    these candidates' numbers, as "candidate.field" (the rest stay as given)."""
    names = [n for n in fitted_names(tab) if (not only or n[1] in only) and (not of or not n[0] or n[0] in of)
             and f"{n[0]}.{n[1]}" not in keep]
    x = to_vector(names, cands, constants)
    steps = np.array([0.2 if c else CONSTANT_STEPS[f] for c, f in names])

    def value(x):
        return tab.spread(*from_vector(names, x, cands, constants), shapes)

    current = value(x)
    for _ in range(rounds):
        for j in range(len(x)):
            for m in (1, -1, 0.5, -0.5, 0.25, -0.25, 0.1, -0.1):
                y = x.copy()
                y[j] += m * steps[j]
                v = value(y)
                if v < current - 1e-12:
                    x, current = y, v
        steps *= 0.6
    return (*from_vector(names, x, cands, constants), current)


def geomean(v) -> float:
    v = [x for x in v if x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


def report(q: dict, title: str) -> list[str]:
    if not q["ratio"]:
        return [f"{title}: no broad-suite rows"]
    worst = sorted(q["worst"])[:5]
    return [f"{title}: choice quality (best/chosen) {100 * geomean(q['ratio']):.1f}% over {len(q['ratio'])} shapes, "
            f"worst {100 * min(q['ratio']):.1f}%; chosen {geomean(q['pct']):.1f}% of cuBLAS (geometric mean), "
            f"lowest {min(q['pct']):.1f}%, {sum(p < 80 for p in q['pct'])} under 80%; best measured "
            f"{geomean(q['best_pct']):.1f}%",
            "  lowest chosen: " + "; ".join(f"{'x'.join(map(str, s))} {p:.0f}% ({lab}; best {bp:.0f}% {bl})"
                                            for p, s, lab, bl, bp in worst)]


def table_numbers(doc: dict) -> tuple[dict, Constants]:
    """The candidates' numbers and the constants the table was measured with (a constant it lacks
    did not exist then: its default, which leaves the model as it was)."""
    fields = {f.name for f in dataclasses.fields(Candidate)}
    cands = {c.name: replace(c, **{k: v for k, v in doc.get("candidates", {}).get(c.name, {}).items()
                                   if k in fields and k != "params"}) for c in CANDIDATES}
    c0 = doc.get("constants", {})
    then = {f.name: f.default for f in dataclasses.fields(Constants) if f.default is not dataclasses.MISSING}
    old = Constants(**{k: c0.get(k, then.get(k, v)) for k, v in dataclasses.asdict(final.CONSTANTS).items()})
    if c0 and "full_warps" not in c0:
        # written before shared_us became a cost per doubling of a tile's parts (full_warps came
        # with it): it was a fixed cost then; a third of it per doubling costs the same at 8 parts
        old = replace(old, shared_us=old.shared_us / 3)
    return cands, replace(old, layout=tuple(tuple(x) for x in dict(old.layout).items()))


def squares_lines(doc: dict) -> list[str]:
    """The inner-loop variants at the big squares, % of cuBLAS: which one the large candidate should be."""
    squares = [r for r in doc["rows"] if r["stage"] == "squares" and r.get("ok") and r.get("ms")]
    if not squares:
        return []
    cub = {(c["M"], c["N"], c["K"], c["layout"]): c["ms"] for c in doc["cublas"]}
    sizes = sorted({r["M"] for r in squares})
    out, score = ["", "squares (NN), % of cuBLAS:"], {}
    for name in dict.fromkeys(r["name"] for r in squares):
        pct = {r["M"]: 100 * cub[(r["M"], r["N"], r["K"], "NN")] / r["ms"] for r in squares if r["name"] == name}
        if len(pct) == len(sizes):
            score[name] = geomean(pct.values())
        out.append(f"  {name:14s} " + "  ".join(f"n={n}: {pct[n]:5.1f}%" if n in pct else f"n={n}:   -  "
                                               for n in sizes))
    if score:
        best = max(score, key=score.get)
        out.append(f"  best over {sizes}: {best} ({score[best]:.1f}% geometric mean)")
    return out


# ------------------------------------------------------------------ the dispatch file
SIGNIFICANT = 4     # significant digits the dispatch file keeps of each number


def read_table(path: Path) -> dict:
    """A table scripts/tune_final.py (or scripts/final_experiments.py) wrote, gzipped or not."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def table_hash(doc: dict) -> str:
    """What a table holds, hashed (its rows and what it was measured with), independent of how it is stored."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def merged(docs: list[dict]) -> Tables:
    """Tables of one GPU taken together (the first one's meta), each GPU's apart."""
    by_gpu: dict = {}
    for d in docs:
        by_gpu.setdefault(Device.from_record(d["device"]).label, []).append(d)
    return Tables([Table(dict(ds[0], rows=[r for d in ds for r in d["rows"]], cublas=[c for d in ds for c in d["cublas"]]))
                   for ds in by_gpu.values()])


def rounded(x):
    return None if x is None else float(f"{x:.{SIGNIFICANT}g}")


def dispatch_doc(cands: dict, constants: Constants, recipe: dict, tables: list[tuple[str, dict]],
                 quality: dict) -> dict:
    """The dispatch file's content: the numbers, how they were obtained (the recipe), and from what."""
    fields = [f.name for f in dataclasses.fields(Candidate) if f.name not in ("name", "params")]
    out_c = {}
    for c in CANDIDATES:
        n = cands[c.name]
        out_c[c.name] = {f: ({k: rounded(v) for k, v in n.layouts} if f == "layouts" else rounded(getattr(n, f)))
                         for f in fields}
    k = {f.name: rounded(getattr(constants, f.name)) for f in dataclasses.fields(Constants) if f.name != "layout"}
    devices = sorted({Device.from_record(d["device"]).label for _, d in tables})
    return {
        "about": "The final kernel's dispatch model: each candidate's numbers and the constants "
                 "(helpers/runtime/specs/final.py: Candidate and Constants say what each is). Written by "
                 "`python -m helpers refit` from the tables below; not to be edited by hand.",
        "provenance": {"devices": devices, "command": "python -m helpers refit",
                       "tables": [dict(file=name, hash=table_hash(d), device=Device.from_record(d["device"]).label,
                                       measured=d.get("started"), commit=d.get("commit"),
                                       source_hash=d.get("source_hash"), rows=len(d["rows"]))
                                  for name, d in tables]},
        "recipe": recipe,
        "quality": quality,
        "candidates": out_c,
        "constants": dict(k, layout={}),
    }


def refit(recipe: dict, table_files: list[str], root: Path = settings.ROOT) -> dict:
    """Fit the numbers the recipe names to the tables, from the numbers the first table was measured
    with (the rest are carried from there), and return the dispatch file's content."""
    docs = [(name, read_table(root / name)) for name in table_files]
    tabs = merged([d for _, d in docs])
    cands0, constants0 = table_numbers(docs[0][1])
    cands, constants, _ = fit(tabs, tabs.shapes, cands0, constants0, recipe["rounds"], only=tuple(recipe["fitted"]))
    quality = {}
    for name, (c, k) in (("measured_with", (cands0, constants0)), ("fitted", (cands, constants))):
        q = tabs.choices(c, k, tabs.shapes)
        quality[name] = {"choice_quality": round(geomean(q["ratio"]), 4), "worst": round(float(min(q["ratio"])), 4),
                         "pct_of_cublas": round(geomean(q["pct"]), 2)}
    quality["shapes"] = len(tabs.shapes)
    quality["about"] = ("per shape of the tables: the measured speed of the option the numbers choose over the "
                        "best measured option's (geometric mean, and the worst shape), and the choice's % of cuBLAS")
    return dispatch_doc(cands, constants, recipe, docs, quality)


def refit_file(path: Path = final.DISPATCH_FILE, root: Path = settings.ROOT) -> dict:
    """The dispatch file re-fitted from the recipe and tables it names."""
    doc = json.loads(path.read_text())
    return refit(doc["recipe"], [t["file"] for t in doc["provenance"]["tables"]], root)


def differences(a: dict, b: dict, rel: float = 1e-3, at: str = "") -> list[str]:
    """Where two dispatch files' contents differ (numbers: by more than ``rel``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), rel, f"{at}.{k}")]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return [] if abs(a - b) <= rel * max(abs(a), abs(b)) else [f"{at}: {a} != {b}"]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]
