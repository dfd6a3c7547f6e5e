"""Autotuning: search a kernel's config space for the fastest *correct* config.

Two steps, taught in the chapter "Autotuning" (book/11_autotuning.md):

1. :func:`candidates` prunes the space offline, with no GPU: the product of the
   allowed template values, then the kernel's own rules (the spec, against the
   device), then the compile report (registers, spills, shared memory, from
   :mod:`helpers.runtime.offline`, cached on disk), then occupancy
   (:mod:`helpers.models.occupancy`). It returns the survivors and how many
   configs each reason removed.
2. :func:`tune` times the survivors on the GPU with :func:`helpers.runtime.timing.measure`
   (each config is checked against cuBLAS before it is timed, and cuBLAS is timed
   in the same run), skips the ones that fail to compile or launch, and picks the
   fastest config whose result is correct.

``python -m helpers record --chapter autotuning`` runs both on the warp-tiling kernel of
chapter 10 at n = 4096 (:func:`record_rows`): a random sample, then a local search around
the best (one parameter at a time), then the default and the tuned config timed again side
by side in the same run.
"""
from __future__ import annotations

import ast
import hashlib
import html
import itertools
import json
import math
import os
import operator
import random
import re
import time
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .. import hardware
from ..hardware import Device
from ..models.occupancy import occupancy
from ..runtime.compile import compile_kernel
from ..runtime.offline import ToolMissing, resources
from ..runtime.specs import get
from ..runtime.timing import measure

# The kernel the recorded sweep tunes: chapter 10's warp tiles, whose defaults are its starting point.
TUNED_KERNEL = "warptiling"
# An SM has four warp schedulers (every compute capability the book covers): with
# fewer than four resident warps at least one of them has nothing to issue, ever.
MIN_WARPS = 4


# ------------------------------------------------------------ compile reports
def compile_report(spec, params: dict, device: Device) -> dict:
    """Registers, shared memory and spills of one valid config, or the compile error.

    ``{"registers", "static_smem", "spill_bytes", "stack_bytes", "error"}``; ``error`` is
    ``""`` when the config compiled. The compiles are cached on disk (the offline compiler's cache).
    """
    try:
        res = resources(spec, params, device)
        return {"registers": res.registers, "static_smem": res.static_smem,
                "spill_bytes": res.spill_stores + res.spill_loads, "stack_bytes": res.stack_bytes, "error": ""}
    except ToolMissing:
        raise
    except Exception as exc:  # a compile error is a result, not a crash
        return {"registers": None, "static_smem": None, "spill_bytes": None, "stack_bytes": None,
                "error": _error_line(exc)}


# ----------------------------------------------------------- offline pruning
def _reason(message: str) -> str:
    """A rule's message with the numbers taken out, so equal reasons group together."""
    text = re.sub(r"(\w)=\d+", r"\1", message)
    text = re.sub(r"(?<!float)\d+", "N", text)
    return text.strip().rstrip(".")


def first_problem(spec, params: dict, device: Device, resolved: bool = False) -> str | None:
    """The first rule a config breaks on ``device`` (None when valid), in the spec's order.

    Rules run one at a time, so a rule that cannot evaluate a combination (a division
    by a zero thread count) is only reached when the earlier rules, which explain the
    real problem, have passed. ``resolved``: ``params`` already holds every parameter
    at an allowed value (no check, no copy).
    """
    full = params if resolved else spec.resolve(params)
    for rule in spec.rules:
        try:
            msg = rule(full)
        except ArithmeticError as exc:
            msg = f"the rules cannot evaluate it ({type(exc).__name__})"
        if msg:
            return msg
    try:
        problems = spec.limit_problems(full, device)
    except ArithmeticError as exc:
        problems = [f"the limits cannot be evaluated ({type(exc).__name__})"]
    return problems[0] if problems else None


def space_size(spec) -> int:
    return math.prod(len(p.allowed) for p in spec.params)


_RULE_FUNNELS: dict = {}


def rule_funnel(spec, device: Device) -> tuple[list[dict], Counter]:
    """(valid configs, Counter of broken rules), in allowed-value order.

    Each invalid config counts under the first rule it breaks; configs breaking
    the same rule with other numbers count together, under the first message of
    that kind (e.g. "TM=8 must divide BM=4" also counts TM=16 and BM=8).

    Remembered per kernel and device in this process (the rules are Python: they
    cannot change while it runs); callers get copies.
    """
    names, values, valid, pruned = _remembered_funnel(spec, device)
    return [dict(zip(names, map(operator.getitem, values, c))) for c in valid], Counter(pruned)


def _remembered_funnel(spec, device: Device):
    key = (spec.name, device)
    if key not in _RULE_FUNNELS:
        _RULE_FUNNELS[key] = _rule_funnel(spec, device)
    return _RULE_FUNNELS[key]


def rules_broken(spec, device: Device) -> Counter:
    """The Counter of :func:`rule_funnel`, without copying its millions of valid configs."""
    stored = _stored_counts(spec, device)
    if stored:
        return Counter(dict(stored["broken"]))
    return Counter(_remembered_funnel(spec, device)[3])


