"""Time kernels and cuBLAS with CUDA events.

Method (the chapter "The naive kernel" explains why):

* check first, on fresh random data in [-1, 1];
* warm up (compile, module load, clocks) before timing;
* time each launch between two CUDA events, many times; report the median and the
  20th/80th percentiles;
* queue the timed launches behind a short wait on the GPU (:func:`hold_gpu`), so that
  the GPU runs them back to back: a launch shorter than the host time of one call from
  Python (about 10-25 us) would otherwise time the host, not the GPU;
* when the operands fit in L2, rotate over several copies so each launch reads them
  from device memory, not from a warm L2;
* time cuBLAS (``cupy.matmul``, TF32 off) in the same run, at the same shape.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import asdict, dataclass

import cupy
import numpy as np

from .. import hardware
from ..shapes import flops
from .check import compare, random_matrix, require_fp32_cublas
from .launch import prepare
from .spec import KernelSpec
from .specs import get


def tflops(M: int, N: int, K: int, ms: float) -> float:
    return flops(M, N, K) / (ms * 1e-3) / 1e12


@dataclass
class Timing:
    ms: float          # median
    ms_p20: float
    ms_p80: float
    reps: int
    buffers: int       # operand copies rotated through (1: L2 may be warm)
    queued: bool = True  # every timed launch was queued before the GPU reached it (no host gaps)


HOLD_SOURCE = r"""
extern "C" __global__ void hold_gpu(unsigned long long ns)
{
    // One thread waits on the GPU's nanosecond clock while the host queues work behind it.
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
#if __CUDA_ARCH__ >= 700
        __nanosleep(1000);          // give the issue slots back (sm_70 and newer); older GPUs just spin
#endif
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""
MAX_HOLD_S = 2.0


@functools.lru_cache(maxsize=None)
def _hold_kernel(device: int):
    return cupy.RawKernel(HOLD_SOURCE, "hold_gpu")


def hold_gpu(seconds: float, stream=None) -> None:
    """Keep ``stream`` busy for ``seconds`` (at most MAX_HOLD_S), so that what the host queues next waits."""
    kern = _hold_kernel(cupy.cuda.Device().id)
    ns = int(min(seconds, MAX_HOLD_S) * 1e9)
    kern((1,), (1,), (np.uint64(ns),), stream=stream or cupy.cuda.get_current_stream())


class CudaEvents:
    """The clock :func:`time_fn` uses: a pair of CUDA events around each launch."""

    def __init__(self):
        self.stream = cupy.cuda.get_current_stream()
        self.pairs = []
        self.held_until = None

    def hold(self, seconds: float) -> None:
        """Start a wait on the GPU; the launches queued after it run back to back once it ends."""
        hold_gpu(seconds, self.stream)
        self.held_until = cupy.cuda.Event(disable_timing=True)
        self.held_until.record(self.stream)

    def still_held(self) -> bool:
        """Whether the wait is still running, so that nothing queued since has started yet."""
        return self.held_until is None or not self.held_until.done

    def start(self):
        s = cupy.cuda.Event()
        s.record(self.stream)
        self.pairs.append([s, None])

    def stop(self):
        e = cupy.cuda.Event()
        e.record(self.stream)
        self.pairs[-1][1] = e

    def elapsed_ms(self) -> list[float]:
        self.pairs[-1][1].synchronize()
        out = [cupy.cuda.get_elapsed_time(s, e) for s, e in self.pairs]
        self.pairs = []
        return out


def time_fn(fn, buffers: list, min_reps: int = 5, max_reps: int = 200, target_s: float = 0.4,
            clock=None) -> Timing:
    """Median time of ``fn(*buffers[i % len(buffers)])`` over timed launches.

    Two untimed warm-up calls, one timed call to size the run, then enough launches to
    fill ``target_s`` (between ``min_reps`` and ``max_reps``). The timed launches are
    queued behind a wait on the GPU twice as long as the host takes to queue them, so
    each pair of events measures the GPU's time, not the host's; if the wait ends
    before the last launch is queued, the run is repeated once with a longer wait, and
    ``Timing.queued`` says whether that worked. ``clock`` defaults to CUDA events;
    tests pass a stand-in.
    """
    clock = clock or CudaEvents()
    for i in range(2):                                  # module load, clock ramp-up
        fn(*buffers[i % len(buffers)])
    t0 = time.perf_counter()
    clock.start()
    fn(*buffers[0])
    clock.stop()
    host_s = time.perf_counter() - t0                   # the host's time to queue one timed launch
    one = clock.elapsed_ms()[0] * 1e-3
    reps = int(min(max_reps, max(min_reps, target_s / max(one, 1e-6))))
    for attempt in range(2):
        clock.hold((2 + 6 * attempt) * reps * host_s + 1e-3)
        for i in range(reps):
            args = buffers[i % len(buffers)]
            clock.start()
            fn(*args)
            clock.stop()
        queued = clock.still_held()
        times = np.array(clock.elapsed_ms())
        if queued:
            break
    if not queued:
        warnings.warn(f"the GPU caught up with the host while {reps} launches were queued: these times include the "
                      "host's gaps between launches", RuntimeWarning, stacklevel=2)
    return Timing(float(np.median(times)), float(np.percentile(times, 20)), float(np.percentile(times, 80)),
                  reps, len(buffers), queued)


def buffer_count(M: int, N: int, K: int, l2_bytes: int, free_bytes: int, most: int = 8) -> int:
    """Operand sets to rotate through so that they overflow L2 twice, within half the free memory."""
    per_set = 4 * (M * K + K * N + M * N)
    count = max(1, min(most, math.ceil(2 * l2_bytes / per_set)))
    return max(1, min(count, int(0.5 * free_bytes // per_set)))


def make_buffers(M: int, N: int, K: int, rng=None) -> list:
    """(A, B, C) sets on the GPU, random A and B, NaN-filled C."""
    count = buffer_count(M, N, K, hardware.gpu().l2_bytes, cupy.cuda.Device().mem_info[0])
    rng = rng or cupy.random.default_rng()
    return [(random_matrix(M, K, rng), random_matrix(K, N, rng), cupy.full((M, N), np.nan, dtype=cupy.float32))
            for _ in range(count)]


def cublas_matmul(A, B, C) -> None:
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
    rel_err: float | None      # None where C held a NaN or infinity (strict JSON has no Infinity)
    ok: bool
    reps: int
    buffers: int
    source_hash: str
    registers: int            # per thread, in the binary that ran (the driver's report)
    queued: bool = True       # both timings ran back to back on the GPU (see :func:`time_fn`)

    def as_dict(self) -> dict:
        return asdict(self)


def measure(name: str | KernelSpec, M: int, N: int, K: int, params: dict | None = None,
            cublas_cache: dict | None = None, target_s: float = 0.4, **kw) -> Result:
    """Check, then time one kernel config and cuBLAS at one shape."""
    require_fp32_cublas()
    spec = get(name)
    launcher = prepare(spec, M, N, K, params, **kw)
    buffers = make_buffers(M, N, K)
    A, B, C = buffers[0]
    launcher(A, B, C)                     # check on the first set (C is NaN before)
    c = compare(C, cupy.matmul(A, B), A, B)
    t = time_fn(launcher, buffers, target_s=target_s)
    if cublas_cache is not None and (M, N, K) in cublas_cache:
        tc = cublas_cache[(M, N, K)]
    else:
        tc = time_fn(cublas_matmul, buffers, target_s=target_s)
        if cublas_cache is not None:
            cublas_cache[(M, N, K)] = tc
    del buffers
    return Result(spec.name, launcher.params, M, N, K, t.ms, t.ms_p20, t.ms_p80, tflops(M, N, K, t.ms),
                  tc.ms, tflops(M, N, K, tc.ms), c.rel_err if math.isfinite(c.rel_err) else None, c.ok,
                  t.reps, t.buffers, spec.source_hash(), int(launcher.kernel.attributes["num_regs"]),
                  t.queued and tc.queued)


def measure_cublas(M: int, N: int, K: int, target_s: float = 0.4) -> Timing:
    require_fp32_cublas()
    return time_fn(cublas_matmul, make_buffers(M, N, K), target_s=target_s)
