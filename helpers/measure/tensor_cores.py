"""The data of the chapters "Tensor cores and TF32" (``tensor_cores``) and "Float32 accuracy
at tensor-core speed" (``tf32x3``): speeds, errors against a float64 product, the error
as K grows, and the rate of mma.sync alone.

Five ways to compute C = A @ B are compared (:data:`METHODS`): the book's final FFMA
kernel (chapter 12), cuBLAS in float32 (TF32 off, the book's baseline), cuBLAS with TF32
tensor-core math (switched on for its own calls only, by :func:`cublas_tf32`, and always
switched back), and the two tensor-core kernels of kernels/14_tf32.cu.

Error = max |C - C64| / max |C64|, C64 the product in float64 of the same float32
operands, computed on the GPU (cuBLAS DGEMM).

* Recorded (the online book): ``python -m helpers record --chapter tensor_cores --chapter
  tf32x3`` on a GPU stores the rows; :func:`run` reads them (None where not recorded yet).
* Live (a GPU of compute capability 8.0 or newer): :func:`run` measures now, once per process.
  On an older GPU the chapters show the recorded rows and say why.

Rows are dicts tagged by ``what``: ``speed``, ``error_k``, ``check``, ``peak``.
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from .. import hardware, settings
from ..models import tf32
from ..runtime.specs import get
from ..runtime.specs.tensor_cores import MIN_CC, VARIANTS_OF
from . import datafile

CHAPTERS = ("tensor_cores", "tf32x3")
RECORD_COMMAND = "python -m helpers record --chapter tensor_cores --chapter tf32x3"
METHODS = {"simt": "FP32 SIMT (chapter 12)", "cublas_fp32": "cuBLAS FP32", "cublas_tf32": "cuBLAS TF32",
           "tf32": "TF32 (ours)", "tf32x3": "3xTF32 (ours)"}
# Kernels of kernels/15_wgmma.cu, measured where the GPU runs them (compute capability 9.0):
# the chapter "Float32 accuracy at tensor-core speed" shows them in its section on Hopper.
HOPPER_METHODS = {"wgmma_tf32": "TF32 wgmma (ours, Hopper)", "wgmma_tf32x3": "3xTF32 wgmma (ours, Hopper)"}
LABELS = METHODS | HOPPER_METHODS
SIZES = (1024, 2048, 4096, 8192)
QUICK_SIZES = (1024, 2048)
VARIANT_SIZES = (4096, 8192)          # where the kernels' variants are timed too
ERROR_K = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768)
UNPROMOTED = "tf32x3_unpromoted"      # error_k rows of 3xTF32 with PROMOTE = 0: one long mma chain per element
ERROR_MN = 256                        # M = N of the error-vs-K sweep
CHECK_SHAPES = ((1, 1, 1), (127, 129, 65), (1000, 3000, 777), (33, 4100, 300))
PEAK_CHAINS = (4, 8)                  # independent accumulators per warp in the mma.sync loop
PEAK_BLOCKS_PER_SM = (2, 4, 8)        # 256-thread blocks per SM
PEAK_ITERS = 4096
MMA_FLOP = 2 * 16 * 8 * 8             # one mma.sync.m16n8k8


def live() -> bool:
    """Measure now: a GPU is here (or live mode is forced) and it has tensor cores for TF32."""
    return hardware.is_live() and supported(hardware.current())


def supported(device) -> bool:
    return device.cc_tuple >= MIN_CC


def hopper_methods(device) -> tuple[str, ...]:
    """The keys of :data:`HOPPER_METHODS` whose kernels ``device`` runs (none below compute capability 9.0)."""
    return tuple(m for m in HOPPER_METHODS if get(m).is_valid(get(m).defaults(), device))


# ------------------------------------------------------------------ cuBLAS modes
@contextlib.contextmanager
def cublas_tf32():
    """cupy.matmul on float32 with TF32 tensor-core math (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32)
    inside the block only; the previous compute type is restored whatever happens."""
    from cupy._core import _routines_linalg as linalg   # noqa: PLC0415  (CuPy's switch for cuBLAS's compute type)

    before = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, before)


def fp32_is_default() -> bool:
    """Whether cupy.matmul on float32 is back to its default compute type (no TF32)."""
    from cupy._core import _routines_linalg as linalg   # noqa: PLC0415

    return linalg.get_compute_type(np.float32) != linalg.COMPUTE_TYPE_TF32


# ------------------------------------------------------------------ the five ways
def multiply(method: str, M: int, N: int, K: int, params: dict | None = None):
    """fn(A, B, C) computing C = A @ B by ``method`` (a key of :data:`METHODS`), and its params."""
    import cupy   # noqa: PLC0415  (only with a GPU)

    from ..runtime.launch import prepare   # noqa: PLC0415

    if method == "cublas_fp32":
        return (lambda A, B, C: cupy.matmul(A, B, out=C)), None

    if method == "cublas_tf32":
        def fn(A, B, C):
            with cublas_tf32():
                cupy.matmul(A, B, out=C)
        return fn, None
    spec = get("final" if method == "simt" else method)
    device = hardware.current()
    full = spec.resolve(params) if params is not None else spec.config_for(M, N, K, device)
    return prepare(spec, M, N, K, full, device=device), full


def rel_error(C, A, B) -> float:
    """max |C - C64| / max |C64|, C64 = A @ B in float64 on the GPU."""
    import cupy   # noqa: PLC0415

    ref = cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64))
    err = float(cupy.abs(C.astype(cupy.float64) - ref).max() / cupy.abs(ref).max())
    del ref
    return err if math.isfinite(err) else None


def operands(M: int, N: int, K: int, seed: int, wide: bool = False):
    """A (M, K), B (K, N) uniform in [-1, 1]; ``wide``: each times 10^u, u uniform in [-3, 3]."""
    import cupy   # noqa: PLC0415

    from ..runtime.check import random_matrix   # noqa: PLC0415

    rng = cupy.random.default_rng(seed)
    A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
    if wide:
        A *= (10.0 ** rng.uniform(-3, 3, A.shape)).astype(cupy.float32)
        B *= (10.0 ** rng.uniform(-3, 3, B.shape)).astype(cupy.float32)
    return A, B


# ------------------------------------------------------------------ rows
def speed_row(method: str, n: int, params: dict | None = None, target_s: float = 0.3) -> dict:
    """One method timed at n x n x n (CUDA events, median), with its error on the first operands."""
    import cupy   # noqa: PLC0415

    from ..runtime.timing import make_buffers, time_fn, tflops   # noqa: PLC0415

    fn, full = multiply(method, n, n, n, params)
    buffers = make_buffers(n, n, n)
    A, B, C = buffers[0]
    fn(A, B, C)
    error = rel_error(C, A, B)
    t = time_fn(fn, buffers, target_s=target_s)
    del buffers
    cupy.get_default_memory_pool().free_all_blocks()
    kernel = None if method.startswith("cublas") else get("final" if method == "simt" else method)
    return {"what": "speed", "method": method, "label": LABELS[method], "kernel": kernel and kernel.name,
            "params": full, "config": kernel.label(full) if kernel else "", "M": n, "N": n, "K": n,
            "ms": t.ms, "ms_p20": t.ms_p20, "ms_p80": t.ms_p80, "tflops": tflops(n, n, n, t.ms),
            "error": error, "queued": t.queued}


def speed_rows(methods: tuple, sizes: tuple, variants_of: str | None = None, log=print) -> list[dict]:
    rows = []
    for n in sizes:
        for m in methods:
            rows.append(speed_row(m, n))
            log(f"   {LABELS[m]:24s} n = {n}: {rows[-1]['tflops']:7.1f} TFLOP/s, error {rows[-1]['error']:.1e}")
        if variants_of and n in VARIANT_SIZES:
            spec = get(variants_of)
            for v in VARIANTS_OF[variants_of][1:]:
                full = spec.resolve(v)
                if not spec.is_valid(full, hardware.current()):
                    log(f"   {spec.label(full):30s} refused: {spec.problems(full, hardware.current())}")
                    continue
                try:                                 # a variant that fails is reported, not fatal
                    rows.append(speed_row(variants_of, n, full))
                except Exception as exc:   # noqa: BLE001
                    log(f"   {spec.label(full):30s} n = {n}: FAILED ({type(exc).__name__}: {exc})")
                    continue
                log(f"   {spec.label(full):30s} n = {n}: {rows[-1]['tflops']:7.1f} TFLOP/s")
    return rows


def error_k_rows(log=print) -> list[dict]:
    """The error of every method at M = N = ERROR_MN as K grows (same operands for all)."""
    import cupy   # noqa: PLC0415

    rows = []
    for K in ERROR_K:
        A, B = operands(ERROR_MN, ERROR_MN, K, seed=K)
        for m in METHODS:
            fn, _ = multiply(m, ERROR_MN, ERROR_MN, K)
            C = cupy.full((ERROR_MN, ERROR_MN), np.nan, dtype=cupy.float32)
            fn(A, B, C)
            rows.append({"what": "error_k", "method": m, "label": METHODS[m], "M": ERROR_MN, "N": ERROR_MN,
                         "K": K, "error": rel_error(C, A, B)})
        spec = get("tf32x3")
        unpromoted = dict(spec.config_for(ERROR_MN, ERROR_MN, K, hardware.current()), PROMOTE=0)
        fn, _ = multiply("tf32x3", ERROR_MN, ERROR_MN, K, unpromoted)
        C = cupy.full((ERROR_MN, ERROR_MN), np.nan, dtype=cupy.float32)
        fn(A, B, C)
        rows.append({"what": "error_k", "method": UNPROMOTED, "label": "3xTF32, not promoted", "M": ERROR_MN,
                     "N": ERROR_MN, "K": K, "error": rel_error(C, A, B)})
        log(f"   K = {K}: " + ", ".join(f"{r['method']} {r['error']:.1e}" for r in rows[-len(METHODS) - 1:]))
    return rows


def tf32_reference(A, B):
    """The product of A and B rounded to TF32, in float64, as float32: what a correct TF32
    kernel computes up to float32 rounding (so check.py's float32 bound applies to it)."""
    import cupy   # noqa: PLC0415

    At, Bt = tf32.to_tf32(A), tf32.to_tf32(B)
    return At, Bt, cupy.matmul(At.astype(cupy.float64), Bt.astype(cupy.float64)).astype(cupy.float32)


def check_rows(kernel: str, wide: bool = False) -> list[dict]:
    """Each check shape: the kernel's result against the book's float32 bound (check.py): for
    ``tf32`` against the product of the TF32-rounded operands, for ``tf32x3`` against cuBLAS FP32."""
    import cupy   # noqa: PLC0415

    from ..runtime.check import compare, tolerance   # noqa: PLC0415

    rows = []
    for i, (M, N, K) in enumerate(CHECK_SHAPES):
        A, B = operands(M, N, K, seed=100 + i, wide=wide)
        fn, full = multiply(kernel, M, N, K)
        C = cupy.full((M, N), np.nan, dtype=cupy.float32)
        fn(A, B, C)
        if get(kernel).precision != "fp32":           # TF32: against its own rounded operands
            At, Bt, ref = tf32_reference(A, B)
            c = compare(C, ref, At, Bt)
        else:
            c = compare(C, cupy.matmul(A, B), A, B)
        rows.append({"what": "check", "kernel": kernel, "params": full, "M": M, "N": N, "K": K, "wide": wide,
                     "rel_err": c.rel_err if math.isfinite(c.rel_err) else None, "tol": tolerance(K),
                     "worst_element": c.worst_element, "wrong": c.wrong, "ok": c.ok,
                     "error": rel_error(C, A, B)})
    return rows


def wide_rows(n: int = 2048) -> list[dict]:
    """Errors of every method on operands whose magnitudes span six orders (uniform x 10^U(-3, 3))."""
    import cupy   # noqa: PLC0415

    A, B = operands(n, n, n, seed=7, wide=True)
    rows = []
    for m in METHODS:
        fn, _ = multiply(m, n, n, n)
        C = cupy.full((n, n), np.nan, dtype=cupy.float32)
        fn(A, B, C)
        rows.append({"what": "wide", "method": m, "label": METHODS[m], "M": n, "N": n, "K": n,
                     "error": rel_error(C, A, B)})
    return rows


def peak_rows(log=print) -> list[dict]:
    """TFLOP/s of a register-only loop of mma.sync.m16n8k8 (kernels/14_tf32.cu, tf32_mma_peak)."""
    import cupy   # noqa: PLC0415

    from ..runtime.compile import compile_function   # noqa: PLC0415
    from ..runtime.timing import time_fn   # noqa: PLC0415

    spec, device = get("tf32"), hardware.current()
    rows = []
    for chains in PEAK_CHAINS:
        kernel = compile_function(spec.source(), spec.file, f"tf32_mma_peak<{chains}>", device)
        for per_sm in PEAK_BLOCKS_PER_SM:
            blocks = per_sm * device.sm_count
            out = cupy.empty(blocks * 256, dtype=cupy.float32)
            fn = lambda out=out, blocks=blocks: kernel((blocks,), (256,), (out, np.int32(PEAK_ITERS)))  # noqa: E731
            t = time_fn(fn, [()], target_s=0.2)
            flop = blocks * 8 * PEAK_ITERS * chains * MMA_FLOP       # 8 warps per block
            rows.append({"what": "peak", "chains": chains, "blocks_per_sm": per_sm, "ms": t.ms,
                         "tflops": flop / (t.ms * 1e-3) / 1e12})
            log(f"   mma.sync loop, {chains} chains, {per_sm} blocks/SM: {rows[-1]['tflops']:.0f} TFLOP/s")
    return rows


# ------------------------------------------------------------------ the two sources
def measure_tensor_cores(log=print) -> list[dict]:
    """Chapter 14: TF32 against cuBLAS TF32 and FP32 and the SIMT kernel; error vs K; checks."""
    sizes = QUICK_SIZES if settings.quick() else SIZES
    rows = speed_rows(("simt", "cublas_fp32", "cublas_tf32", "tf32"), sizes, variants_of="tf32", log=log)
    rows += error_k_rows(log=log)
    rows += check_rows("tf32")
    assert fp32_is_default(), "cuBLAS was left in TF32 mode"
    return rows


def measure_tf32x3(log=print) -> list[dict]:
    """Chapter 15: 3xTF32 against cuBLAS FP32 and TF32; its checks on plain and wide operands;
    the errors on wide operands; the mma.sync peak."""
    sizes = QUICK_SIZES if settings.quick() else SIZES
    rows = speed_rows(("cublas_fp32", "cublas_tf32", "tf32", "tf32x3"), sizes, variants_of="tf32x3", log=log)
    hopper = hopper_methods(hardware.current())
    if hopper:
        rows += speed_rows(hopper, sizes, log=log)
    rows += error_k_rows(log=log)
    rows += check_rows("tf32x3") + check_rows("tf32x3", wide=True)
    if "wgmma_tf32x3" in hopper:
        rows += check_rows("wgmma_tf32x3") + check_rows("wgmma_tf32x3", wide=True)
    rows += wide_rows()
    rows += peak_rows(log=log)
    assert fp32_is_default(), "cuBLAS was left in TF32 mode"
    return rows


def record_tensor_cores() -> list[dict]:
    """The ``tensor_cores`` source (``python -m helpers record --chapter tensor_cores``)."""
    return measure_tensor_cores(log=lambda line: print(line, flush=True))


def record_tf32x3() -> list[dict]:
    """The ``tf32x3`` source (``python -m helpers record --chapter tf32x3``)."""
    return measure_tf32x3(log=lambda line: print(line, flush=True))


MEASURE = {"tensor_cores": measure_tensor_cores, "tf32x3": measure_tf32x3}


# ------------------------------------------------------------------ reading
class Run:
    """One chapter's rows and where they came from."""

    def __init__(self, chapter: str, rows: list, device, source: str, live: bool):
        self.chapter, self.rows, self.device, self.source, self.live = chapter, rows, device, source, live

    def of(self, what: str, **match) -> list[dict]:
        return [r for r in self.rows if r.get("what") == what and all(r.get(k) == v for k, v in match.items())]

    def speed(self, method: str, n: int, params: dict | None = None) -> dict | None:
        """The row of ``method`` at n (the config it runs there on this run's device unless
        ``params``), None if not measured."""
        rows = self.of("speed", method=method, M=n)
        if not method.startswith("cublas") and method != "simt":     # one of this chapter's kernels
            spec = get(method)
            want = spec.resolve(params) if params is not None else spec.config_for(n, n, n, self.device)
            rows = [r for r in rows if r["params"] == want]
        return rows[0] if rows else None

    @property
    def sizes(self) -> list[int]:
        return sorted({r["M"] for r in self.of("speed")})

    @property
    def largest(self) -> int:
        return max(self.sizes)


@functools.cache
def _measured(chapter: str) -> Run:
    device = hardware.current()
    return Run(chapter, MEASURE[chapter](log=lambda line: None), device, f"measured live on {device.label}", True)


def recorded(chapter: str) -> Run | None:
    """The recorded rows, or None where the chapter is not in the reference device's file yet."""
    try:
        rec = datafile.load()
        ch = rec.chapter(chapter)
    except datafile.DataError:
        return None
    return Run(chapter, ch["rows"], hardware.Device.from_record(ch["device"]), rec.label(chapter), False)


def run(chapter: str) -> Run | None:
    """The chapter's rows: measured now in live mode on a GPU with TF32 tensor cores, else
    recorded (None if not recorded yet)."""
    if live():
        return _measured(chapter)
    return recorded(chapter)


def mode_note() -> str | None:
    """Why a live page shows recorded rows (a GPU below compute capability 8.0), else None."""
    if hardware.is_live() and not supported(hardware.current()):
        d = hardware.current()
        return (f"{d.label} has compute capability {d.cc}: mma.sync with TF32 operands needs 8.0 or newer, "
                "so this page shows the recorded measurements instead of measuring here.")
    return None
