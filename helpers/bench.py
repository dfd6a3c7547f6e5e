"""Time kernels and cuBLAS with CUDA events.

Method (the chapter "The naive kernel" explains why):
* check first, on fresh random data in [-1, 1];
* warm up (compile, module load, clocks) before timing;
* time each launch between two CUDA events, many times; report the median and
  the 20th/80th percentiles;
* when the operands fit in L2, rotate over several copies so each launch reads
  them from device memory, not from a warm L2;
* time cuBLAS (``cupy.matmul``, TF32 off) in the same run, at the same shape.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .check import compare, random_matrix, require_fp32_cublas, tolerance

L2_BYTES_DEFAULT = 50 * 2**20


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def tflops(M, N, K, ms) -> float:
    return flops(M, N, K) / (ms * 1e-3) / 1e12


@dataclass
class Timing:
    ms: float  # median
    ms_p20: float
    ms_p80: float
    reps: int
    buffers: int  # operand copies rotated through (1 = L2 may be warm)


def time_fn(fn, buffers: list, min_reps: int = 5, max_reps: int = 200, target_s: float = 0.4) -> Timing:
    """Median time of ``fn(*buffers[i % len(buffers)])`` over CUDA-event-timed launches."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    # Warm-up: the first launches pay for module load and clock ramp-up.
    for i in range(2):
        fn(*buffers[i % len(buffers)])
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    fn(*buffers[0])
    end.record(stream)
    end.synchronize()
    one = cupy.cuda.get_elapsed_time(start, end) * 1e-3
    reps = int(min(max_reps, max(min_reps, target_s / max(one, 1e-6))))
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for i, (s, e) in enumerate(events):
        args = buffers[i % len(buffers)]
        s.record(stream)
        fn(*args)
        e.record(stream)
    events[-1][1].synchronize()
    times = np.array([cupy.cuda.get_elapsed_time(s, e) for s, e in events])
    return Timing(float(np.median(times)), float(np.percentile(times, 20)),
                  float(np.percentile(times, 80)), reps, len(buffers))


def make_buffers(M, N, K, rng=None, l2_bytes: int = L2_BYTES_DEFAULT, max_buffers: int = 8) -> list:
    """Enough (A, B, C) sets that rotating through them defeats a warm L2."""
    import cupy

    per_set = 4 * (M * K + K * N + M * N)
    count = max(1, min(max_buffers, math.ceil(2 * l2_bytes / per_set)))
    free = cupy.cuda.Device().mem_info[0]
    count = max(1, min(count, int(0.5 * free // per_set)))
    rng = rng or cupy.random.default_rng()
    return [(random_matrix(M, K, rng), random_matrix(K, N, rng),
             cupy.full((M, N), np.nan, dtype=cupy.float32)) for _ in range(count)]


def l2_bytes() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes.get("L2CacheSize", L2_BYTES_DEFAULT))


def cublas_matmul(A, B, C):
    import cupy

    cupy.matmul(A, B, out=C)


@dataclass
class Result:
    """One measured (kernel, params, shape): the row format of live and recorded data."""

    kernel: str
    params: dict
    M: int
    N: int
    K: int
    ms: float
    ms_p20: float
    ms_p80: float
    tflops: float
    cublas_ms: float
    cublas_tflops: float
    rel_err: float
    ok: bool
    reps: int
    buffers: int
    extra: dict = field(default_factory=dict)

    def as_dict(self):
        return asdict(self)


def measure(name, M: int, N: int, K: int, params: dict | None = None, cublas_cache: dict | None = None,
            target_s: float = 0.4, **kw) -> Result:
    """Check, then time one kernel config and cuBLAS at one shape."""
    import cupy

    from .launch import prepare
    from .registry import get

    require_fp32_cublas()
    spec = get(name) if isinstance(name, str) else name
    launcher = prepare(spec, M, N, K, params, **kw)
    buffers = make_buffers(M, N, K, l2_bytes=l2_bytes())
    # Check on the first buffer set (C is NaN-poisoned by make_buffers).
    A, B, C = buffers[0]
    launcher(A, B, C)
    C_ref = cupy.matmul(A, B)
    err, _, ok = compare(C, C_ref, K)
    del C_ref
    t = time_fn(launcher, buffers, target_s=target_s)
    key = (M, N, K)
    if cublas_cache is not None and key in cublas_cache:
        tc = cublas_cache[key]
    else:
        tc = time_fn(cublas_matmul, buffers, target_s=target_s)
        if cublas_cache is not None:
            cublas_cache[key] = tc
    del buffers
    return Result(spec.name, launcher.params, M, N, K, t.ms, t.ms_p20, t.ms_p80, tflops(M, N, K, t.ms),
                  tc.ms, tflops(M, N, K, tc.ms), err, ok, t.reps, t.buffers)


def measure_cublas(M, N, K, target_s: float = 0.4) -> Timing:
    require_fp32_cublas()
    buffers = make_buffers(M, N, K, l2_bytes=l2_bytes())
    return time_fn(cublas_matmul, buffers, target_s=target_s)