# ------------------------------------------------------------ stored counts
# Walking the final kernel's space takes Python about two minutes: the chapter's counts of it
# (rules_broken, and _holding for the fixed values it asks about) are stored in STORED_COUNTS by
# `python -m helpers funnels`, under a fingerprint of everything that decides them: the code of
# the rules and limits (helpers/runtime, helpers/hardware.py, this file) and the device's model. They
# are used only while the fingerprint matches; otherwise the space is walked as before.
# tests/test_autotune.py checks that the stored counts match today's code.
STORED_COUNTS = Path(__file__).with_name("funnel_counts.json")
_HELPERS = Path(__file__).resolve().parent.parent
FUNNEL_CODE = ("hardware.py", "runtime", "measure/autotune.py")


def funnel_fingerprint(spec, device: Device) -> str:
    """A hash of the code that decides a funnel's counts (its syntax tree: a comment changes
    nothing), the kernel's name and what of the device they read: its limits, which follow from its
    compute capability, and its name, which the rules' messages quote (not its clock or bandwidth:
    a reader's GPU of the recorded model matches)."""
    h = hashlib.sha256(json.dumps([spec.name, device.label, device.cc]).encode())
    for part in FUNNEL_CODE:
        path = _HELPERS / part
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f.relative_to(_HELPERS).as_posix().encode())
            h.update(ast.dump(ast.parse(f.read_text())).encode())   # the code, not its comments or layout
    return h.hexdigest()[:20]


def _stored_key(spec, device: Device) -> str:
    return f"{spec.name} on {device.label}"


def _read_stored() -> dict:
    try:
        return json.loads(STORED_COUNTS.read_text())
    except (OSError, ValueError):
        return {}


def _stored_counts(spec, device: Device) -> dict | None:
    """The stored counts of this kernel on this device, if they match today's code."""
    entry = _read_stored().get(_stored_key(spec, device))
    return entry if entry and entry["fingerprint"] == funnel_fingerprint(spec, device) else None


def store_counts(spec, device: Device, fixed_sets=({},)) -> dict:
    """Walk the space and store its counts (and those holding each of ``fixed_sets``)."""
    for key in [k for k in _HOLDING if k[:2] == (spec.name, device)]:
        del _HOLDING[key]
    names, values, valid, pruned = _rule_funnel(spec, device)
    _RULE_FUNNELS[(spec.name, device)] = names, values, valid, pruned
    entry = {"fingerprint": funnel_fingerprint(spec, device), "broken": list(pruned.items()),
             "holding": [{"fixed": fixed, "counts": list(_holding(spec, device, fixed, stored=False))}
                         for fixed in fixed_sets]}
    doc = _read_stored()
    doc[_stored_key(spec, device)] = entry
    STORED_COUNTS.write_text(json.dumps(dict(sorted(doc.items())), indent=1) + "\n")
    return entry


_HOLDING: dict = {}


def valid_counts(spec, device: Device, fixed: dict) -> tuple[int, int]:
    """(valid configs, those of them that hold every value in ``fixed``): counted once per kernel,
    device and ``fixed`` in this process (the space has millions of valid configs; a chapter asks
    several times)."""
    return _holding(spec, device, fixed)[:2]


def held_values(spec, device: Device, fixed: dict) -> dict:
    """{parameter: the values it takes among the valid configs that hold ``fixed``}, in allowed order."""
    return _holding(spec, device, fixed)[2]


def _holding(spec, device: Device, fixed: dict, stored: bool = True) -> tuple[int, int, dict]:
    key = (spec.name, device, tuple(sorted(fixed.items())))
    if key not in _HOLDING and stored and (entry := _stored_counts(spec, device)):
        for h in entry["holding"]:
            if h["fixed"] == fixed:
                _HOLDING[key] = tuple(h["counts"])
    if key not in _HOLDING:
        names, values, valid, _ = _remembered_funnel(spec, device)
        # the valid configs are kept as positions in the allowed values: compare positions
        if any(k not in names or v not in values[names.index(k)] for k, v in fixed.items()):
            rows = []                     # a name the kernel lacks, or a value it does not allow
        elif fixed:
            at = [names.index(k) for k in fixed]
            want = tuple(values[i].index(v) for i, v in zip(at, fixed.values()))
            want = want if len(at) > 1 else want[0]      # itemgetter of one index gives the value itself
            pick = operator.itemgetter(*at)
            rows = [c for c in valid if pick(c) == want]
        else:
            rows = valid
        seen = [_column_values(rows, i, len(values[i])) for i in range(len(names))]
        _HOLDING[key] = len(valid), len(rows), {n: [values[i][x] for x in sorted(seen[i])] for i, n in enumerate(names)}
    return _HOLDING[key]


def _column_values(rows: list, i: int, n: int, chunk: int = 1 << 16) -> set:
    """The positions column ``i`` of ``rows`` takes, read a chunk at a time until all ``n`` are seen
    (in C, by map: the final kernel's space has millions of valid configs)."""
    found, column = set(), operator.itemgetter(i)
    for a in range(0, len(rows), chunk):
        found.update(map(column, rows[a:a + chunk]))
        if len(found) == n:
            break
    return found


