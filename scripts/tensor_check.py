"""Check and time the tensor-core kernels of kernels/14_tf32.cu on this GPU, in under 2 minutes.

    python scripts/tensor_check.py            # every candidate config
    python scripts/tensor_check.py --quick    # the defaults only

1. Correctness on odd shapes, K not a multiple of the k-slice, and operands 4 bytes off a
   16-byte boundary: ``tf32`` against the product of its TF32-rounded operands with the
   book's float32 bound (helpers/runtime/check.py), ``tf32x3`` against cuBLAS FP32 with the
   same bound, also on operands spanning six orders of magnitude. A failure prints the
   shape, the worst element against its bound and the first wrong index.
2. 3xTF32's error against a float64 product at K = 1024 .. 8192 (M = N = 512), promoted every
   1, 2 or 4 k-tiles and not at all, beside cuBLAS FP32, the FFMA kernel and TF32.
3. TFLOP/s at 4096 and 8192 of each candidate config beside cuBLAS FP32, cuBLAS TF32 and the
   book's FFMA kernel, with each one's error against a float64 product.
4. The rate of a register-only loop of mma.sync.m16n8k8.

Decides nothing: it prints. A config that fails to compile or launch is reported and skipped.
Needs CuPy and NumPy only (no Plotly, no IPython).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from helpers import hardware  # noqa: E402
from helpers.measure import tensor_cores as tc  # noqa: E402
from helpers.runtime.check import compare  # noqa: E402
from helpers.runtime.specs import get  # noqa: E402
from helpers.runtime.specs.tensor_cores import VARIANTS_OF  # noqa: E402

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (128, 128, 20), (1000, 3000, 777), (33, 4100, 300),
          (256, 256, 256), (4096, 4096, 4096)]
EXTRA = {"tf32": [dict(BM=256, BN=128, WM=64, WN=64, STAGES=3), dict(WM=32, WN=64, STAGES=3)],
         "tf32x3": [dict(BK=32, STAGES=4), dict(BM=256, BN=64, STAGES=3), dict(WM=32, WN=32, BM=64, BN=128, STAGES=4),
                    dict(WN=64, BK=32, STAGES=3, PROMOTE=0)]}
ERROR_K = (1024, 2048, 4096, 8192)
ERROR_MN = 512


def guarded(what: str, fn):
    """fn(), or None with the failure printed (a config that does not compile or launch)."""
    try:
        return fn()
    except Exception as exc:   # noqa: BLE001
        print(f"  ERROR {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None


def error_sweep():
    """3xTF32's error, promoted every 1, 2, 4 k-tiles and not at all, against K."""
    cols = [("cuBLAS FP32", "cublas_fp32", None), ("FFMA", "simt", None), ("TF32", "tf32", None)] + [
        (f"3x P={p}", "tf32x3", dict(PROMOTE=p)) for p in (1, 2, 4, 0)]
    print("  " + f"{'K':>6s}" + "".join(f"{c[0]:>13s}" for c in cols))
    for K in ERROR_K:
        A, B = tc.operands(ERROR_MN, ERROR_MN, K, seed=K)
        out = []
        for _, m, p in cols:
            def one(m=m, p=p):
                fn, _ = tc.multiply(m, ERROR_MN, ERROR_MN, K, None if p is None else get(m).resolve(p))
                C = cupy.full((ERROR_MN, ERROR_MN), np.nan, dtype=cupy.float32)
                fn(A, B, C)
                return tc.rel_error(C, A, B)
            e = guarded(f"{m} {p} K={K}", one)
            out.append(f"{e:13.1e}" if e is not None else f"{'-':>13s}")
        print(f"  {K:6d}" + "".join(out))


def view_off_by_one(X):
    flat = cupy.empty(X.size + 1, dtype=cupy.float32)
    v = flat[1:].reshape(X.shape)
    v[...] = X
    return v


