"""Compile every config of a kernel that its rules allow (register model left out) for the
reference GPU, offline, and write registers and spills per config.

    python scripts/calibrate_registers.py thread_tile_1d tests/data/registers_thread_tile_1d.jsonl [--workers 2]
    python scripts/calibrate_registers.py thread_tile_1d .scratch/regs.json --all     # every config, as JSON

The register models in helpers/runtime/rules.py and the specs are fitted on these compiles.
By default the file is what tests/test_register_models.py reads: a header line (kernel, NVRTC
version, architecture, configs compiled), then every config that spilled and an evenly spaced
sample of SAMPLE of the rest, one JSON object per line; the test checks that no config the
model accepts spills, and that the model refuses few of those that fit.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

from helpers import hardware
from helpers.runtime.offline import CompileError, nvrtc_compile, nvrtc_version
from helpers.runtime.specs import get

SAMPLE = 120          # configs that fit, kept beside every one that spilled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--all", action="store_true", help="every config, as one JSON list")
    args = ap.parse_args()
    spec = get(args.kernel)
    device = hardware.default()
    unmodelled = dataclasses.replace(spec, registers=None)
    configs = [dict(zip(spec.param_names, v)) for v in itertools.product(*(p.allowed for p in spec.params))]
    configs = [c for c in configs if not unmodelled.problems(c, device)]
    print(f"{spec.name}: {len(configs)} configs obey the rules without the register model", flush=True)
    t0 = time.time()

    def one(c):
        try:
            _, log, _ = nvrtc_compile(spec.source(), spec.file, spec.name_expression(c), device.arch)
        except CompileError as exc:
            return dict(params=c, error=str(exc).splitlines()[-1][:200])
        regs = int(re.search(r"Used (\d+) registers", log).group(1))
        st, ld = (int(x) for x in re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log).groups())
        return dict(params=c, registers=regs, spill_stores=st, spill_loads=ld, threads=spec.threads(c),
                    estimate=spec.registers(c) if spec.registers else None)

    rows = []
    with ThreadPoolExecutor(args.workers) as pool:
        for i, r in enumerate(pool.map(one, configs), 1):
            rows.append(r)
            if i % 25 == 0:
                print(f"  {i}/{len(configs)} ({time.time() - t0:.0f} s)", flush=True)
    spilled = [r for r in rows if r.get("spill_stores")]
    print(f"{len(rows)} compiled in {time.time() - t0:.0f} s; {len(spilled)} spill")
    if args.all:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
        return
    clean = [r for r in rows if "registers" in r and not r["spill_stores"]]
    step = max(1, len(clean) / SAMPLE)
    sample = [clean[int(i * step)] for i in range(min(SAMPLE, len(clean)))]
    head = dict(kernel=spec.name, nvrtc=nvrtc_version(), arch=device.arch, configs_compiled=len(rows),
                note="every config that spilled, and a sample of those that did not")
    with open(args.out, "w") as f:
        for r in [head] + [{k: r[k] for k in ("params", "registers", "spill_stores")} for r in spilled + sample]:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
