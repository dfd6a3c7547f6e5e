"""Tune the final kernel (kernels/10_final.cu) against cuBLAS on a GPU.

    python scripts/tune_final.py results.json [--quick] [--budget SECONDS]
    python scripts/tune_final.py results.json --chosen     # the per-shape choice only

Stage 1 times every candidate at n = 4096; stage 2 times the best of them at 8192;
stage 3 times, for each shape of the suite, the best square configs plus the
candidates written for that shape (split-K, smaller tiles). cuBLAS (cupy.matmul,
TF32 off) is timed in the same run at every shape, and every config is checked
against it first. Progress goes to stdout; the JSON (rewritten after every
measurement, so an interrupted run keeps what it measured) holds every row and the
best config per shape, ready for the table in helpers/final.py.

The candidates were pruned offline (python -m helpers resources final ...): all
compile for sm_90 with no spills and at most 255 registers.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.registry import ConfigError, get  # noqa: E402

BASE = dict(BM=256, BN=128, BK=8, WM=64, WN=64, TM=16, TN=8, STAGES=3, SPLITK=1, GROUP=8)


def cfg(**kw):
    return dict(BASE, **kw)


# 128x128 blocks of 4 warps (64x64 warp tiles, 16x8 per thread): 2 blocks per SM.
B128 = dict(BM=128, BN=128)
# 128x256 blocks, 8 warps of 64x64, 8x16 per thread.
B128x256 = dict(BM=128, BN=256, TM=8, TN=16)

# Stage 1: n = 4096. Block shape x BK x stages x thread-tile orientation x raster group.
SQUARE = [
    ("final", cfg()),                                   # cuBLAS's own shape: 256x128x8, 3 stages
    ("final", cfg(BK=16)),
    ("final", cfg(BK=32, STAGES=2)),
    ("final", cfg(BK=32)),
    ("final", cfg(TM=8, TN=16, BK=16)),                 # lanes 8x4 instead of 4x8
    ("final", cfg(**B128x256, BK=16)),
    ("final", cfg(**B128x256, BK=32, STAGES=2)),
    ("final", cfg(**B128)),
    ("final", cfg(**B128, STAGES=4)),
    ("final", cfg(**B128, BK=16)),
    ("final", cfg(**B128, BK=16, STAGES=4)),
    ("final", cfg(**B128, BK=32, STAGES=3)),
    ("final", cfg(**B128, BK=32, STAGES=3, GROUP=4)),
    ("final", cfg(**B128, BK=32, STAGES=3, GROUP=16)),
    ("final", cfg(**B128, BK=32, STAGES=3, GROUP=0)),
    ("final", cfg(**B128, BK=32, STAGES=2)),
    ("final", cfg(**B128, TM=8, TN=16, BK=16)),
    ("final", cfg(**B128, WM=128, WN=32, BK=16)),             # 128x32 warp tiles
    ("warptiling", {}),
    ("warptiling", dict(BM=256, BN=128)),
]

# Stage 3: shape-specific candidates on top of the best square configs.
SUITE = {
    (1000, 3000, 777): [
        cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4),
        cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=3),
        cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=32, STAGES=3),
        cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, STAGES=4),
    ],
    (4097, 4097, 4097): [cfg(**B128), cfg(**B128, STAGES=4), cfg(**B128, BK=32),
                         cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, STAGES=4),
                         cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4)],
    (8192, 128, 8192): [
        cfg(**B128, SPLITK=4, BK=16, STAGES=4), cfg(**B128, SPLITK=4, BK=32, STAGES=3),
        cfg(**B128, SPLITK=4, BK=16, STAGES=3), cfg(SPLITK=4, BK=16), cfg(**B128, SPLITK=2, BK=32, STAGES=3),
    ],
    (128, 8192, 8192): [
        cfg(**B128, SPLITK=4, BK=16, STAGES=4), cfg(**B128, SPLITK=4, BK=32, STAGES=3),
        cfg(**B128x256, SPLITK=4, BK=16), cfg(**B128x256, SPLITK=4, BK=32, STAGES=2),
    ],
    (2048, 2048, 8192): [cfg(**B128), cfg(**B128, BK=16), cfg(**B128, BK=32), cfg(BK=16),
                         cfg(**B128, SPLITK=2, BK=32)],
    (3000, 3000, 3000): [cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, STAGES=4),
                         cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4),
                         cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=32, STAGES=3),
                         cfg(**B128, BK=16)],
    (512, 512, 512): [
        cfg(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=3, SPLITK=2),
        cfg(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=4, SPLITK=2),
        cfg(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=2),
        cfg(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=3),
        cfg(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, STAGES=3, SPLITK=4),
    ],
}


def label(name, params):
    spec = get(name)
    return f"{name} {spec.label_of(spec.resolve(params))}"


class Tuner:
    def __init__(self, out: Path, target_s: float, budget_s: float):
        self.out, self.target_s, self.budget_s = out, target_s, budget_s
        self.rows: list[dict] = []
        self.cublas: dict = {}
        self.t0 = time.time()
        self.device = {}

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.budget_s

    def run(self, name, params, shape):
        from helpers.bench import measure

        M, N, K = shape
        key = (name, tuple(sorted(params.items())), shape)
        if any(r["_key"] == list(map(str, key)) for r in self.rows):
            return next(r for r in self.rows if r["_key"] == list(map(str, key)))
        t = time.time()
        row = dict(kernel=name, params=params, label=label(name, params), M=M, N=N, K=K,
                   _key=list(map(str, key)))
        try:
            res = measure(name, M, N, K, params, cublas_cache=self.cublas, target_s=self.target_s)
            row.update(ms=res.ms, tflops=res.tflops, cublas_ms=res.cublas_ms, cublas_tflops=res.cublas_tflops,
                       pct=100 * res.tflops / res.cublas_tflops, ok=res.ok, rel_err=res.rel_err)
        except ConfigError as exc:
            row.update(error=f"ConfigError: {exc}", ok=False, tflops=0.0, pct=0.0)
        except Exception as exc:  # a compile or launch failure must not end the run
            row.update(error=f"{type(exc).__name__}: {exc}"[:400], ok=False, tflops=0.0, pct=0.0)
        row["seconds"] = round(time.time() - t, 2)
        self.rows.append(row)
        self._print(row)
        self.save()
        return row

    def _print(self, r):
        elapsed = time.time() - self.t0
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "error" in r:
            print(f"[{elapsed:6.1f}s] {shape:16s} {r['label']:52s} ERROR {r['error'][:120]}", flush=True)
        else:
            flag = "" if r["ok"] else "  WRONG RESULT"
            print(f"[{elapsed:6.1f}s] {shape:16s} {r['label']:52s} {r['tflops']:6.2f} TFLOP/s "
                  f"= {r['pct']:5.1f}% of cuBLAS {r['cublas_tflops']:6.2f}{flag}", flush=True)

    def best(self, shape, kernel="final"):
        rows = [r for r in self.rows if (r["M"], r["N"], r["K"]) == shape and r.get("ok") and r["kernel"] == kernel]
        return max(rows, key=lambda r: r["tflops"]) if rows else None

    def save(self):
        shapes = sorted({(r["M"], r["N"], r["K"]) for r in self.rows})
        best = {}
        for s in shapes:
            b = self.best(s)
            if b:
                best["x".join(map(str, s))] = dict(params=b["params"], label=b["label"], tflops=b["tflops"],
                                                   cublas_tflops=b["cublas_tflops"], pct=b["pct"])
        pcts = [v["pct"] for k, v in best.items() if tuple(map(int, k.split("x"))) in SUITE]
        geo = math.exp(sum(math.log(p / 100) for p in pcts) / len(pcts)) * 100 if pcts else None
        doc = dict(device=self.device, elapsed_s=round(time.time() - self.t0, 1),
                   best=best, suite_geomean_pct=geo,
                   rows=[{k: v for k, v in r.items() if k != "_key"} for r in self.rows])
        self.out.write_text(json.dumps(doc, indent=1))


def run_chosen(tuner: Tuner) -> int:
    """The table of record: choose_config's pick per shape against cuBLAS."""
    from helpers.final import choose_config

    shapes = [(4096,) * 3, (8192,) * 3] + list(SUITE)
    rows = [tuner.run("final", choose_config(*s), s) for s in shapes]
    print("\n== choose_config's pick per shape", flush=True)
    for r in rows:
        print(f"{r['M']}x{r['N']}x{r['K']:<6} {r['label']:52s} {r.get('tflops', 0):6.2f} TFLOP/s "
              f"{r.get('pct', 0):5.1f}% of cuBLAS {r.get('cublas_tflops', 0):6.2f}", flush=True)
    suite = [r for r in rows if (r["M"], r["N"], r["K"]) in SUITE]
    if all(r.get("ok") for r in rows):
        geo = math.exp(sum(math.log(r["pct"] / 100) for r in suite) / len(suite)) * 100
        print(f"suite geometric mean: {geo:.1f}% of cuBLAS", flush=True)
        return 0
    print("some configs failed or were wrong", flush=True)
    return 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="where to write the JSON results")
    ap.add_argument("--quick", action="store_true", help="fewer candidates (a smoke run)")
    ap.add_argument("--budget", type=float, default=170.0, help="stop starting new stages after this many seconds")
    ap.add_argument("--chosen", action="store_true",
                    help="time only what helpers.final.choose_config picks at 4096, 8192 and the suite")
    ap.add_argument("--target-s", type=float, default=0.25, help="timing time per config (bench.measure)")
    args = ap.parse_args(argv)

    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    tuner = Tuner(args.out, args.target_s, args.budget)
    tuner.device = dict(name=props["name"].decode(), sm_count=props["multiProcessorCount"],
                        cupy=cupy.__version__)
    print(f"tuning on {tuner.device['name']}, {tuner.device['sm_count']} SMs; writing {args.out}", flush=True)

    if args.chosen:
        return run_chosen(tuner)
    square = SQUARE[:6] if args.quick else SQUARE
    # ---- stage 1: n = 4096 ----
    print(f"== stage 1: {len(square)} configs at 4096^3", flush=True)
    for name, p in square:
        tuner.run(name, p, (4096, 4096, 4096))
    ranked = sorted((r for r in tuner.rows if r.get("ok") and r["kernel"] == "final"), key=lambda r: -r["tflops"])
    top = [r["params"] for r in ranked[:5]]

    # ---- stage 2: n = 8192 (the best five, plus the best warptiling) ----
    print("== stage 2: the best configs at 8192^3", flush=True)
    for p in top[:4]:
        if tuner.over_budget():
            break
        tuner.run("final", p, (8192, 8192, 8192))
    wt = tuner.best((4096, 4096, 4096), kernel="warptiling")
    if wt and not tuner.over_budget():
        tuner.run("warptiling", wt["params"], (8192, 8192, 8192))

    # ---- stage 3: the shape suite ----
    print("== stage 3: the shape suite", flush=True)
    for shape, extra in SUITE.items():
        for p in top[:2] + extra:
            if tuner.over_budget():
                print("budget spent; stopping", flush=True)
                break
            tuner.run("final", p, shape)

    # ---- summary ----
    tuner.save()
    print("\n== best per shape (final)", flush=True)
    for s in sorted({(r["M"], r["N"], r["K"]) for r in tuner.rows}):
        b = tuner.best(s)
        if b:
            print(f"{'x'.join(map(str, s)):16s} {b['label']:52s} {b['tflops']:6.2f} TFLOP/s "
                  f"{b['pct']:5.1f}% of cuBLAS", flush=True)
    doc = json.loads(args.out.read_text())
    if doc["suite_geomean_pct"]:
        print(f"suite geometric mean: {doc['suite_geomean_pct']:.1f}% of cuBLAS", flush=True)
    print("\n== TUNED entries for helpers/final.py", flush=True)
    for s in sorted({(r["M"], r["N"], r["K"]) for r in tuner.rows}):
        b = tuner.best(s)
        if b:
            print(f"    {s}: {b['params']},", flush=True)
    print("\n== all rows, fastest first", flush=True)
    for r in sorted(tuner.rows, key=lambda r: (r["M"], r["N"], r["K"], -r.get("tflops", 0))):
        tuner._print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
