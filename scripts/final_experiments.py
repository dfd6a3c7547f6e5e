"""Experiments behind the final kernel's choices, timed against cuBLAS in one run on a GPU.

    python scripts/final_experiments.py OUT.json [--before FILE.cu] [--only QUESTION,...] [--tiles NAME,...]
        [--choices OTHER.json]
    python scripts/final_experiments.py --write-choices OTHER.json

The questions (rows, streamk, squares, pack, ..., micro) and what each times:
helpers/measure/final_experiments.py (QUESTIONS, one function each).
"""
from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import hardware  # noqa: E402
from helpers.measure.final_experiments import QUESTIONS, SPEC, Setup, plan, time_packing, write_choices  # noqa: E402
from helpers.measure.final_tuning import Tuner, compile_all, key, resolved  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--before", type=Path, help="another version of kernels/12_final.cu to time beside this one")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds after which no new shape is started")
    ap.add_argument("--only", default="rows,streamk,squares,pack", help=f"questions, of {','.join(QUESTIONS)}")
    ap.add_argument("--jobs", type=int, default=16, help="compile processes")
    ap.add_argument("--tiles", help="question tiles: the entries of TILES to time, comma-separated (default: all)")
    ap.add_argument("--choices", type=Path, help="question unseen: another dispatcher's choices (--write-choices)")
    ap.add_argument("--write-choices", type=Path, help="write this dispatcher's choices on the unseen shapes, for "
                    "every GPU with a datasheet (helpers/hardware.py), and stop")
    args = ap.parse_args(argv)
    if args.write_choices:
        write_choices(args.write_choices, [hardware.Device.from_datasheet(n) for n in hardware.DATASHEETS])
        return 0
    if args.out is None:
        ap.error("OUT.json is needed to time anything")
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    tuner = Tuner(args.out, args.budget, log)
    specs = {"now": SPEC}
    if args.before:
        copy = ROOT / "kernels" / "12_final_before.cu"      # beside common.cuh; removed at exit
        copy.write_text(args.before.read_text())
        atexit.register(copy.unlink, missing_ok=True)
        specs["before"] = dataclasses.replace(SPEC, name="final_before", file=copy.name)
    other = json.loads(args.choices.read_text()) if args.choices else None
    setup = Setup(hardware.current(), specs, tiles=tuple(args.tiles.split(",")) if args.tiles else None, other=other)
    work = plan(args.only.split(","), setup)
    configs = {key(it["params"]): resolved(it["params"]) for _, _, items, *_ in work for it in items
               if it.get("spec", SPEC) is SPEC}
    # this kernel's configs and --before's in parallel processes, into CuPy's disk cache
    tuner.compile_errors = compile_all(list(configs.values()), args.jobs, log)
    if args.before:
        before = {key(it["params"]): resolved(it["params"]) for _, _, items, *_ in work for it in items
                  if it.get("spec", SPEC) is specs["before"]}
        compile_all(list(before.values()), args.jobs, log, file=specs["before"].file)
    if "pack" in args.only.split(","):
        tuner.meta["pack_kernel"] = time_packing(tuner, log)
    for question, shape, items, seconds, *lay in work:
        if tuner.left() > 0:
            tuner.shape(question, shape, lay[0] if lay else "NN", items, seconds)
    tuner.save()
    log(f"done in {time.time() - tuner.t0:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
