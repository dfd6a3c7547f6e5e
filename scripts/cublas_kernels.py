"""Which kernels cuBLAS runs for each shape of a suite: names, grids, blocks, registers, times.

    python scripts/cublas_kernels.py OUT.json [--suite broad|default|M,N,K ...]

cuBLAS picks a kernel (and often a split of K with a second, reducing kernel) per shape. Its
kernel names say its tile ("..._128x64_..."), its grid says whether it split K (a third grid
dimension above 1, or a reduction kernel after it). One ncu run profiles one product per
shape, inside a profiler range, after a product of the same shape outside it (so that cuBLAS's
own set-up is not what is listed). Needs ncu (Nsight Compute) and a GPU.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.measure import ncu  # noqa: E402
from helpers.shapes import SUITE, broad_suite  # noqa: E402

METRICS = ("launch__grid_size", "launch__block_size", "launch__registers_per_thread",
           "launch__shared_mem_per_block_dynamic", "launch__grid_dim_x", "launch__grid_dim_y",
           "launch__grid_dim_z", "gpu__time_duration.sum")

MARKER = "next_shape_marker"
# every shape twice: once to let cuBLAS set up, once inside the profiler range, after a marker
# kernel that tells the shapes' launches apart
LAUNCH = """
import json, sys, cupy as cp
shapes = json.loads(sys.argv[1])
rng = cp.random.default_rng(0)
marker = cp.ElementwiseKernel("float32 x", "float32 y", "y = x", "%s")
m = cp.zeros(1, dtype=cp.float32)
for M, N, K in shapes:
    A = rng.random((M, K), dtype=cp.float32); B = rng.random((K, N), dtype=cp.float32)
    A @ B
    marker(m)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start(); marker(m); A @ B; cp.cuda.Device().synchronize(); cp.cuda.profiler.stop()
    del A, B
""" % MARKER


def launches_per_shape(rows: list[dict]) -> list[list[dict]]:
    """ncu's rows (one per launch and metric) as launches, {name, metric: value}, grouped per
    product: each group starts after a marker launch, in launch order."""
    kernels: dict[str, dict] = {}
    for r in rows:
        k = kernels.setdefault(r["id"], {"name": r["kernel_name"]})
        k[r["metric"]] = r["value"]
    per_shape: list[list[dict]] = []
    for _, k in sorted(kernels.items(), key=lambda kv: int(kv[0])):   # launch order ("10" after "9")
        if MARKER in k["name"]:
            per_shape.append([])
        elif per_shape:
            per_shape[-1].append(k)
    return per_shape


def shapes_of(suite: str) -> list[tuple[int, int, int]]:
    if suite == "broad":
        return broad_suite()
    if suite == "default":
        return list(SUITE)
    return [tuple(int(x) for x in s.split(",")) for s in suite.split()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--suite", default="broad", help="broad, default, or 'M,N,K M,N,K ...'")
    args = ap.parse_args(argv)
    exe = ncu.find_ncu()
    if exe is None:
        print("error: ncu (Nsight Compute) is not installed or not on PATH", file=sys.stderr)
        return 2
    shapes = shapes_of(args.suite)
    cmd = [exe, "--csv", "--print-units", "base", "--profile-from-start", "off", "--metrics", ",".join(METRICS),
           sys.executable, "-c", LAUNCH, json.dumps(shapes)]
    print(f"profiling cuBLAS on {len(shapes)} shapes ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = ncu.parse_csv(proc.stdout)
    if not rows:
        print("error: ncu returned no metrics: " + (proc.stderr or proc.stdout).strip()[-600:], file=sys.stderr)
        return 1
    per_shape = launches_per_shape(rows)
    if len(per_shape) != len(shapes):
        print(f"error: {len(per_shape)} profiled ranges for {len(shapes)} shapes", file=sys.stderr)
        return 1
    out = []
    for shape, ks in zip(shapes, per_shape):
        out.append(dict(M=shape[0], N=shape[1], K=shape[2], kernels=ks))
        names = " + ".join(f"{k['name'][:90]} grid=({k.get('launch__grid_dim_x')},{k.get('launch__grid_dim_y')},"
                           f"{k.get('launch__grid_dim_z')}) block={k.get('launch__block_size')} "
                           f"regs={k.get('launch__registers_per_thread')} "
                           f"{float(k.get('gpu__time_duration.sum', 0)) / 1e3:.1f}us" for k in ks)
        print(f"{shape[0]}x{shape[1]}x{shape[2]}: {names}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
