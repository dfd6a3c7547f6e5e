"""Time the warp-tiling kernel's candidate configs at n = 4096 and 8192 next to chapter 9's
main-line kernel (its fast path) and cuBLAS, in one run; prints a table (about a minute
and a half on an H200). Picks nothing and writes nothing: it says which config to make the
default (helpers/runtime/specs/warptiling.py, the Param defaults) before recording.

    python3 scripts/warptiling_sweep.py [--sizes 4096 8192] [--target-s 0.3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.measure.autotune import precompile           # noqa: E402
from helpers.runtime.specs import get                      # noqa: E402
from helpers.runtime.specs.warptiling import VARIANTS      # noqa: E402
from helpers.runtime.timing import measure                 # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--target-s", type=float, default=0.3)
    args = ap.parse_args()
    wt, db = get("warptiling"), get("double_buffering")
    items = [(db, {"BK": 8, "FAST_PATH": 1})] + [(wt, wt.resolve(v)) for v in VARIANTS]
    t0 = time.time()
    precompile(wt, [p for s, p in items if s is wt], log=print)
    results: dict = {}
    cublas: dict = {}
    for n in args.sizes:
        cache: dict = {}
        for spec, p in items:
            try:
                r = measure(spec, n, n, n, p, cublas_cache=cache, target_s=args.target_s)
                results[(spec.name, spec.label(p), n)] = f"{r.tflops:6.1f}" + ("" if r.ok else " WRONG")
                cublas[n] = r.cublas_tflops
            except Exception as exc:                       # a config that fails is a cell, not the end
                results[(spec.name, spec.label(p), n)] = f"failed: {str(exc).splitlines()[0][:60]}"
            print(f"  n={n} {spec.name} {spec.label(p)}: {results[(spec.name, spec.label(p), n)]} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    print()
    print(f"{'kernel':18s}{'config':34s}" + "".join(f"n={n}".rjust(12) for n in args.sizes))
    for spec, p in items:
        default = " (default)" if spec is wt and p == wt.defaults() else ""
        print(f"{spec.name:18s}{(spec.label(p) + default):34s}"
              + "".join(results[(spec.name, spec.label(p), n)].rjust(12) for n in args.sizes))
    print(f"{'cublas':18s}{'cupy.matmul, TF32 off':34s}" + "".join(f"{cublas.get(n, 0):12.1f}" for n in args.sizes))
    print(f"\n{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
