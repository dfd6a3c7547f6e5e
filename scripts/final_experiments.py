"""Experiments behind the final kernel's choices, timed against cuBLAS in one run on a GPU.

    python scripts/final_experiments.py OUT.json [--before FILE.cu] [--budget 420]

Three questions, each a table of % of cuBLAS (cuBLAS timed at every shape, before and
after the configs, the faster of the two kept):

1. rows: B's rows are 16-byte aligned only when N is a multiple of 4. How much does an odd
   N cost, with the kernel in kernels/12_final.cu and (``--before``) an earlier version of it?
2. stream-K blocks: when the output has fewer tiles than the GPU has block slots, how many
   blocks should share each tile's k-tiles? One block per slot (the most) makes the block
   that finishes a tile add up to hundreds of parts, one after another.
3. squares: block tiles, stages and inner loops at n = 4096 and 8192.

Every config is checked against cuBLAS on fresh random data before it is timed; the JSON is
rewritten after every shape.
"""
from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from helpers.runtime.specs import final  # noqa: E402
from helpers.runtime.specs.final import CANDIDATES, SPEC, label  # noqa: E402
from helpers.shapes import broad_suite  # noqa: E402

D = SPEC.defaults()
L = dict(D, BM=128, BN=256, BK=32, WM=64, WN=64, TM=16, TN=8, STAGES=3, GROUP=8, KU=4)
W = dict(D, BM=64, BN=256, BK=16, WM=64, WN=64, TM=8, TN=16, STAGES=5, GROUP=8, KU=2)
SQUARE_VARIANTS = {
    "L.s3.u4": L,
    "L.s3.u2": dict(L, KU=2),
    "L.s4.u4": dict(L, STAGES=4),
    "L.k16.s5.u2": dict(L, BK=16, STAGES=5, KU=2),
    "L.k16.s4.u2": dict(L, BK=16, STAGES=4, KU=2),
    "L.t8x16.s3.u4": dict(L, TM=8, TN=16),
    "W.s5.u2": W,
    "W.s4.u2": dict(W, STAGES=4),
    "W.s5.u4": dict(W, KU=4),
    "W.s3.u2": dict(W, STAGES=3),
    "W.k32.s3.u2": dict(W, BK=32, STAGES=3),
    "M.s4.u4": dict(L, BN=128, BK=16, STAGES=4, KU=4),
    "M.s5.u2": dict(L, BN=128, BK=16, STAGES=5, KU=2),
}
ROW_SHAPES = ((4096, 4096, 4096), (4096, 4095, 4096), (4096, 4094, 4096), (4095, 4096, 4095),
              (2692, 8292, 2991), (2692, 8290, 2991), (2528, 14267, 667), (2528, 14268, 667))
PARTS = (2, 4, 8, 16, 32, 64, 0)      # blocks per shared tile at most; 0: one block per slot

_cap = {"parts": 0}
_grid = final.stream_k_grid