class _Reads(dict):
    """A config that remembers which parameters were read (anything that walks all of
    it, such as ``**config``, counts as reading every one).

    It starts empty and takes a parameter's value from ``config`` the first time it is read
    (``__missing__``): the parameters read are its own keys, and every later read is a plain
    dict's, which matters for the millions of rule checks of the final kernel's space."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = config

    def __missing__(self, key):
        value = self.config[key]
        dict.__setitem__(self, key, value)
        return value

    @property
    def read(self):
        return dict.keys(self)

    def get(self, key, default=None):
        return self[key] if key in self.config else default

    def __contains__(self, key):
        return key in self.config

    def __len__(self):
        return len(self.config)

    def _all(self) -> dict:
        if dict.__len__(self) < len(self.config):
            self.update(self.config)
        return self

    def keys(self):
        return dict.keys(self._all())

    def items(self):
        return dict.items(self._all())

    def values(self):
        return dict.values(self._all())

    def __iter__(self):
        return dict.__iter__(self._all())

    def __eq__(self, other):
        return dict(self._all()) == other

    def __or__(self, other):
        return dict(self._all()) | other

    def __repr__(self):
        return repr(dict(self._all()))

    def copy(self):
        return dict(self._all())


def _rule_funnel(spec, device):
    """A decision tree over the space: evaluate a config with the parameters not yet fixed
    at their first values; if the verdict (valid, or the first rule it breaks) read none
    of those, it holds for every value of them, and the whole subtree is decided at once;
    otherwise branch on the first one it read. Exact, and far fewer evaluations than
    configs (millions for the final kernel). The child that takes the branch's first value
    has its parent's config, so it takes over the parent's verdict: half the evaluations."""
    names = spec.param_names
    allowed = {p.name: p.allowed for p in spec.params}
    valid, counts, example = [], Counter(), {}
    reasons = {}         # message -> _reason(message): many subtrees break a rule with the same numbers
    firsts = {n: allowed[n][0] for n in names}

    def walk(fixed: dict, known=None) -> None:
        # known: (config, verdict) when the parent evaluated this very config
        if known is None:
            cfg = _Reads({**firsts, **fixed})
            known = cfg, first_problem(spec, cfg, device, resolved=True)
        cfg, problem = known
        read = cfg.read
        branch = next((n for n in names if n in read and n not in fixed), None)
        if branch is not None:
            # the branch's first value leaves the config as it is: that child's verdict is this one
            for i, v in enumerate(allowed[branch]):
                walk({**fixed, branch: v}, (cfg, problem) if i == 0 else None)
            return
        free = [n for n in names if n not in fixed]
        if problem is None:      # as positions in allowed-value order: tuples sort fast
            valid.extend(itertools.product(*((order[n][fixed[n]],) if n in fixed else range(len(allowed[n]))
                                             for n in names)))
        else:
            key = reasons.get(problem) or reasons.setdefault(problem, _reason(problem))
            counts[key] += math.prod(len(allowed[n]) for n in free)
            first = position(cfg)          # the subtree's first config in allowed-value order
            if key not in example or first < example[key][0]:
                example[key] = (first, problem.rstrip("."))

    order = {n: {v: i for i, v in enumerate(allowed[n])} for n in names}

    def position(c) -> tuple:
        return tuple(order[n][c.config[n]] for n in names)

    walk({})
    first_seen = sorted(example, key=lambda k: example[k][0])       # the order a plain loop meets them
    counts = Counter({k: counts[k] for k in first_seen})
    example = {k: example[k][1] for k in first_seen}
    valid.sort()                                                     # allowed-value order
    # (names, allowed values, valid configs as positions in them, broken rules): millions of
    # configs stay tuples until a caller asks for dicts (rule_funnel)
    return list(names), [allowed[n] for n in names], valid, Counter({example[k]: n for k, n in counts.items()})


def pinned(spec, names=()) -> dict:
    """``{name: default}`` for the parameters in ``names`` that the kernel has."""
    d = spec.defaults()
    return {n: d[n] for n in names if n in d}


def sample_configs(configs: list[dict], k: int | None, seed: int = 0, keep=()) -> list[dict]:
    """A reproducible sample of ``k`` configs that always contains the ones in ``keep``."""
    if k is None or len(configs) <= k:
        return list(configs)
    keep = [c for i, c in enumerate(keep) if c in configs and c not in keep[:i]][:k]
    rest = [c for c in configs if c not in keep]
    chosen = keep + random.Random(seed).sample(rest, k - len(keep))
    order = {json.dumps(c, sort_keys=True): i for i, c in enumerate(configs)}
    return sorted(chosen, key=lambda c: order[json.dumps(c, sort_keys=True)])


@dataclass
class Funnel:
    """What :func:`candidates` kept and why it dropped the rest."""

    kernel: str
    stages: list  # [(description, configs left)], first = the whole product
    pruned: "OrderedDict[str, int]"  # reason -> configs it removed, in funnel order
    survivors: list  # candidate dicts (params + resources + occupancy)
    rejected: list  # candidate dicts with "reason"
    sampled: bool = False

    @property
    def configs(self) -> list[dict]:
        return [c["params"] for c in self.survivors]

    def __str__(self):
        arrows = " → ".join(f"{n} {what}" for what, n in self.stages)
        lines = [f"{self.kernel}: {arrows}"]
        for reason, n in self.pruned.items():
            lines.append(f"  - {n:5d} removed: {reason}")
        return "\n".join(lines)

    def _repr_html_(self):
        rows = "".join(f"<tr><td>{html.escape(w)}</td><td style='text-align:right'>{n}</td></tr>"
                       for w, n in self.stages)
        why = "".join(f"<tr><td>{html.escape(r)}</td><td style='text-align:right'>{n}</td></tr>"
                      for r, n in self.pruned.items())
        return (f"<p><b>{html.escape(self.kernel)}</b>: configs left after each step</p>"
                f"<table class='table'><thead><tr><th>step</th><th>configs</th></tr></thead><tbody>{rows}</tbody></table>"
                f"<table class='table'><thead><tr><th>removed because</th><th>configs</th></tr></thead>"
                f"<tbody>{why}</tbody></table>")


def analyse(spec, params: dict, device: Device, require_no_spills: bool = True,
            min_occupancy_warps: int = MIN_WARPS) -> dict:
    """Compile one config offline and say whether it survives; returns a candidate dict."""
    threads = spec.threads(params)
    try:
        rep = compile_report(spec, params, device)
    except ToolMissing as exc:  # no offline compiler here: keep the config, unanalysed
        return {"params": dict(params), "threads": threads, "registers": None, "spill_bytes": None,
                "smem": spec.smem_bytes(params), "blocks_per_sm": None, "active_warps": None, "occupancy": None,
                "limiter": None, "reason": "", "note": f"not compiled offline: {exc}"}
    out = {"params": dict(params), "threads": threads, "registers": rep["registers"],
           "spill_bytes": rep["spill_bytes"], "smem": None, "blocks_per_sm": None, "active_warps": None,
           "occupancy": None, "limiter": None, "reason": ""}
    if rep["error"]:
        out["reason"] = "does not compile"
        out["error"] = rep["error"]
        return out
    out["smem"] = rep["static_smem"] + spec.smem_bytes(params)
    occ = occupancy(threads, rep["registers"], out["smem"], device)
    out.update(blocks_per_sm=occ.blocks_per_sm, active_warps=occ.active_warps,
               occupancy=occ.active_warps / occ.max_warps, limiter=occ.limiter)
    if require_no_spills and rep["spill_bytes"]:
        out["reason"] = "spills registers to local memory"
    elif occ.blocks_per_sm == 0:
        out["reason"] = "a block does not fit on an SM"
    elif occ.active_warps < min_occupancy_warps:
        out["reason"] = f"fewer than {min_occupancy_warps} resident warps per SM"
    return out


def candidates(kernel, device: Device | None = None, require_no_spills: bool = True,
               min_occupancy_warps: int = MIN_WARPS, sample: int | None = None, seed: int = 0,
               fixed: dict | None = None, keep=(), workers: int | None = None,
               progress: bool = False, budget_s: float | None = None) -> Funnel:
    """The configs worth timing, and a funnel of what was removed at each step.

    * the product of every parameter's allowed values;
    * minus configs that break the kernel's rules (``spec.rules``, block and
      shared-memory limits): checked in Python, instantly;
    * optionally only the configs with the ``fixed`` values (parameters that
      matter for other shapes, say split-K for a square product);
    * optionally a reproducible sample of ``sample`` of the valid ones, because
      the next step compiles each config; the ``keep`` configs (default: the
      kernel's default config) are always in it;
    * minus configs that do not compile, spill registers to local memory
      (``require_no_spills``), or leave fewer than ``min_occupancy_warps`` warps
      resident on an SM. The default, 4, is one warp per warp scheduler: below it
      part of the SM can never issue.

    Compile reports come from NVRTC for the device's architecture (no GPU needed),
    several at once, cached on disk. ``budget_s`` stops starting new compiles after
    that many seconds (the configs left out are not analysed).
    """
    spec, device = get(kernel), device or hardware.default()
    total = space_size(spec)
    valid, rule_pruned = rule_funnel(spec, device)
    stages = [("combinations of the allowed values", total), ("obey the kernel's rules", len(valid))]
    pruned: OrderedDict = OrderedDict((f"rule: {r}", n) for r, n in rule_pruned.most_common())
    keep = [spec.resolve(k) for k in keep] or [spec.defaults()]
    keep = [k for i, k in enumerate(keep) if k not in keep[:i] and not first_problem(spec, k, device)]
    if fixed:
        fixed = {k: int(v) for k, v in fixed.items()}
        spec.resolve(fixed)  # unknown names or disallowed values raise here
        held = [c for c in valid if all(c[k] == v for k, v in fixed.items())]
        pruned[f"not the fixed {_fmt(fixed)}"] = len(valid) - len(held)
        valid = held
        stages.append((f"with {_fmt(fixed)} fixed", len(valid)))
    pool_cfgs = valid + [k for k in keep if k not in valid]
    chosen = sample_configs(pool_cfgs, sample, seed, keep=keep)
    sampled = len(chosen) < len(pool_cfgs)
    if sampled:
        stages.append((f"sampled at random (seed {seed})", len(chosen)))
    elif len(pool_cfgs) != len(valid):
        stages.append(("plus the configs kept on purpose", len(chosen)))
    workers = workers or min(16, os.cpu_count() or 1)
    t0 = time.time()
    done: dict = {}
    with ThreadPoolExecutor(max(1, workers)) as pool:
        order = sorted(range(len(chosen)), key=lambda i: chosen[i] not in keep)  # kept configs first
        futures = {pool.submit(analyse, spec, chosen[i], device, require_no_spills, min_occupancy_warps): i
                   for i in order}
        for fut in as_completed(futures):
            if fut.cancelled():
                continue
            done[futures[fut]] = fut.result()
            n = len(done)
            if progress and (n % 25 == 0 or n == len(chosen)):
                print(f"  compiled {n}/{len(chosen)} configs offline ({time.time() - t0:.0f} s)", flush=True)
            if budget_s is not None and time.time() - t0 > budget_s:
                for f in futures:
                    f.cancel()  # the ones not started yet; running compiles finish
        for fut, i in futures.items():
            if i not in done and not fut.cancelled():
                done[i] = fut.result()
    results = [done[i] for i in sorted(done)]
    if len(results) < len(chosen):
        stages.append((f"compiled within {budget_s:g} s", len(results)))
        if progress:
            print(f"  offline budget of {budget_s:g} s spent: {len(chosen) - len(results)} configs not compiled",
                  flush=True)
    survivors = [c for c in results if not c["reason"]]
    rejected = [c for c in results if c["reason"]]
    left = len(chosen)
    for stage, test in ((f"compile for {device.arch}", lambda r: r == "does not compile"),
                        ("no register spills", lambda r: r.startswith("spills")),
                        (f"at least {min_occupancy_warps} warps resident per SM",
                         lambda r: "resident warps" in r or "does not fit" in r)):
        gone = Counter(c["reason"] for c in rejected if test(c["reason"]))
        if not gone and stage == "no register spills" and not require_no_spills:
            continue
        left -= sum(gone.values())
        stages.append((stage, left))
        for r, n in gone.most_common():
            pruned[r] = n
    return Funnel(spec.name, stages, pruned, survivors, rejected, sampled)


# ------------------------------------------------------------- live timing
@dataclass
class TuneResult:
    """Every timed config (Result dicts plus ``status``) and the fastest correct one."""

    kernel: str
    shape: tuple
    rows: list
    best: dict | None
    seconds: float = 0.0
    skipped: list = field(default_factory=list)  # configs not tried (time budget)

    @property
    def correct(self) -> list:
        return [r for r in self.rows if r.get("status") == "timed" and r["ok"]]

    def summary(self) -> str:
        return summarize(self.rows, self.kernel, self.shape)

    def __str__(self):
        return self.summary()

    def _repr_html_(self):
        return "<pre>" + html.escape(self.summary()) + "</pre>" + top_table(self.rows)


def summarize(rows: list, kernel: str, shape) -> str:
    timed = [r for r in rows if r.get("status") == "timed"]
    good = [r for r in timed if r["ok"]]
    failed = [r for r in rows if r.get("status") == "failed"]
    M, N, K = shape
    lines = [f"{kernel} at {M}x{N}x{K}: {len(timed)} configs timed, {len(timed) - len(good)} wrong, "
             f"{len(failed)} failed to compile or launch"]
    if not good:
        lines.append("no correct config was found")
        return "\n".join(lines)
    best = max(good, key=lambda r: r["tflops"])
    lines.append(f"best: {_fmt(best['params'])}: {best['tflops']:.1f} TFLOP/s, "
                 f"{100 * best['tflops'] / best['cublas_tflops']:.0f}% of cuBLAS ({best['cublas_tflops']:.1f} TFLOP/s), "
                 f"relative error {best['rel_err']:.1e}")
    return "\n".join(lines)


def top_table(rows: list, n: int = 10) -> str:
    """HTML table of the ``n`` fastest correct configs."""
    good = sorted((r for r in rows if r.get("status") == "timed" and r["ok"]), key=lambda r: -r["tflops"])[:n]
    if not good:
        return "<p>no correct config</p>"
    names = list(good[0]["params"])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in names)
    body = "".join(
        "<tr>" + "".join(f"<td>{r['params'][k]}</td>" for k in names)
        + f"<td>{r['tflops']:.1f}</td><td>{100 * r['tflops'] / r['cublas_tflops']:.0f}%</td>"
        + f"<td>{_opt(r.get('registers'))}</td><td>{_opt(r.get('active_warps'))}</td></tr>" for r in good)
    return (f"<table class='table'><thead><tr>{head}<th>TFLOP/s</th><th>% of cuBLAS</th>"
            f"<th>registers</th><th>warps/SM</th></tr></thead><tbody>{body}</tbody></table>")


def _opt(v) -> str:
    return "–" if v is None else str(v)


def _fmt(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


class _Progress:
    """An ipywidgets bar in Jupyter, one text line per config elsewhere."""

    def __init__(self, total: int, title: str, enabled: bool = True):
        self.total, self.title, self.enabled, self.bar = total, title, enabled, None
        self.t0 = time.time()
        if enabled and _in_notebook():
            try:
                import ipywidgets as w                   # noqa: PLC0415  (only inside Jupyter)
                from IPython.display import display      # noqa: PLC0415

                self.bar = w.IntProgress(min=0, max=max(total, 1), description="tuning")
                self.label = w.HTML(title)
                display(w.VBox([self.bar, self.label]))
            except Exception:
                self.bar = None

    def update(self, i: int, line: str, best: str):
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.value = i
            self.label.value = f"{html.escape(line)}<br><b>best so far:</b> {html.escape(best)}"
        else:
            print(f"[{i}/{self.total}] {line}  ({time.time() - self.t0:.0f} s)", flush=True)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython    # noqa: PLC0415  (IPython may be absent: then no notebook)

        shell = get_ipython()
        return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"
    except Exception:
        return False


def _shape(shape) -> tuple:
    if isinstance(shape, int):
        return (shape, shape, shape)
    M, N, K = shape
    return (int(M), int(N), int(K))


def _config_list(configs) -> list:
    if isinstance(configs, Funnel):
        return [dict(c["params"], **{}) for c in configs.survivors]
    return [dict(c["params"]) if isinstance(c, dict) and "params" in c else dict(c) for c in configs]


def _error_line(exc: Exception) -> str:
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    err = next((l for l in lines if "error" in l.lower() and not l.startswith("NVRTC could not")), None)
    return f"{type(exc).__name__}: {(err or (lines[0] if lines else ''))[:200]}"


def precompile(spec, configs: list, workers: int | None = None, log=None) -> dict:
    """Compile configs with CuPy several at a time, before timing; returns {config JSON: error}.

    Compiling is most of an autotuner's time and NVRTC runs happily in parallel
    threads; timing must not (one kernel at a time owns the GPU). A config that
    fails here is tried again, and reported, when it is timed.
    """
    def one(params):
        try:
            compile_kernel(spec, spec.validate(params))
            return ""
        except Exception as exc:
            return _error_line(exc)

    workers = workers or min(16, os.cpu_count() or 1)
    t0 = time.time()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        errors = dict(zip((json.dumps(c, sort_keys=True) for c in configs), pool.map(one, configs)))
    if log:
        bad = sum(1 for e in errors.values() if e)
        log(f"compiled {len(configs)} configs in {time.time() - t0:.0f} s ({workers} at a time)"
            + (f", {bad} failed" if bad else ""))
    return errors


def tune(kernel, shape, configs, progress: bool = True, target_s: float = 0.2,
         budget_s: float | None = None, info: dict | None = None, parallel_compile: bool = True) -> TuneResult:
    """Time every config at ``shape`` on the GPU; return all rows and the fastest correct one.

    ``configs``: parameter dicts, or a :class:`Funnel` from :func:`candidates`.
    They are compiled first, several at a time (``parallel_compile``), then
    timed one by one.
    Each config is checked against cuBLAS before it is timed (``ok``/``rel_err``
    in its row); a wrong one is reported and never chosen. A config that fails
    to compile or launch is skipped with the reason. ``budget_s`` stops early
    (after at least one config)
    (the configs not tried are listed in ``skipped``). ``info`` maps a config's
    JSON to extra fields for its row (e.g. the offline resource report).
    """
    if not hardware.is_live():
        raise RuntimeError("tune() times kernels, so it needs a CUDA GPU; in the online book "
                           "the chapter shows a recorded sweep instead")
    spec = get(kernel)
    M, N, K = _shape(shape)
    configs = _config_list(configs)
    t0 = time.time()
    if parallel_compile and len(configs) > 1:
        precompile(spec, configs, log=(lambda line: print(line, flush=True)) if progress else None)
    bar = _Progress(len(configs), f"{spec.name} at {M}x{N}x{K}", progress)
    cache: dict = {}
    rows, best, skipped = [], None, []
    for i, params in enumerate(configs, 1):
        if budget_s is not None and i > 1 and time.time() - t0 > budget_s:
            skipped = configs[i - 1:]
            break
        extra = dict((info or {}).get(json.dumps(params, sort_keys=True), {}))
        try:
            r = measure(spec, M, N, K, params, cublas_cache=cache, target_s=target_s)
            row = dict(r.as_dict(), status="timed", reason="", **extra)
            line = (f"{_fmt(row['params'])}: {row['tflops']:.1f} TFLOP/s"
                    + ("" if row["ok"] else f"  WRONG (relative error {row['rel_err'] or float('inf'):.1e}): not eligible"))
            if row["ok"] and (best is None or row["tflops"] > best["tflops"]):
                best = row
        except Exception as exc:  # compile error, refused launch, launch failure
            row = {"kernel": spec.name, "params": dict(params), "M": M, "N": N, "K": K, "status": "failed",
                   "reason": _error_line(exc), "ok": False, **extra}
            line = f"{_fmt(params)}: skipped, {row['reason']}"
        rows.append(row)
        bar.update(i, line, _best_line(best))
    res = TuneResult(spec.name, (M, N, K), rows, best, time.time() - t0, skipped)
    if progress:
        if bar.bar is not None:
            bar.label.value += "<br>" + res.summary().replace("\n", "<br>")
        else:
            print(res.summary(), flush=True)
    return res


def _best_line(best) -> str:
    if best is None:
        return "none yet"
    return (f"{_fmt(best['params'])}: {best['tflops']:.1f} TFLOP/s "
            f"({100 * best['tflops'] / best['cublas_tflops']:.0f}% of cuBLAS)")


# ----------------------------------------------------------- recorded sweep
SWEEP_N = 4096
SWEEP_TIMED = 24       # configs of the random sample timed at n = 4096 (the default among them)
SWEEP_OFFLINE = 400    # at most this many valid configs are compiled offline
SWEEP_ROUNDS = 4       # rounds of local search around the best
COMPARE_TARGET_S = 0.6 # seconds of timed launches for each of the default and the tuned config at the end
# Parameters held at their default in the recorded sweep (the final kernel's): they matter for
# other shapes (split-K and stream-K for thin products, rasterisation groups for L2 reuse) or
# follow the operands' layouts, not which tile shape suits a square product.
SWEEP_PINNED = ("SPLITK", "GROUP", "STREAMK", "A_T", "B_T")
# Moves of the local search that change two parameters at once: a side of the warp tile with
# the same side of the thread tile (or the two sides of the warp tile against each other), so
# that the lanes stay 32.
PAIRED = ({"WM", "TM"}, {"WN", "TN"}, {"WM", "WN"}, {"BM", "WM"}, {"BN", "WN"})


def neighbours(spec, params: dict, pool: list[dict]) -> list[dict]:
    """The configs of ``pool`` one move from ``params``: one parameter to the next allowed value
    up or down, or one of the :data:`PAIRED` pairs each by one allowed value."""
    index = {p.name: list(p.allowed) for p in spec.params}
    out = []
    for c in pool:
        changed = {k for k in params if c[k] != params[k]}
        if not changed or len(changed) > 2 or (len(changed) == 2 and changed not in PAIRED):
            continue
        if all(abs(index[k].index(c[k]) - index[k].index(params[k])) == 1 for k in changed):
            out.append(c)
    return out


def sweep_rows(kernel: str = TUNED_KERNEL, n: int = SWEEP_N, timed: int = SWEEP_TIMED,
               offline: int = SWEEP_OFFLINE, budget_s: float = 150.0, seed: int = 0,
               rounds: int = SWEEP_ROUNDS, log=print) -> list[dict]:
    """The recorded search: prune offline, time a random sample of the survivors at n x n x n,
    search around the best one parameter at a time, then time the default and the best again,
    back to back.

    One row per config compiled offline: ``status`` is ``"timed"`` (with the measurement and
    ``phase``: "sample" or "local"), ``"failed"`` (with the reason), ``"pruned"`` (``reason``
    says which step removed it) or ``"not timed"``. Two more rows, ``status`` ``"compared"``,
    ``compare`` "default" and "tuned": the two configs timed side by side at the end. Every row
    carries registers, spills, shared memory and occupancy.
    """
    t0 = time.time()
    spec, device = get(kernel), hardware.current()
    picked = spec.config_for(n, n, n, device) if spec.choose else None
    default = spec.defaults()
    keep = [default] + ([picked] if picked else [])
    log(f"autotuning {spec.name}: offline pruning (at most {offline} configs compiled)")
    f = candidates(spec, device, sample=offline, seed=seed, keep=keep, fixed=pinned(spec, SWEEP_PINNED),
                   progress=True, budget_s=0.3 * budget_s)
    log(str(f))
    survivors = [c["params"] for c in f.survivors]
    info = {json.dumps(c["params"], sort_keys=True): _resource_fields(c) for c in f.survivors}
    deadline = t0 + budget_s

    rows: list = []

    def run(configs, phase):
        configs = [c for c in configs if json.dumps(c, sort_keys=True) not in {json.dumps(r["params"], sort_keys=True)
                                                                                for r in rows}]
        if not configs or time.time() > deadline:
            return
        res = tune(spec, n, configs, progress=True, budget_s=max(5.0, deadline - time.time()), info=info)
        rows.extend(dict(r, phase=phase) for r in res.rows)

    to_time = sample_configs(survivors, timed, seed, keep=keep)
    log(f"timing a sample of {len(to_time)} of {len(survivors)} surviving configs at n={n}")
    run(to_time, "sample")
    for i in range(rounds):
        best = best_row(rows)
        if best is None:
            break
        near = neighbours(spec, best["params"], survivors)
        log(f"local search, round {i + 1}: {len(near)} configs one move from {spec.label(best['params'])}")
        run(near, "local")
        if best_row(rows) is best:
            break
    best = best_row(rows)
    if best is not None:
        log(f"the default and the tuned config, side by side at n={n}")
        cache: dict = {}
        for what, params in (("default", default), ("tuned", best["params"])):
            r = measure(spec, n, n, n, params, cublas_cache=cache, target_s=COMPARE_TARGET_S)
            rows.append(dict(r.as_dict(), status="compared", compare=what, reason="",
                             **info.get(json.dumps(params, sort_keys=True), {})))
            log(f"  {what}: {spec.label(params)}: {rows[-1]['tflops']:.1f} TFLOP/s")
    seen = {json.dumps(r["params"], sort_keys=True) for r in rows}
    for c in f.survivors:
        if json.dumps(c["params"], sort_keys=True) not in seen:
            rows.append(dict(_untimed(spec, c, n), status="not timed", reason=""))
    for c in f.rejected:
        rows.append(dict(_untimed(spec, c, n), status="pruned", reason=c["reason"]))
    for r in rows:
        r["default"] = r["params"] == default
        r["chosen"] = picked is not None and r["params"] == picked
    log(f"autotuning done in {time.time() - t0:.0f} s")
    return rows


def _resource_fields(c: dict) -> dict:
    return {k: c[k] for k in ("registers", "spill_bytes", "smem", "threads", "blocks_per_sm",
                              "active_warps", "occupancy", "limiter")}


def _untimed(spec, c: dict, n: int) -> dict:
    return dict({"kernel": spec.name, "params": dict(c["params"]), "M": n, "N": n, "K": n, "ms": None,
                 "tflops": None, "cublas_tflops": None, "rel_err": None, "ok": None,
                 "source_hash": spec.source_hash()}, **_resource_fields(c))


def record_rows() -> list[dict]:
    """``python -m helpers record --chapter autotuning``: about three minutes on an H100/H200."""
    return sweep_rows()


def compared(rows: list, what: str) -> dict | None:
    """The row of the default ("default") or the tuned config ("tuned") timed side by side at
    the end of the search (None in a search recorded without them)."""
    return next((r for r in rows if r.get("status") == "compared" and r.get("compare") == what), None)


def tuned_row(rows: list) -> dict | None:
    """The tuned config's row: the side-by-side one, or, in a search without it, the fastest timed."""
    return compared(rows, "tuned") or best_row(rows)


# ------------------------------------------------------- reading a recorded sweep
def timed_rows(rows: list) -> list:
    return [r for r in rows if r.get("status") == "timed" and r.get("ok")]


def best_row(rows: list) -> dict | None:
    good = timed_rows(rows)
    return max(good, key=lambda r: r["tflops"]) if good else None


def funnel_from_rows(spec, rows: list, device: Device, fixed: dict | None = None) -> list[tuple[str, int]]:
    """The pruning funnel of a recorded sweep: rule steps recomputed from the spec, the rest from the rows.

    ``fixed`` defaults to the parameters the recorded sweep pins (:data:`SWEEP_PINNED`).
    """
    fixed = pinned(spec, SWEEP_PINNED) if fixed is None else fixed
    n_valid, n_held = valid_counts(spec, device, fixed)
    stages = [("combinations of the allowed values", space_size(spec)), ("obey the kernel's rules", n_valid)]
    if fixed:
        stages.append((f"with {_fmt(fixed)} fixed", n_held))
    analysed = [r for r in rows if r.get("status") in ("timed", "failed", "not timed", "pruned")]
    if len(analysed) != n_held:
        stages.append(("sampled for the offline compile", len(analysed)))
    left = len(analysed)
    reasons = Counter(r["reason"] for r in analysed if r.get("status") == "pruned")
    for label, test in ((f"compile for {device.arch}", lambda r: r == "does not compile"),
                        ("no register spills", lambda r: r.startswith("spills") or "registers per thread" in r),
                        ("enough warps resident per SM", lambda r: "resident warps" in r or "does not fit" in r)):
        left -= sum(n for r, n in reasons.items() if test(r))
        stages.append((label, left))
    stages.append((f"timed at n={rows[0]['M'] if rows else SWEEP_N}",
                   sum(1 for r in rows if r.get("status") in ("timed", "failed"))))
    stages.append(("correct", len(timed_rows(rows))))
    return stages


def reasons_from_rows(spec, rows: list, device: Device, fixed: dict | None = None) -> "OrderedDict[str, int]":
    """Why configs were removed: the rules (recomputed from the spec), then the recorded compile steps."""
    out: OrderedDict = OrderedDict((f"rule: {r}", n) for r, n in rules_broken(spec, device).most_common())
    fixed = pinned(spec, SWEEP_PINNED) if fixed is None else fixed
    if fixed:
        n_valid, n_held = valid_counts(spec, device, fixed)
        out[f"not the fixed {_fmt(fixed)}"] = n_valid - n_held
    for r, n in Counter(r["reason"] for r in rows if r.get("status") == "pruned").most_common():
        out[r] = n
    return out


COUNTED_KERNELS = (TUNED_KERNEL, "final")   # the tuned kernel, and the final kernel a search recorded earlier may show


def store_chapter_counts(devices, log=print) -> None:
    """``python -m helpers funnels``: the counts the chapter shows of the tuned kernel's space
    (every rule's share, and the configs left with SWEEP_PINNED at their defaults), per device;
    also those of the final kernel, which earlier recorded searches tuned."""
    for name in COUNTED_KERNELS:
        spec = get(name)
        for device in devices:
            t0 = time.time()
            entry = store_counts(spec, device, ({}, pinned(spec, SWEEP_PINNED)))
            log(f"{spec.name} on {device.label}: {entry['holding'][0]['counts'][0]:,} valid configs "
                f"({time.time() - t0:.0f} s), stored in {STORED_COUNTS}")
