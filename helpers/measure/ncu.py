"""Shared-memory counters from Nsight Compute (``ncu``): run, parse, record.

Taught in the chapter "Bank conflicts" (book/08_bank_conflicts.md), used again in
"Warp tiling" and "The final kernel".

``ncu`` replays one kernel launch and reads the GPU's hardware counters. For shared
memory, for loads (``op_ld``) and stores (``op_st``):

* ``smsp__inst_executed_op_shared_ld.sum``: warp-level shared-load instructions;
* ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum``: the wavefronts they took;
* ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum``: the wavefronts above
  the minimum, which ncu reports as bank conflicts.

:func:`command` builds the exact command line (printed in the chapter); :func:`profile`
runs it in a subprocess that launches the kernel once; :func:`parse_csv` reads ncu's
``--csv`` output.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

from .. import hardware, settings
from ..runtime import gemm
from ..runtime.specs import bank_conflicts, get
from .bench import main_kernels

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

# Why warps wait: per reason, the cycles a warp spends stalled for it per instruction it issues
# (the "Warp State" section of Nsight Compute; the metric counts warps stalled per issue, the same
# number), and how often a scheduler issued.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "barrier", "wait",
                 "math_pipe_throttle", "not_selected", "selected", "no_instruction", "dispatch_stall",
                 "branch_resolving", "drain", "membar", "sleeping", "tex_throttle", "imc_miss", "misc")
STALL_METRICS = tuple(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS) + (
    "smsp__issue_active.avg.pct_of_peak_sustained_active",)
STALL_SIZE = 2048

# Which pipe each warp instruction went to. FFMA shares the FMA pipe with the integer
# multiply-adds (IMAD, IMAD.WIDE, the IMAD.MOV a move may become, and VIADD on sm_90); IADD3,
# LEA and logic go to the ALU pipe. In an FFMA-bound loop every integer instruction on the
# FMA pipe takes a cycle from an FFMA: "fma" minus "ffma" below is that cost.
PIPE_METRICS = ("smsp__inst_executed.sum", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                "smsp__inst_executed_pipe_fma.sum", "smsp__inst_executed_pipe_fmaheavy.sum",
                "smsp__inst_executed_pipe_fmalite.sum", "smsp__inst_executed_pipe_alu.sum",
                "smsp__inst_executed_pipe_lsu.sum", "smsp__inst_executed_pipe_uniform.sum",
                "smsp__issue_active.avg.pct_of_peak_sustained_active")
SHORT.update({
    "smsp__inst_executed.sum": "instructions",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "FFMA threads",
    "smsp__inst_executed_pipe_fma.sum": "fma pipe",
    "smsp__inst_executed_pipe_fmaheavy.sum": "fmaheavy pipe",
    "smsp__inst_executed_pipe_fmalite.sum": "fmalite pipe",
    "smsp__inst_executed_pipe_alu.sum": "alu pipe",
    "smsp__inst_executed_pipe_lsu.sum": "lsu pipe",
    "smsp__inst_executed_pipe_uniform.sum": "uniform pipe",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue active %",
})

# Runs inside the profiled process: one launch of one config, then exit.
LAUNCH = """\
import json, sys, cupy
from helpers.runtime.launch import prepare
name, params = sys.argv[1], json.loads(sys.argv[2])
M, N, K = map(int, sys.argv[3:6])
rng = cupy.random.default_rng(0)
# A and B in the layouts the config reads (A_T, B_T: transposed views)
A = rng.uniform(-1, 1, (K, M), dtype=cupy.float32).T if params.get("A_T") else rng.uniform(-1, 1, (M, K), dtype=cupy.float32)
B = rng.uniform(-1, 1, (N, K), dtype=cupy.float32).T if params.get("B_T") else rng.uniform(-1, 1, (K, N), dtype=cupy.float32)
C = cupy.empty((M, N), dtype=cupy.float32)
prepare(name, M, N, K, params)(A, B, C)
cupy.cuda.runtime.deviceSynchronize()
"""


# The same for cuBLAS (cupy.matmul, float32 without TF32), the baseline of every timing.
LAUNCH_CUBLAS = """\
import sys, cupy
M, N, K = map(int, sys.argv[1:4])
rng = cupy.random.default_rng(0)
A = rng.uniform(-1, 1, (M, K), dtype=cupy.float32)
B = rng.uniform(-1, 1, (K, N), dtype=cupy.float32)
cupy.matmul(A, B)                       # cuBLAS sets itself up here, outside the profiled range
cupy.cuda.runtime.deviceSynchronize()
cupy.cuda.runtime.profilerStart()
cupy.matmul(A, B)
cupy.cuda.runtime.deviceSynchronize()
cupy.cuda.runtime.profilerStop()
"""
CUBLAS = "cublas"


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


def shape_of(n: int | tuple) -> tuple[int, int, int]:
    """(M, N, K) of a size: n for n x n x n, or an (M, N, K) tuple as it is."""
    return tuple(n) if isinstance(n, (tuple, list)) else (n, n, n)


def command(kernel: str, params: dict, n: int | tuple = SIZE, metrics=METRICS, ncu: str = "ncu",
            python: str | None = None) -> list[str]:
    """The ncu command line that profiles one launch of ``kernel`` with ``params`` at n x n x n,
    or at (M, N, K) when ``n`` is a tuple (``kernel`` "cublas": cupy.matmul's GEMM kernel)."""
    head = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(metrics)]
    mnk = [str(x) for x in shape_of(n)]
    if kernel == CUBLAS:
        # cuBLAS names its kernels as it likes ("Kernel2" at some shapes): profile the first kernel
        # of the second product, the range the launch script opens
        return head + ["--profile-from-start", "off", "--launch-count", "1",
                       python or sys.executable, "-c", LAUNCH_CUBLAS, *mnk]
    return head + ["--kernel-name", f"regex:{get(kernel).function}", "--launch-count", "1",
                   python or sys.executable, "-c", LAUNCH, kernel, json.dumps(params, sort_keys=True), *mnk]


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

    Skips ncu's own ``==PROF==``/``==WARNING==`` lines and anything printed before the
    header; values lose their thousands separators. Reads both the long layout (one
    row per metric) and ``--page raw`` (one column per metric).
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Metric Name"' in line and '"Metric Value"' in line), None)
    if start is None:
        return _parse_wide(lines)
    rows = []
    for rec in csv.DictReader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"')))):
        if rec.get("Metric Name"):
            rows.append({"id": rec.get("ID", ""), "kernel_name": rec.get("Kernel Name", ""),
                         "metric": rec["Metric Name"], "unit": rec.get("Metric Unit", ""),
                         "value": _number(rec.get("Metric Value", ""))})
    return rows