def capped_grid(p, M, N, K, device):
    """final.stream_k_grid, with at most _cap['parts'] blocks per tile when all tiles are shared."""
    g, waves = _grid(p, M, N, K, device)
    if _cap["parts"] and waves == 0:
        g = min(g, final.tiles_of(p, M, N) * _cap["parts"])
    return g, waves


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--before", type=Path, help="an earlier kernels/12_final.cu to time beside this one")
    ap.add_argument("--budget", type=float, default=420.0)
    ap.add_argument("--only", default="rows,streamk,squares")
    ap.add_argument("--jobs", type=int, default=16, help="compile processes")
    args = ap.parse_args(argv)
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    import cupy as cp

    from helpers import hardware
    from helpers.runtime.check import compare, random_matrix, require_fp32_cublas
    from helpers.runtime.launch import prepare
    from helpers.runtime.timing import time_fn, tflops

    require_fp32_cublas()
    final.stream_k_grid = capped_grid
    device = hardware.current()
    rng = cp.random.default_rng(int(time.time()))
    specs = {"now": SPEC}
    if args.before:
        copy = ROOT / "kernels" / "12_final_before.cu"      # beside common.cuh; removed at exit
        copy.write_text(args.before.read_text())
        atexit.register(copy.unlink, missing_ok=True)
        specs["before"] = dataclasses.replace(SPEC, name="final_before", file=copy.name)
    t0, rows = time.time(), []
    # compile this kernel's configs in parallel processes first (CuPy's disk cache keeps them)
    from tune_final import compile_all, resolved

    configs = [L, W] + list(SQUARE_VARIANTS.values()) + [c.params for c in CANDIDATES]
    configs += [dict(c.params, STREAMK=1) for c in CANDIDATES]
    unique = {json.dumps(resolved(p), sort_keys=True): resolved(p) for p in configs if SPEC.is_valid(p, device)}
    compile_all(list(unique.values()), args.jobs, log)

    def save():
        args.out.write_text(json.dumps(dict(device=device.label, rows=rows), indent=1, default=str))

    def shape(question, M, N, K, items, target_s=0.05):
        """items: (name, spec key, params, parts cap)"""
        A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
        bufs = [(A, B, cp.full((M, N), math.nan, dtype=cp.float32))]
        ref = cp.matmul(A, B)
        cub = lambda: time_fn(lambda A, B, C: cp.matmul(A, B, out=C), bufs, target_s=target_s).ms  # noqa: E731
        before = cub()
        here = []
        for name, which, p, parts in items:
            row = dict(question=question, M=M, N=N, K=K, name=name, kernel=which, parts=parts,
                       params=SPEC.resolve(p), label=label(SPEC.resolve(p)))
            _cap["parts"] = parts
            try:
                launcher = prepare(specs[which], M, N, K, p, device)

                def run(A, B, C, launcher=launcher):
                    launcher.launch(final.arguments(launcher.params, M, N, K, A, B, C, launcher.workspace()))

                C = bufs[0][2]
                C.fill(math.nan)
                run(*bufs[0])
                c = compare(C, ref, A, B)
                t = time_fn(run, bufs, target_s=target_s)
                row.update(ms=t.ms, ms_p20=t.ms_p20, ms_p80=t.ms_p80, ok=bool(c.ok), grid=list(launcher.grid),
                           tflops=tflops(M, N, K, t.ms))
            except Exception as exc:  # a failure is a row
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            here.append(row)
        _cap["parts"] = 0
        cub_ms = min(before, cub())
        for r in here:
            r["cublas_ms"] = cub_ms
            if r.get("ms"):
                r["pct"] = 100 * cub_ms / r["ms"]
        rows.extend(here)
        save()
        ok = [r for r in here if r.get("ok")]
        best = max(ok, key=lambda r: r["pct"]) if ok else None
        bad = [r for r in here if not r.get("ok")]
        log(f"[{time.time() - t0:4.0f} s] {question} {M}x{N}x{K}: cuBLAS {tflops(M, N, K, cub_ms):5.1f} TF; "
            + "  ".join(f"{r['name']}{'/' + str(r['parts']) if question == 'streamk' else ''} "
                        f"{r.get('pct', 0):.0f}%" for r in here)
            + (f"  BEST {best['name']} {best['pct']:.1f}%" if best else "")
            + (f"  FAILED: {bad[0]['name']} {bad[0].get('error', 'wrong')}" if bad else ""))

    only = args.only.split(",")
    if "rows" in only:
        for M, N, K in ROW_SHAPES:
            cands = [("large", L), ("medium", CANDIDATES[1].params), ("narrow", CANDIDATES[2].params)]
            shape("rows", M, N, K, [(f"{n}:{w}", w, p, 0) for n, p in cands for w in specs], target_s=0.1)
    if "streamk" in only:
        picked = []
        for M, N, K in broad_suite() + [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048)]:
            if time.time() - t0 > args.budget * 0.75:
                break
            items = []
            for c in CANDIDATES[1:]:
                p = dict(c.params, STREAMK=1)
                if not SPEC.is_valid(p, device) or not final.stream_k_fits(p, M, N, K, device):
                    continue
                g, waves = _grid(p, M, N, K, device)
                if waves or g <= final.tiles_of(p, M, N) * 2:
                    continue
                items.append((c.name, "now", dict(c.params), 0))                 # no sharing
                items += [(c.name, "now", p, parts) for parts in PARTS]
            if items:
                picked.append((M, N, K))
                shape("streamk", M, N, K, items)
    if "squares" in only:
        for n in (4096, 8192):
            if time.time() - t0 > args.budget:
                break
            shape("squares", n, n, n, [(k, "now", v, 0) for k, v in SQUARE_VARIANTS.items()], target_s=0.25)
    log(f"done in {time.time() - t0:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
