"""The correctness check and the timing loop, with NumPy stand-ins for the GPU (CPU only)."""
import math

import numpy as np
import pytest

from helpers.runtime import timing
from helpers.runtime.check import EPS, compare, tolerance


def operands(M=300, N=200, K=1000, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    return A, B, (A.astype(np.float64) @ B).astype(np.float32)


def test_tolerance_grows_with_the_square_root_of_k():
    assert tolerance(4096) == pytest.approx(8 * EPS * 64)
    assert tolerance(4 * 777) == pytest.approx(2 * tolerance(777))


def test_a_float32_result_in_another_order_passes():
    A, B, ref = operands()
    C = A @ B                                     # float32, NumPy's BLAS order
    c = compare(C, ref, A, B)
    assert c.ok and c.wrong == 0 and c.worst_element < 1


def test_an_unwritten_element_fails():
    A, B, ref = operands()
    C = ref.copy()
    C[3, 4] = np.nan
    c = compare(C, ref, A, B)
    assert c.unwritten == 1 and not c.ok and math.isinf(c.rel_err)


def test_a_few_wrong_elements_fail_where_the_norm_alone_would_pass():
    A, B, ref = operands(1024, 1024, 512)
    C = ref.copy()
    C[10, 20] += 0.01                             # one element, far below the typical size of C
    c = compare(C, ref, A, B)
    assert c.rel_err < tolerance(512)             # the Frobenius check alone would accept it
    assert c.wrong == 1 and not c.ok


def test_tf32_rounding_fails():
    A, B, ref = operands()

    def tf32(X):                                  # keep 10 bits of mantissa
        return (X.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)

    c = compare((tf32(A).astype(np.float64) @ tf32(B)).astype(np.float32), ref, A, B)
    assert not c.ok


class FakeClock:
    """Stands in for CUDA events: each timed call takes the next duration of a list."""

    def __init__(self, durations_ms, held=()):
        self.durations, self.pending, self.i = list(durations_ms), [], 0
        self.holds, self.held = [], list(held)

    def start(self):
        pass

    def stop(self):
        self.pending.append(self.durations[min(self.i, len(self.durations) - 1)])
        self.i += 1

    def elapsed_ms(self):
        out, self.pending = self.pending, []
        return out

    def hold(self, seconds):
        self.holds.append(seconds)

    def still_held(self):
        return self.held.pop(0) if self.held else True


def test_time_fn_warms_up_sizes_the_run_and_takes_the_median():
    calls = []
    clock = FakeClock([10.0] + [1.0, 2.0, 3.0, 4.0, 100.0] * 40)
    t = timing.time_fn(lambda *a: calls.append(a), [(1,), (2,)], min_reps=5, max_reps=200, target_s=0.1,
                       clock=clock)
    assert len(calls) == 2 + 1 + t.reps                  # two untimed warm-ups, one sizing call
    assert t.reps == 10                                  # 0.1 s / 10 ms
    assert t.ms == pytest.approx(np.median([1.0, 2.0, 3.0, 4.0, 100.0] * 2))
    assert t.ms_p20 <= t.ms <= t.ms_p80 and t.buffers == 2
    assert calls[2] == (1,) and calls[3] == (1,) and calls[4] == (2,)   # buffers rotate


def test_time_fn_queues_the_timed_launches_behind_a_wait_on_the_gpu():
    clock = FakeClock([1e-3])
    t = timing.time_fn(lambda: None, [()], min_reps=5, max_reps=50, target_s=1.0, clock=clock)
    assert t.queued and len(clock.holds) == 1 and clock.holds[0] > 0


def test_time_fn_runs_again_with_a_longer_wait_when_the_gpu_caught_up():
    clock = FakeClock([1e-3], held=[False, True])
    t = timing.time_fn(lambda: None, [()], min_reps=5, max_reps=50, target_s=1.0, clock=clock)
    assert t.queued and len(clock.holds) == 2 and clock.holds[1] > clock.holds[0]
    assert clock.i == 1 + 2 * t.reps                     # the sizing call, then the timed launches twice


def test_time_fn_says_when_the_host_gaps_are_in_the_times():
    clock = FakeClock([1e-3], held=[False, False])
    with pytest.warns(RuntimeWarning, match="host's gaps"):
        t = timing.time_fn(lambda: None, [()], min_reps=5, max_reps=50, target_s=1.0, clock=clock)
    assert not t.queued


def test_time_fn_respects_its_bounds():
    t = timing.time_fn(lambda: None, [()], min_reps=5, max_reps=50, target_s=1.0, clock=FakeClock([1e-4]))
    assert t.reps == 50
    t = timing.time_fn(lambda: None, [()], min_reps=5, max_reps=50, target_s=1.0, clock=FakeClock([5000.0]))
    assert t.reps == 5


def test_buffer_count_defeats_a_warm_l2():
    l2 = 60 * 2**20
    assert timing.buffer_count(512, 512, 512, l2, 80 * 2**30) == 8          # 3 MB a set: as many as allowed
    assert timing.buffer_count(8192, 8192, 8192, l2, 80 * 2**30) == 1       # 768 MB a set
    assert timing.buffer_count(4096, 4096, 4096, l2, 300 * 2**20) == 1      # free memory caps it