def check_one(name: str, params: dict, M: int, N: int, K: int, wide=False, offset=False) -> bool:
    spec = get(name)
    A, B = tc.operands(M, N, K, seed=M + N + K, wide=wide)
    fn, full = tc.multiply(name, M, N, K, spec.resolve(params))
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    if offset:
        Av, Bv, Cv = view_off_by_one(A), view_off_by_one(B), view_off_by_one(C)
        fn(Av, Bv, Cv)
        C = Cv.copy()
    else:
        fn(A, B, C)
    if name == "tf32":
        At, Bt, ref = tc.tf32_reference(A, B)
        c = compare(C, ref, At, Bt)
        bound_a, bound_b = At, Bt
    else:
        ref = cupy.matmul(A, B)
        c = compare(C, ref, A, B)
        bound_a, bound_b = A, B
    what = f"{name} {spec.label(full)} {M}x{N}x{K}{' wide' if wide else ''}{' offset' if offset else ''}"
    if c.ok:
        print(f"  ok    {what}: rel err {c.rel_err:.1e}, worst element {c.worst_element:.2f} of its bound")
        return True
    diff = cupy.abs(C - ref)
    nan = cupy.isnan(C)
    idx = tuple(int(i) for i in cupy.unravel_index(int(cupy.argmax(cupy.where(nan, cupy.inf, diff))), C.shape))
    print(f"  FAIL  {what}: rel err {c.rel_err:.2e}, {c.wrong} elements over their bound, {c.unwritten} never written, "
          f"worst {c.worst_element:.2f}x its bound; first worst at {idx}: got {float(C[idx])}, want {float(ref[idx])}")
    rows_bad = cupy.where(cupy.any(nan | (diff > 1e-2 * (cupy.abs(ref).max() + 1e-30)), axis=1))[0]
    if rows_bad.size:
        print(f"        rows with errors: {rows_bad[:10].get().tolist()} ... ({rows_bad.size} rows); "
              f"A/B norms {float(cupy.linalg.norm(bound_a)):.1f}/{float(cupy.linalg.norm(bound_b)):.1f}")
    return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the defaults only")
    args = ap.parse_args()
    device = hardware.current()
    print(f"{device.label}, compute capability {device.cc}, CuPy {cupy.__version__}")
    if not tc.supported(device):
        print("this GPU has no TF32 mma.sync (compute capability < 8.0): nothing to check")
        return 1
    t0 = time.time()
    configs = {n: [VARIANTS_OF[n][0]] if args.quick else VARIANTS_OF[n] + EXTRA[n] for n in ("tf32", "tf32x3")}
    failures = 0
    print("== correctness ==")
    for name in ("tf32", "tf32x3"):
        spec = get(name)
        for v in configs[name]:
            full = spec.resolve(v)
            if not spec.is_valid(full, device):
                print(f"  skip  {name} {spec.label(full)}: {spec.problems(full, device)}")
                continue
            cases = [dict(M=M, N=N, K=K) for (M, N, K) in SHAPES] + [
                dict(M=130, N=132, K=36, offset=True), dict(M=1000, N=1000, K=1000, offset=True)]
            if name == "tf32x3":
                cases.append(dict(M=1000, N=3000, K=777, wide=True))
            for case in cases:
                failures += not guarded(f"{name} {spec.label(full)} {case}", lambda case=case: check_one(name, full, **case))
    print(f"   ({time.time() - t0:.0f} s)")
    assert tc.fp32_is_default(), "cuBLAS was left in TF32 mode"

    print(f"== error against float64, M = N = {ERROR_MN} (max|C - C64| / max|C64|; P = k-tiles per promotion) ==")
    error_sweep()
    print(f"   ({time.time() - t0:.0f} s)")

    print("== speed (TFLOP/s; error = max|C - C64| / max|C64|) ==")
    for n in (4096, 8192):
        for m in ("cublas_fp32", "cublas_tf32", "simt"):
            r = guarded(f"{m} n={n}", lambda m=m: tc.speed_row(m, n, target_s=0.2))
            if r:
                print(f"  n={n} {tc.METHODS[m]:26s} {r['tflops']:7.1f}   error {r['error']:.1e}")
        for name in ("tf32", "tf32x3"):
            spec = get(name)
            for v in configs[name]:
                full = spec.resolve(v)
                if not spec.is_valid(full, device):
                    continue
                r = guarded(f"{name} {spec.label(full)} n={n}", lambda full=full: tc.speed_row(name, n, full, target_s=0.2))
                if r:
                    print(f"  n={n} {name:6s} {spec.label(full):44s} {r['tflops']:7.1f}   error {r['error']:.1e}")
    assert tc.fp32_is_default(), "cuBLAS was left in TF32 mode"
    print(f"   ({time.time() - t0:.0f} s)")

    print("== mma.sync peak ==")
    for r in guarded("mma.sync peak", lambda: tc.peak_rows(log=lambda line: None)) or []:
        print(f"  {r['chains']} chains, {r['blocks_per_sm']} blocks/SM: {r['tflops']:.0f} TFLOP/s")
    print(f"{'ALL CHECKS PASSED' if not failures else f'{failures} CHECKS FAILED'} ({time.time() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
