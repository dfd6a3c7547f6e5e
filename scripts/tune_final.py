"""Tune and calibrate the final kernel (kernels/12_final.cu) against cuBLAS on a GPU, in one run.

    python scripts/tune_final.py OUT.json [--budget 330] [--jobs 16] [--stages squares,layouts,broad]
    python scripts/tune_final.py OUT.json --dry-run        # the plan only, no GPU needed
    python scripts/tune_final.py MORE.json --skip OUT.json # the shapes a run's budget left out

What it does and what it prints: helpers/measure/final_tuning.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.measure.final_tuning import Tuner, compile_all, key, plan, resolved, summary  # noqa: E402
from helpers.shapes import flops  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="where to write the JSON table")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds (from the start) after which no new "
                    "shape is started")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="compile processes")
    ap.add_argument("--stages", default="squares,layouts,broad")
    ap.add_argument("--quick", action="store_true", help="a few configs per stage (a smoke run)")
    ap.add_argument("--skip", type=Path, action="append", default=[], help="a table this script wrote: its "
                    "shapes are not measured again (a run its budget cut short, continued in a second table)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    from helpers import hardware

    device = hardware.current() if hardware.gpu_available() else hardware.default()
    items = plan(stages, device, args.quick)
    done = {(r["stage"], (r["M"], r["N"], r["K"]), r["layout"]) for t in args.skip for r in json.loads(t.read_text())["rows"]}
    items = [it for it in items if (it["stage"], tuple(it["shape"]), it["layout"]) not in done]
    configs = {key(it["params"]): resolved(it["params"]) for it in items}
    log(f"plan on {device.label}: {len(items)} measurements of {len(configs)} compiled configs over "
        f"{len({(it['stage'], it['shape'], it['layout']) for it in items})} shapes x layouts")
    if args.dry_run:
        for st in stages:
            here = [it for it in items if it["stage"] == st]
            log(f"  {st}: {len(here)} measurements, {len({key(it['params']) for it in here})} configs, "
                f"{sum(flops(*it['shape']) for it in here) / 1e12:.1f} TFLOP per pass")
        return 0

    tuner = Tuner(args.out, args.budget, log)
    log(f"compiling {len(configs)} configs in {args.jobs} processes")
    tuner.compile_errors = compile_all(list(configs.values()), args.jobs, log)
    tuner.meta["compile_s"] = round(time.time() - tuner.t0, 1)
    groups: dict = {}
    for it in items:
        groups.setdefault((it["stage"], it["shape"], it["layout"]), []).append(it)
    skipped = []
    for (stage, shape, lay), its in groups.items():
        if tuner.left() <= 0:
            skipped.append(f"{stage} {'x'.join(map(str, shape))} {lay}")
            continue
        target = 0.3 if stage == "squares" else 0.1 if stage == "layouts" else 0.04
        tuner.shape(stage, shape, lay, its, target)
    tuner.meta["skipped"] = skipped
    tuner.save()
    log(f"done in {time.time() - tuner.t0:.0f} s (compile {tuner.meta['compile_s']:.0f} s); wrote {args.out}"
        + (f"; budget spent, skipped {len(skipped)} shape(s)" if skipped else ""))
    for line in summary(tuner.rows, tuner.device):
        log(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