def _parse_wide(lines: list[str]) -> list[dict]:
    start = next((i for i, line in enumerate(lines) if line.startswith('"') and '"Kernel Name"' in line), None)
    if start is None:
        return []
    recs = list(csv.reader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"')))))
    head, units, data = recs[0], (recs[1] if len(recs) > 1 else []), recs[2:]
    metrics = [i for i, h in enumerate(head) if re.fullmatch(r"[a-z0-9]+__[\w.]+", h)]
    rows = []
    for rec in data:
        get_ = dict(zip(head, rec))
        for i in metrics:
            rows.append({"id": get_.get("ID", ""), "kernel_name": get_.get("Kernel Name", ""), "metric": head[i],
                         "unit": units[i] if i < len(units) else "",
                         "value": _number(rec[i]) if i < len(rec) else None})
    return rows


def errors_in(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]


def unknown_metrics(text: str) -> list[str]:
    """Metric names ncu says it does not know (they differ between ncu versions)."""
    return re.findall(r"[Ff]ailed to find metric[s]?\s+\"?([\w.]+)", text)


# ------------------------------------------------------------------- running
def profile(kernel: str, params: dict | None = None, n: int | tuple = SIZE, metrics=METRICS,
            timeout: int = 600) -> list[dict]:
    """Profile one launch; returns metric rows. Raises NcuUnavailable with ncu's reason."""
    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("ncu (Nsight Compute) is not installed or not on PATH")
    full = {} if kernel == CUBLAS else get(kernel).validate(params)
    metrics = list(metrics)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(settings.ROOT), env.get("PYTHONPATH", "")) if p)
    for _ in range(len(metrics) + 1):
        proc = subprocess.run(command(kernel, full, n, metrics, ncu), capture_output=True, text=True,
                              timeout=timeout, env=env)
        out = proc.stdout + "\n" + proc.stderr
        bad = [m for m in unknown_metrics(out) if m in metrics]
        if not bad:
            break
        metrics = [m for m in metrics if m not in bad]   # an older or newer ncu: drop what it lacks
    rows = parse_csv(proc.stdout)
    if not rows:
        errs = errors_in(out)
        if any("ERR_NVGPUCTRPERM" in e or "permission" in e.lower() for e in errs):
            raise NcuUnavailable("ncu may not read the GPU performance counters here (ERR_NVGPUCTRPERM): "
                                 + " ".join(errs)[:400])
        raise NcuUnavailable("ncu returned no metrics: " + (" ".join(errs) or out.strip()[-400:]))
    return rows


