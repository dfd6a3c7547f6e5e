"""GPU checks specific to chapter "Global-memory coalescing" (run with ``pytest -m gpu``).

The generic test covers the defaults and TEST_CONFIGS against cuBLAS; here: both
grid orders give the very same C (each element is summed in the same order), and
the block-schedule trace records every block once.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("bx,by", [(64, 4), (8, 8), (32, 32)])
def test_grid_order_does_not_change_a_single_bit(bx, by):
    import cupy

    from helpers.check import random_matrix
    from helpers.launch import matmul

    rng = cupy.random.default_rng(3)
    M, N, K = 127, 300, 65
    A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
    C0 = matmul("coalesced", A, B, {"BX": bx, "BY": by, "SWAP": 0})
    C1 = matmul("coalesced", A, B, {"BX": bx, "BY": by, "SWAP": 1})
    assert bool(cupy.isfinite(C0).all())
    assert bool((C0 == C1).all())


@pytest.mark.parametrize("swap", [0, 1])
def test_schedule_trace_records_every_block(swap):
    import cupy

    from helpers import coalescing as co

    p = {"BX": 64, "BY": 4, "SWAP": swap}
    n = 512
    trace, ms, err = co.trace_schedule(p, n)
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    assert trace.shape == ((n // 64) * (n // 4), 3)
    assert err < 1e-5 and ms > 0
    assert (trace[:, 2] >= trace[:, 1]).all() and (trace[:, 1] > 0).all()
    assert int(trace[:, 0].max()) < sms
    s = co.schedule_summary(trace, p, n, n, n)
    assert s["blocks"] == len(trace) and s["median"]["in_flight"] >= 1
