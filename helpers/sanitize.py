"""``python -m helpers sanitize``: compute-sanitizer over every registered kernel (GPU).

Runs memcheck (out-of-bounds and misaligned accesses) and racecheck (shared-
memory hazards) on each kernel's default config and its test configs, at small
shapes that are not multiples of any tile. Every kernel must report 0 errors,
except the one kept because it is racy (chapter "Double buffering"), whose
report is the evidence. ``record --chapter sanitize`` stores the table.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

from .record import table_recorder

SHAPES = [(67, 45, 33), (130, 129, 17)]
WORKERS = 8  # sanitizer runs are independent processes; run several at once
TOOLS = ("memcheck", "racecheck")

LAUNCH = """
import json, sys, cupy
from helpers.launch import matmul
name, params, M, N, K = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
rng = cupy.random.default_rng(0)
A = rng.uniform(-1, 1, (M, K), dtype=cupy.float32); B = rng.uniform(-1, 1, (K, N), dtype=cupy.float32)
matmul(name, A, B, params); cupy.cuda.runtime.deviceSynchronize()
"""


def parse(output: str) -> dict:
    """Errors and hazards from compute-sanitizer's text report."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", output)
    r = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    errors = int(m.group(1)) if m else (int(r.group(2)) if r else None)
    hazards = sum(int(h) for h in re.findall(r"\[(\d+) hazards\]", output))
    return {"errors": errors, "hazards": hazards,
            "excerpt": "\n".join(l for l in output.splitlines() if l.startswith("=========") and l.strip("= "))[:1500]}


def command(tool: str, name: str, params: dict, shape) -> list[str]:
    return (["compute-sanitizer", "--tool", tool, "--error-exitcode", "1", sys.executable, "-c", LAUNCH,
             name, json.dumps(params)] + [str(x) for x in shape])


def _one(spec, full, shape, tool) -> dict:
    proc = subprocess.run(command(tool, spec.name, full, shape), capture_output=True, text=True, timeout=600)
    rep = parse(proc.stdout + proc.stderr)
    ok = (rep["errors"] == 0 and proc.returncode == 0) if not spec.broken else True
    return {"kernel": spec.name, "params": full, "M": shape[0], "N": shape[1], "K": shape[2],
            "tool": tool, "errors": rep["errors"], "hazards": rep["hazards"],
            "expected_broken": bool(spec.broken), "ok": ok,
            "excerpt": rep["excerpt"] if (rep["errors"] or rep["hazards"]) else ""}


def _accepts(spec, params, shape) -> bool:
    """False for a shape the spec refuses (a ConfigError before launch): nothing to sanitize."""
    from .registry import ConfigError

    try:
        spec.check_shape(spec.validate(params), *shape)
    except ConfigError:
        return False
    return True


def run_all(log=print, shapes=None) -> list[dict]:
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from .specs import test_configs

    jobs = [(spec, spec.validate(params), shape, tool) for spec, params in test_configs()
            for shape in (shapes or SHAPES) for tool in TOOLS if _accepts(spec, params, shape)]
    rows = []
    t0 = time.time()
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = [pool.submit(_one, *job) for job in jobs]
        for fut in as_completed(futures):
            r = fut.result()
            rows.append(r)
            broken = " (expected: kept racy on purpose)" if r["expected_broken"] else ""
            log(f"[{len(rows)}/{len(jobs)}] {r['tool']:9s} {r['kernel']} {r['params']} "
                f"{r['M']}x{r['N']}x{r['K']}: {r['errors']} errors"
                f"{', %d hazards' % r['hazards'] if r['hazards'] else ''}{broken}  ({time.time() - t0:.0f} s)")
    rows.sort(key=lambda r: (r["kernel"], str(r["params"]), r["M"], r["tool"]))
    return rows


@table_recorder("sanitize")
def record_rows() -> list[dict]:
    return run_all()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers sanitize", description=__doc__)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    from .mode import gpu_available

    if not gpu_available():
        print("sanitize needs a CUDA GPU (cupy.cuda.is_available() is False)", file=sys.stderr)
        return 2
    rows = run_all()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r["ok"]]
    print(f"{len(rows)} runs, {len(bad)} with unexpected errors")
    return 1 if bad else 0


def summary_table(rows: list[dict]):
    """HTML table for the status page: one line per kernel and tool."""
    from IPython.display import HTML

    agg: dict = {}
    for r in rows:
        k = (r["kernel"], r["tool"])
        a = agg.setdefault(k, {"runs": 0, "errors": 0, "broken": r["expected_broken"]})
        a["runs"] += 1
        a["errors"] += r["errors"] or 0
    body = "".join(f"<tr><td>{k}</td><td>{t}</td><td>{a['runs']}</td><td>{a['errors']}</td>"
                   f"<td>{'kept racy on purpose' if a['broken'] else ('clean' if a['errors'] == 0 else 'ERRORS')}</td></tr>"
                   for (k, t), a in agg.items())
    return HTML("<table class='table'><thead><tr><th>kernel</th><th>tool</th><th>runs</th><th>errors</th>"
                f"<th>verdict</th></tr></thead><tbody>{body}</tbody></table>")
