"""Bank conflicts measured by Nsight Compute (``ncu``): run, parse, record.

Taught in the chapter "Bank conflicts" (book/08_bank_conflicts.md).

``ncu`` replays one kernel launch and reads the GPU's hardware counters. For
shared memory the useful ones are, for loads (``op_ld``) and stores (``op_st``):

* ``smsp__inst_executed_op_shared_ld.sum``: warp-level shared-load instructions;
* ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum``: the wavefronts they took;
* ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum``: the wavefronts
  above the minimum, i.e. caused by bank conflicts.

Wavefronts per instruction is what :mod:`helpers.banks` models: 1 for a clean
32-bit access, 4 for a clean LDS.128, more with conflicts.

:func:`command` builds the exact command line (printed in the chapter);
:func:`profile` runs it in a subprocess, which launches the kernel once through
:func:`helpers.launch.prepare`; :func:`parse_csv` reads ncu's ``--csv`` output.
``python -m helpers record --chapter bank_conflicts_ncu`` stores the counters of
every layout of kernel 07 (plus kernels 05 and 06) in ``book/data``.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from .record import table_recorder

CHAPTER = "bank_conflicts_ncu"
SIZE = 1024   # counters scale with the size; per-instruction ratios do not

METRICS = (
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
SHORT = {
    "smsp__inst_executed_op_shared_ld.sum": "load instructions",
    "smsp__inst_executed_op_shared_st.sum": "store instructions",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "load wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "store wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "load bank conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "store bank conflicts",
}

# Runs inside the profiled process: one launch of one config, then exit.
LAUNCH = """\
import json, sys, cupy
from helpers.launch import prepare
name, params, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
rng = cupy.random.default_rng(0)
A = rng.uniform(-1, 1, (n, n), dtype=cupy.float32)
B = rng.uniform(-1, 1, (n, n), dtype=cupy.float32)
C = cupy.empty((n, n), dtype=cupy.float32)
prepare(name, n, n, n, params)(A, B, C)
cupy.cuda.runtime.deviceSynchronize()
"""


class NcuUnavailable(RuntimeError):
    """ncu is not installed, or may not read the GPU's counters here."""


def find_ncu() -> str | None:
    """The ncu executable: $NCU, PATH, or the usual CUDA install places."""
    env = os.environ.get("NCU")
    if env and os.path.exists(env):
        return env
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def kernel_regex(kernel: str) -> str:
    from .registry import get

    return f"regex:{get(kernel).function}"


def command(kernel: str, params: dict, n: int = SIZE, metrics=METRICS, ncu: str = "ncu",
            python: str | None = None) -> list[str]:
    """The ncu command line that profiles one launch of ``kernel`` with ``params`` at n x n x n."""
    return [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(metrics),
            "--kernel-name", kernel_regex(kernel), "--launch-count", "1",
            python or sys.executable, "-c", LAUNCH, kernel, json.dumps(params, sort_keys=True), str(n)]


def command_line(kernel: str, params: dict, n: int = SIZE) -> str:
    """:func:`command` as one shell line (``python`` for the interpreter)."""
    return " ".join(shlex.quote(x) for x in command(kernel, params, n, python="python"))


