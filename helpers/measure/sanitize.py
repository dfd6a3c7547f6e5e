"""``python -m helpers sanitize``: compute-sanitizer over every registered kernel (GPU).

Runs memcheck (out-of-bounds and misaligned accesses) and racecheck (shared-memory
hazards) on each kernel's default config and its test configs, at small shapes that
are not multiples of any tile (rounded up to its tiles for a kernel that refuses them: no
edge handling). Each run is its own process::

    compute-sanitizer --tool racecheck --error-exitcode 1 python -c "<one launch>" ...

with the kernel compiled with line information (``SGEMM_BOOK_LINEINFO=1``), so
reports name lines of the .cu file. Every kernel must report 0 errors, except the one
kept because it is racy (chapter "Double buffering"), whose report is the evidence.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from .. import hardware, settings
from ..hardware import Device
from ..runtime.spec import ConfigError, cdiv
from ..runtime.specs import test_configs

SHAPES = [(67, 45, 33), (130, 129, 17)]
TOOLS = ("memcheck", "racecheck")
ALL_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
TIMEOUT_S = 300

# One launch on random data.
LAUNCH = """
import json, sys, cupy
from helpers.runtime.launch import matmul
name, params, M, N, K = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
rng = cupy.random.default_rng(0)
A = rng.uniform(-1, 1, (M, K), dtype=cupy.float32); B = rng.uniform(-1, 1, (K, N), dtype=cupy.float32)
matmul(name, A, B, params); cupy.cuda.runtime.deviceSynchronize()
"""

_RACE_HEAD = re.compile(r"Race reported between (\w+) access")
_RACE_AND = re.compile(r"and (\w+) access.*?\[(\d+) hazards?\]")
_SRC_LINE = re.compile(r"\bin (\S+?):(\d+)\b")   # "... in /tmp/tmpab12/kern.cu:152"


def parse(output: str) -> dict:
    """Errors, hazards and their kinds from compute-sanitizer's text report.

    ``errors`` is None when the report has no summary line (the run did not get that
    far). ``kinds`` counts hazards per access pair, e.g. ``{"Write/Read": 1536}``.
    """
    m = re.search(r"ERROR SUMMARY: (\d+) errors?", output)
    r = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    errors = int(m.group(1)) if m else (int(r.group(2)) if r else None)
    kinds: dict = {}
    first = None
    for line in output.splitlines():
        h = _RACE_HEAD.search(line)
        if h:
            first = h.group(1)
            continue
        a = _RACE_AND.search(line)
        if a and first:
            key = f"{first}/{a.group(1)}"
            kinds[key] = kinds.get(key, 0) + int(a.group(2))
    lines = [line for line in output.splitlines() if line.startswith("=========") and line.strip("= ")]
    return {"errors": errors, "hazards": sum(kinds.values()), "kinds": kinds,
            "warnings": int(r.group(3)) if r else 0, "excerpt": "\n".join(lines)[:3000]}


def source_lines(excerpt: str) -> list[int]:
    """The source line numbers a report names, in order of first mention."""
    seen: list[int] = []
    for _, line in _SRC_LINE.findall(excerpt):
        if int(line) not in seen:
            seen.append(int(line))
    return seen


def tidy(excerpt: str, file: str) -> str:
    """A report for display: the compiler's temporary path becomes the kernel file's name."""
    return _SRC_LINE.sub(lambda m: f"in {file}:{m.group(2)}", excerpt)


def command(tool: str, name: str, params: dict, shape) -> list[str]:
    """The compute-sanitizer command line that checks one kernel config at one shape."""
    return (["compute-sanitizer", "--tool", tool, "--error-exitcode", "1",
             sys.executable, "-c", LAUNCH, name, json.dumps(params)] + [str(x) for x in shape])


def verdict(broken: bool, errors, returncode: int) -> bool:
    """A run is fine when it finished with 0 errors; a kernel kept broken on purpose always is."""
    return True if broken else errors == 0 and returncode == 0


def run_one(spec, params: dict, shape, tool: str) -> dict:
    t0 = time.time()
    env = dict(os.environ, SGEMM_BOOK_LINEINFO="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(settings.ROOT), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(command(tool, spec.name, params, shape), capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=env)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = f"timed out after {TIMEOUT_S} s\n{exc.stdout or ''}", 124
    rep = parse(out)
    tail = "" if rep["errors"] is not None else out[-1500:]   # why it did not finish
    return {"kernel": spec.name, "params": params, "M": shape[0], "N": shape[1], "K": shape[2],
            "tool": tool, "errors": rep["errors"], "hazards": rep["hazards"], "kinds": rep["kinds"],
            "returncode": rc, "expected_broken": bool(spec.broken),
            "ok": verdict(bool(spec.broken), rep["errors"], rc), "lines": source_lines(rep["excerpt"]),
            "excerpt": tidy(rep["excerpt"], spec.file) if (rep["errors"] or rep["hazards"]) else tail,
            "seconds": round(time.time() - t0, 1), "source_hash": spec.source_hash()}


def shapes_for(spec, params: dict, shapes, device: Device) -> list[tuple]:
    """The shapes a config accepts on ``device``; where it refuses them all (a kernel without edge
    handling), the same shapes rounded up to multiples of its block and k tiles."""
    def accepts(shape):
        try:
            spec.check_shape(params, *shape, device)
            return True
        except ConfigError:
            return False

    ok = [s for s in shapes if accepts(s)]
    if ok:
        return ok
    t = spec.tiles(params)
    rounded = [(cdiv(M, t.BM) * t.BM, cdiv(N, t.BN) * t.BN, cdiv(K, t.BK) * t.BK) for M, N, K in shapes]
    return [s for s in dict.fromkeys(rounded) if accepts(s)]


def jobs(tools=TOOLS, kernels=None, shapes=None) -> list[tuple]:
    """(spec, params, shape, tool) for every checked config (defaults plus each module's
    TEST_CONFIGS) on every shape it accepts."""
    out, device = [], hardware.default()
    for spec, params in test_configs():
        if not kernels or spec.name in kernels:
            full = spec.validate(params, device)
            out += [(spec, full, shape, tool) for shape in shapes_for(spec, full, shapes or SHAPES, device)
                    for tool in tools]
    return out


def run_all(log=print, tools=TOOLS, kernels=None, shapes=None, workers: int | None = None,
            on_row=None) -> list[dict]:
    """Run every job, several processes at a time; rows sorted by kernel, config, shape, tool.
    ``on_row(rows)`` is called after each finished run (to save progress)."""
    todo = jobs(tools, kernels, shapes)
    rows: list[dict] = []
    t0 = time.time()
    with ThreadPoolExecutor(workers or min(16, max(2, os.cpu_count() or 2))) as pool:
        for fut in as_completed([pool.submit(run_one, *job) for job in todo]):
            r = fut.result()
            rows.append(r)
            note = " (kept racy on purpose)" if r["expected_broken"] else ("" if r["ok"] else "  <-- FAILED")
            haz = f", {r['hazards']} hazards" if r["hazards"] else ""
            log(f"[{len(rows)}/{len(todo)}] {r['tool']:9s} {r['kernel']} {r['params']} "
                f"{r['M']}x{r['N']}x{r['K']}: {r['errors']} errors{haz}{note}  ({time.time() - t0:.0f} s)")
            if on_row:
                on_row(rows)
    rows.sort(key=lambda r: (r["kernel"], json.dumps(r["params"], sort_keys=True), r["M"], r["tool"]))
    return rows


def summary_rows(rows: list[dict]) -> list[dict]:
    """One line per (kernel, tool): runs, errors, hazards and a verdict."""
    agg: dict = {}
    for r in rows:
        a = agg.setdefault((r["kernel"], r["tool"]), {"kernel": r["kernel"], "tool": r["tool"], "runs": 0,
                                                     "errors": 0, "hazards": 0, "failed": 0,
                                                     "broken": r.get("expected_broken", False)})
        a["runs"] += 1
        a["errors"] += r["errors"] or 0
        a["hazards"] += r.get("hazards") or 0
        a["failed"] += 0 if r["ok"] else 1
    for a in agg.values():
        if a["broken"]:
            a["verdict"] = "kept racy on purpose" if a["errors"] else "kept on purpose (nothing reported)"
        else:
            a["verdict"] = "ERRORS" if a["failed"] else "clean"
    return list(agg.values())


def format_table(rows: list[dict]) -> str:
    lines = [f"{'kernel':30s} {'tool':10s} {'runs':>4s} {'errors':>6s} {'hazards':>8s}  verdict"]
    for a in summary_rows(rows):
        lines.append(f"{a['kernel']:30s} {a['tool']:10s} {a['runs']:4d} {a['errors']:6d} {a['hazards']:8d}  {a['verdict']}")
    return "\n".join(lines)


def record_rows() -> list[dict]:
    return run_all()