def collect(items: list, n: int | tuple = SIZE, metrics=METRICS, log=print) -> list[dict]:
    """Rows {kernel, params, label, M, N, K, metric, value, source_hash} per config (or an error row),
    at n x n x n or at (M, N, K)."""
    rows = []
    M, N, K = shape_of(n)
    for i, (kernel, params) in enumerate(items, 1):
        if kernel == CUBLAS:
            base = {"kernel": CUBLAS, "params": {}, "label": "cupy.matmul", "M": M, "N": N, "K": K, "source_hash": ""}
        else:
            spec = get(kernel)
            full = spec.validate(params)
            base = {"kernel": spec.name, "params": full, "label": spec.label(full), "M": M, "N": N, "K": K,
                    "source_hash": spec.source_hash()}
        try:
            got = profile(base["kernel"], base["params"], n, metrics)
        except (NcuUnavailable, subprocess.TimeoutExpired) as exc:
            log(f"[{i}] {base['kernel']} {base['label']}: {exc}")
            rows.append(dict(base, metric="error", value=None, error=str(exc)))
            if isinstance(exc, NcuUnavailable) and ("not installed" in str(exc) or "PERM" in str(exc)):
                break                # the same for every config: stop here
            continue
        rows += [dict(base, metric=r["metric"], value=r["value"], unit=r["unit"]) for r in got]
        log(f"[{i}] {base['kernel']} {base['label']}: " + ", ".join(
            f"{SHORT.get(r['metric'], r['metric'])} {r['value']}" for r in got))
    return rows


def bank_conflict_configs() -> list[tuple[str, dict]]:
    """What the bank-conflicts chapter profiles: every layout of kernel 08 at both k-slices, plus 06 and 07."""
    return ([("thread_tile_2d", {}), ("vectorized", {})]
            + [("bank_conflicts", dict(v, BK=bk)) for bk in (8, 16) for v in bank_conflicts.VARIANTS.values()])


def record_rows() -> list[dict]:
    return collect(bank_conflict_configs())


def record_warp_tiles() -> list[dict]:
    """The warp-tiled kernels' counters: warp tiling's default, and the final kernel's
    default and its choice at n = 4096 on the GPU present."""
    choice = gemm.choose_config(4096, 4096, 4096, hardware.current())
    items = [("warptiling", {}), ("final", {})] + ([("final", choice)] if choice != get("final").defaults() else [])
    return collect(items)


def record_stalls() -> list[dict]:
    """Why each chapter's kernel waits: the warp-stall reasons of its default config (the final
    kernel's choice) at n = 2048, one launch each."""
    device = hardware.current()
    items = [(k, get(k).config_for(STALL_SIZE, STALL_SIZE, STALL_SIZE, device)) for k in main_kernels()]
    return collect(items, STALL_SIZE, STALL_METRICS)


def stalls(rows: list[dict]) -> list[dict]:
    """One dict per profiled config: {kernel, label, issue_active, <reason>: warps per issue}."""
    by: dict = {}
    for r in rows:
        if r.get("metric") in (None, "error"):
            continue
        d = by.setdefault((r["kernel"], r["label"]), {"kernel": r["kernel"], "label": r["label"]})
        m = r["metric"]
        if m.startswith("smsp__average_warps_issue_stalled_"):
            d[m.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio")] = r["value"]
        elif m.startswith("smsp__issue_active"):
            d["issue_active"] = r["value"]
    return list(by.values())


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
    for d in by.values():
        for op in ("load", "store"):
            inst, wf = d.get(f"{op} instructions"), d.get(f"{op} wavefronts")
            if inst is not None or wf is not None:
                d[f"{op} wavefronts per instruction"] = round(wf / inst, 3) if inst and wf is not None else None
        if d.get("fma pipe") is not None and d.get("FFMA threads") is not None:
            # integer instructions on the FMA pipe, per FFMA (warp instructions: 32 threads each)
            ffma = d["FFMA threads"] / 32
            d["other fma-pipe instructions per FFMA"] = round((d["fma pipe"] - ffma) / ffma, 4) if ffma else None
    return list(by.values())