# ------------------------------------------------------------------- parsing
def _number(text: str):
    t = text.strip().replace("\u202f", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", t):     # thousands separators
        t = t.replace(",", "")
    try:
        v = float(t)
    except ValueError:
        return None
    return int(v) if v.is_integer() else v


def parse_csv(text: str) -> list[dict]:
    """Rows of ``ncu --csv`` output: {id, kernel_name, metric, unit, value}.

    Skips ncu's own ``==PROF==``/``==WARNING==`` lines and anything the program
    printed before the header; values lose their thousands separators.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if '"Metric Name"' in line and '"Metric Value"' in line), None)
    if start is None:
        return _parse_wide(lines)
    body = [line for line in lines[start:] if line.startswith('"')]
    rows = []
    for rec in csv.DictReader(io.StringIO("\n".join(body))):
        name = rec.get("Metric Name")
        if not name:
            continue
        rows.append({"id": rec.get("ID", ""), "kernel_name": rec.get("Kernel Name", ""), "metric": name,
                     "unit": rec.get("Metric Unit", ""), "value": _number(rec.get("Metric Value", ""))})
    return rows


def _parse_wide(lines: list[str]) -> list[dict]:
    """``--page raw`` output: one column per metric, a row of units, one row per launch."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"') and '"Kernel Name"' in line), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    recs = list(csv.reader(io.StringIO("\n".join(body))))
    head, units, data = recs[0], (recs[1] if len(recs) > 1 else []), recs[2:]
    metrics = [i for i, h in enumerate(head) if re.fullmatch(r"[a-z0-9]+__[\w.]+", h)]
    rows = []
    for rec in data:
        get = dict(zip(head, rec))
        for i in metrics:
            rows.append({"id": get.get("ID", ""), "kernel_name": get.get("Kernel Name", ""), "metric": head[i],
                         "unit": units[i] if i < len(units) else "", "value": _number(rec[i]) if i < len(rec) else None})
    return rows


def errors_in(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]


def unknown_metrics(text: str) -> list[str]:
    """Metric names ncu says it does not know (they differ between ncu versions)."""
    return re.findall(r"[Ff]ailed to find metric[s]?\s+\"?([\w.]+)", text)


# ------------------------------------------------------------------- running
def profile(kernel: str, params: dict | None = None, n: int = SIZE, metrics=METRICS, timeout: int = 600) -> list[dict]:
    """Profile one launch; returns {metric: value} rows. Raises NcuUnavailable with ncu's reason."""
    from .registry import get

    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("ncu (Nsight Compute) is not installed or not on PATH")
    full = get(kernel).validate(params)
    metrics = list(metrics)
    for _ in range(len(metrics) + 1):
        proc = subprocess.run(command(kernel, full, n, metrics, ncu), capture_output=True, text=True,
                              timeout=timeout, env=_env())
        out = proc.stdout + "\n" + proc.stderr
        bad = [m for m in unknown_metrics(out) if m in metrics]
        if bad:                      # an older or newer ncu: drop what it does not know and retry
            metrics = [m for m in metrics if m not in bad]
            continue
        break
    rows = parse_csv(proc.stdout)
    if not rows:
        errs = errors_in(out)
        if any("ERR_NVGPUCTRPERM" in e or "permission" in e.lower() for e in errs):
            raise NcuUnavailable("ncu may not read the GPU performance counters here (ERR_NVGPUCTRPERM): "
                                 + " ".join(errs)[:400])
        raise NcuUnavailable("ncu returned no metrics: " + (" ".join(errs) or out.strip()[-400:]))
    return rows


def _env() -> dict:
    from .registry import ROOT

    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT)
    return env


def configs() -> list[tuple[str, dict]]:
    """What the chapter profiles: every layout of kernel 07 at both k-slices, plus 05 and 06."""
    from .specs.bank_conflicts import VARIANTS

    out = [("thread_tile_2d", {}), ("vectorized", {})]
    out += [("bank_conflicts", dict(v, BK=bk)) for bk in (8, 16) for v in VARIANTS]
    return out


def collect(items=None, n: int = SIZE, log=print) -> list[dict]:
    """Table rows {kernel, params, label, M, N, K, metric, value} for each config (or an error row)."""
    from .registry import get

    rows = []
    for i, (kernel, params) in enumerate(items or configs(), 1):
        spec = get(kernel)
        full = spec.validate(params)
        base = {"kernel": kernel, "params": full, "label": spec.label_of(full), "M": n, "N": n, "K": n}
        try:
            got = profile(kernel, full, n)
        except (NcuUnavailable, subprocess.TimeoutExpired) as exc:
            log(f"[{i}] {kernel} {spec.label_of(full)}: {exc}")
            rows.append(dict(base, metric="error", value=None, error=str(exc)))
            if isinstance(exc, NcuUnavailable) and ("not installed" in str(exc) or "PERM" in str(exc)):
                break                # the same for every config: stop here
            continue
        for r in got:
            rows.append(dict(base, metric=r["metric"], value=r["value"], unit=r["unit"]))
        log(f"[{i}] {kernel} {spec.label_of(full)}: " + ", ".join(
            f"{SHORT.get(r['metric'], r['metric'])} {r['value']}" for r in got))
    return rows


@table_recorder(CHAPTER)
def record_rows() -> list[dict]:
    return collect()


# --------------------------------------------------------------- for chapters
def pivot(rows: list[dict]) -> list[dict]:
    """One dict per config: its metrics by short name, and wavefronts per instruction."""
    by: dict = {}
    for r in rows:
        if r.get("metric") in (None, "error"):
            continue
        key = (r["kernel"], json.dumps(r["params"], sort_keys=True))
        d = by.setdefault(key, {"kernel": r["kernel"], "params": r["params"], "label": r["label"]})
        d[SHORT.get(r["metric"], r["metric"])] = r["value"]
    out = []
    for d in by.values():
        for op in ("load", "store"):
            inst, wf = d.get(f"{op} instructions"), d.get(f"{op} wavefronts")
            d[f"{op} wavefronts per instruction"] = round(wf / inst, 3) if inst and wf is not None else None
        out.append(d)
    return out


def results():
    """The counters: profiled now (live mode, ncu present) or read from book/data.

    Returns a :class:`helpers.data.ResultSet`; its rows may be empty or hold an
    ``error`` row when the counters could not be read.
    """
    from .data import DataError, ResultSet, load
    from .mode import device_name, is_live

    if is_live() and find_ncu():
        return ResultSet(collect(), f"measured live with Nsight Compute on {device_name()}", True)
    try:
        rec = load()
        return ResultSet(rec.rows(CHAPTER), rec.label(CHAPTER) + ", Nsight Compute", False)
    except DataError as exc:
        return ResultSet([], f"not recorded yet ({exc})", False)


def main(argv=None) -> int:
    """``python -m helpers.ncu [kernel [NAME=V ...]]``: print the counters as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        params = {k: int(v) for k, v in (a.split("=", 1) for a in argv[1:])}
        rows = collect([(argv[0], params)])
    else:
        rows = collect()
    print(json.dumps(pivot(rows), indent=1))
    return 0 if rows and all(r["metric"] != "error" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())


def model_of(kernel: str, params: dict) -> dict | None:
    """What :mod:`helpers.banks` predicts for a profiled config: wavefronts per load and
    per store instruction, and the conflict share. None for layouts it does not model."""
    from . import banks

    if kernel == "bank_conflicts":
        tot = banks.tile_totals(params["BK"], params["SPLIT"], params["PAD"], params["SWIZZLE"])
    elif kernel == "vectorized" and (params["BM"], params["BN"], params["TM"], params["TN"]) == (128, 128, 8, 8):
        tot = banks.tile_totals(params["BK"], 0, 0, 0)      # 06 is 07's contiguous layout
    else:
        return None
    return {f"{op} wavefronts per instruction": round(tot[op]["per_instruction"], 3) for op in ("load", "store")}


def comparison(rows: list[dict]) -> list[dict]:
    """Measured counters next to the model, one row per profiled config."""
    out = []
    for d in pivot(rows):
        m = model_of(d["kernel"], d["params"]) or {}
        row = {"kernel": d["kernel"], "config": d["label"]}
        for op in ("load", "store"):
            row[f"{op} instructions"] = d.get(f"{op} instructions")
            row[f"{op} wavefronts / instruction"] = d.get(f"{op} wavefronts per instruction")
            row[f"{op} (model)"] = m.get(f"{op} wavefronts per instruction")
            row[f"{op} bank conflicts"] = d.get(f"{op} bank conflicts")
        out.append(row)
    return out


def counters_figure(rows: list[dict], source: str):
    """Bars: measured wavefronts per shared load and store instruction for each profiled
    config, with the model's prediction as a marker."""
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, label_source

    table = comparison(rows)
    x = [f"{r['kernel'].replace('bank_conflicts', '07').replace('vectorized', '06').replace('thread_tile_2d', '05')}"
         f" {r['config']}" for r in table]
    fig = go.Figure()
    for i, op in enumerate(("load", "store")):
        fig.add_trace(go.Bar(x=x, y=[r[f"{op} wavefronts / instruction"] for r in table], name=f"{op}s, measured",
                             marker_color=PALETTE[i], hovertext=[
                                 f"{xx}<br>{r[f'{op} instructions']:,} {op} instructions<br>"
                                 f"{r[f'{op} wavefronts / instruction']} wavefronts each<br>"
                                 f"{r[f'{op} bank conflicts']:,} extra wavefronts (bank conflicts)"
                                 if r[f"{op} instructions"] else xx for xx, r in zip(x, table)], hoverinfo="text"))
        fig.add_trace(go.Scatter(x=x, y=[r[f"{op} (model)"] for r in table], name=f"{op}s, model",
                                 mode="markers", marker=dict(symbol="line-ew-open", size=26, color=PALETTE[i + 2],
                                                             line=dict(width=3))))
    fig.update_layout(template=TEMPLATE, barmode="group", height=500, yaxis_title="wavefronts per instruction",
                      title="Shared memory: wavefronts per instruction, Nsight Compute vs the bank model",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"))
    return label_source(fig, source)
