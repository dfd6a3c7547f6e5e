"""helpers.sgemm as a library call on a GPU: batches against cupy.matmul (broadcasting, views,
split-K, more products than a grid holds), the BLAS edge cases (an empty C, K = 0, alpha = 0),
operands of 2^31 elements or more, and the plans and workspaces a loop of calls reuses (on several
streams at once, from several threads at once and in a CUDA graph), a call's kernels launched as
one graph against one by one, and the launch through CuPy's Function where its driver launch is
missing."""
import os
import subprocess
import sys

import cupy
import pytest

from helpers.runtime import gemm, graphs
from helpers.runtime.check import compare, random_matrix, tolerance
from helpers.runtime.gemm import sgemm
from helpers.runtime.specs.final import SPEC
from helpers.settings import ROOT

from gpu_configs import fit

pytestmark = pytest.mark.gpu


def batch(count, rows, cols, rng):
    return rng.uniform(-1.0, 1.0, size=(count, rows, cols), dtype=cupy.float32)


def each_product_matches(out, A, B):
    """Every product of a batch against cupy.matmul on the same views (the project's bound)."""
    ref = cupy.matmul(A, B)
    assert out.shape == ref.shape
    for z in range(out.shape[0]):
        a = A[min(z, A.shape[0] - 1)] if A.ndim == 3 else A
        b = B[min(z, B.shape[0] - 1)] if B.ndim == 3 else B
        c = compare(out[z], ref[z], a, b)
        assert c.ok, (z, c)


@pytest.mark.parametrize("shape", [(7, 65, 129, 33), (3, 1000, 300, 777), (64, 128, 128, 128), (2, 5, 4100, 3),
                                   (256, 33, 17, 2000)], ids=lambda s: "x".join(map(str, s)))
def test_a_batch_matches_cupy_matmul(shape):
    n, M, N, K = shape
    rng = cupy.random.default_rng(sum(shape))
    A, B = batch(n, M, K, rng), batch(n, K, N, rng)
    each_product_matches(gemm.matmul(A, B), A, B)


def test_broadcasting_as_cupy_matmul_does():
    rng = cupy.random.default_rng(1)
    A, B = batch(5, 70, 50, rng), random_matrix(50, 90, rng)
    each_product_matches(sgemm(A, B), A, B)                       # B for every product
    each_product_matches(sgemm(B.T[None], A.transpose(0, 2, 1)), B.T[None], A.transpose(0, 2, 1))
    B3 = batch(4, 50, 30, rng)
    each_product_matches(sgemm(A[:1], B3), A[:1], B3)              # a batch of 1 against a batch of 4


def test_batches_of_views_transposes_and_a_column_major_c():
    rng = cupy.random.default_rng(2)
    big = batch(6, 130, 140, rng)
    A = big[::2, 1:101, 3:80]                                       # every other product, rows 4 bytes off
    B = batch(3, 90, 77, rng).transpose(0, 2, 1)                    # each product a transposed view
    C = cupy.full((3, 90, 100), cupy.nan, cupy.float32).transpose(0, 2, 1)   # each product column-major
    out = sgemm(A, B, C)
    assert out is C
    each_product_matches(C, A, B)
    R = batch(3, 100, 77, rng)[::-1]                                # a negative batch stride
    each_product_matches(sgemm(R, B), R, B)


def test_a_batch_with_alpha_beta_and_a_split_of_k():
    rng = cupy.random.default_rng(3)
    A, B = batch(4, 100, 3000, rng), batch(4, 3000, 70, rng)
    C = batch(4, 100, 70, rng)
    C0 = C.copy()
    params = dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=3)
    sgemm(A, B, C, alpha=0.5, beta=-2.0, params=params)
    ab = cupy.matmul(A, B)
    for z in range(4):       # the product's bound (as compare's) times alpha, and a few roundings of the sum
        ref = 0.5 * ab[z] - 2.0 * C0[z]
        bound = 0.5 * cupy.outer(cupy.linalg.norm(A[z], axis=1), cupy.linalg.norm(B[z], axis=0)) * tolerance(3000)
        bound += 4 * 2**-23 * (0.5 * cupy.abs(ab[z]) + 2.0 * cupy.abs(C0[z]))
        assert bool((cupy.abs(C[z] - ref) <= bound).all()), z
    once = sgemm(A, B, params=params)
    assert bool((once == sgemm(A, B, params=params)).all()), "split-K batches are not reproducible"
    each_product_matches(once, A, B)


def test_more_products_than_a_grid_holds():
    rng = cupy.random.default_rng(4)
    A, B = batch(70_000, 5, 6, rng), batch(70_000, 6, 7, rng)
    params = dict(SPEC.defaults(), BM=32, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3, SPLITK=2)
    out = sgemm(A, B, params=params)
    assert len(gemm.plan_for(A, B, params=params).launches) == 3     # 32767 products per launch at most
    ref = cupy.matmul(A, B)
    assert bool(cupy.isfinite(out).all())
    assert float(cupy.abs(out - ref).max()) <= 8 * 2**-23 * 6 * 6        # 6 terms of at most 1 in magnitude


# ---------------------------------------------------------------- BLAS at the edges
@pytest.mark.parametrize("beta", [0.0, 1.0, -2.5])
def test_k_zero_gives_beta_times_c(beta):
    A, B = cupy.empty((30, 0), cupy.float32), cupy.empty((0, 20), cupy.float32)
    C = random_matrix(30, 20)
    if beta == 0:
        C[3, 4] = cupy.nan                                          # BLAS writes zeros over NaN
    C0 = C.copy()
    assert sgemm(A, B, C, beta=beta) is C
    expected = cupy.zeros_like(C0) if beta == 0 else beta * C0
    assert bool((C == expected).all())
    assert bool((sgemm(A, B) == 0).all()) and sgemm(A, B).shape == (30, 20)


def test_alpha_zero_reads_neither_a_nor_b():
    A, B = cupy.full((30, 10), cupy.nan, cupy.float32), cupy.full((10, 20), cupy.nan, cupy.float32)
    C = random_matrix(30, 20)
    C0 = C.copy()
    sgemm(A, B, C, alpha=0.0, beta=0.5)
    assert bool((C == 0.5 * C0).all())


def test_an_empty_c_returns_at_once():
    C = cupy.empty((0, 20), cupy.float32)
    assert sgemm(cupy.empty((0, 7), cupy.float32), random_matrix(7, 20), C, beta=1.0) is C
    assert sgemm(random_matrix(5, 7), cupy.empty((7, 0), cupy.float32)).shape == (5, 0)
    assert sgemm(cupy.empty((0, 5, 7), cupy.float32), random_matrix(7, 3)).shape == (0, 5, 3)


# ---------------------------------------------------------------- 64-bit offsets
ROWS = 2**21 + 37          # x 1024 columns: 2^31 + 37 x 1024 elements (8.6 GB)


def rows_match(C, ref, A, B, rows) -> None:
    c = compare(C[rows], ref[rows], A[rows], B)
    assert c.ok, c


@pytest.mark.parametrize("a_t", [0, 1], ids=["A", "A^T"])
def test_an_a_of_more_than_two_to_the_31_elements(a_t):
    rng = cupy.random.default_rng(5)
    A = random_matrix(1024, ROWS, rng).T if a_t else random_matrix(ROWS, 1024, rng)
    assert A.size >= 2**31
    B = random_matrix(1024, 64, rng)
    C = sgemm(A, B)
    assert not bool(cupy.isnan(C).any())
    ref = cupy.matmul(A, B)
    for rows in (slice(0, 2048), slice(ROWS - 2048, ROWS)):        # offsets below and beyond 2^31
        rows_match(C, ref, A, B, rows)
    del A, C, ref


def test_a_c_of_more_than_two_to_the_31_elements():
    rng = cupy.random.default_rng(6)
    A, B = random_matrix(ROWS, 16, rng), random_matrix(16, 1024, rng)
    C = cupy.full((ROWS, 1024), cupy.nan, cupy.float32)
    sgemm(A, B, C)
    assert not bool(cupy.isnan(C).any())
    ref = cupy.matmul(A, B)
    for rows in (slice(0, 2048), slice(ROWS - 2048, ROWS)):
        rows_match(C, ref, A, B, rows)
    del C, ref


# ---------------------------------------------------------------- plans and workspaces
def test_a_loop_of_calls_plans_once_and_every_result_is_right(monkeypatch):
    made, plan = [], gemm.Plan
    monkeypatch.setattr(gemm, "Plan", lambda *a, **k: made.append(a) or plan(*a, **k))
    gemm.clear_plans()
    rng = cupy.random.default_rng(7)
    split = dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=4)
    for params in (None, split):
        sets = [(random_matrix(100, 2000, rng), random_matrix(2000, 70, rng),
                 cupy.full((100, 70), cupy.nan, cupy.float32)) for _ in range(8)]
        for _ in range(3):
            for A, B, C in sets:
                sgemm(A, B, C, params=params)                       # one sync, at the end
        for A, B, C in sets:
            assert compare(C, cupy.matmul(A, B), A, B).ok
    assert len(made) == 2


CONCURRENT = """
import cupy
from helpers.runtime.check import compare, random_matrix, tolerance
from helpers.runtime.gemm import sgemm
from helpers import hardware
from helpers.runtime.specs.final import SPEC
rng = cupy.random.default_rng(0)
M, N, K = 4096, 128, 8192
A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
ref = cupy.matmul(A, B)
# (an emulated target with less shared memory: the nearest config it allows)
params = SPEC.fitting(dict(SPEC.defaults(), BM=128, BN=128, BK=16, STAGES=4, SPLITK=4), hardware.current())
streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
outs = [cupy.empty((M, N), cupy.float32) for _ in streams]
for rep in range(25):
    for s, C in zip(streams, outs):
        with s:
            sgemm(A, B, C, params=params)
            sgemm(A[:, :4096], B[:4096], params=params)      # another plan, the same stream's workspace
for s in streams:
    s.synchronize()
assert all(bool((C == outs[0]).all()) for C in outs), "concurrent results differ"
assert compare(outs[0], ref, A, B).ok
print("ok")
"""


def test_split_k_calls_on_four_streams_keep_their_workspaces_apart():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("params", [dict(SPLITK=4, BM=128, BN=128, BK=16, STAGES=4),
                                    dict(A_T=1, PACK_A=1, PACK_B=1), dict(SPLITK=8, REDUCE=1, BM=64, BN=64, WM=32,
                                                                          WN=32, TM=4, TN=8, BK=16, STAGES=3)],
                         ids=["splitk", "packed", "slabs"])
def test_calls_in_a_cuda_graph_keep_their_workspace(params):
    rng = cupy.random.default_rng(8)
    A, B = random_matrix(1000, 1500, rng), random_matrix(1500, 999, rng)
    p = fit(dict(SPEC.defaults(), **params))
    C = cupy.empty((1000, 999), cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        sgemm(A, B, C, params=p)
        stream.synchronize()
        stream.begin_capture()
        sgemm(A, B, C, params=p)
        graph = stream.end_capture()
        sgemm(A[:500], B, params=p)                 # the stream's own workspace, used again after the capture
        for _ in range(2):
            C[...] = cupy.nan
            graph.launch(stream)
            stream.synchronize()
            assert compare(C, cupy.matmul(A, B), A, B).ok


THREADS = """
import threading
import cupy
from helpers.runtime.check import compare, random_matrix
from helpers.runtime.gemm import sgemm
from helpers.runtime.specs.final import SPEC
rng = cupy.random.default_rng(1)
params = [None, dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=4),
          dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, SPLITK=8, REDUCE=1)]
work = [(p, [(random_matrix(100, 3000, rng), random_matrix(3000, 70, rng), cupy.empty((100, 70), cupy.float32))
             for _ in range(6)]) for p in params]
for p, sets in work:                                   # every plan made here, before the threads start
    sgemm(*sets[0], params=p)
cupy.cuda.Device().synchronize()
failed = []

def calls(p, A, B, C, own_stream):
    try:
        stream = cupy.cuda.Stream(non_blocking=True) if own_stream else cupy.cuda.Stream.null
        with stream:
            for _ in range(200):
                sgemm(A, B, C, params=p)
        stream.synchronize()
    except Exception as e:
        failed.append(repr(e))

# per plan, six threads (two on the null stream, four on their own) call it at once, each with its
# own operands; the threads have made no CUDA call before
threads = [threading.Thread(target=calls, args=(p, A, B, C, i >= 2))
           for p, sets in work for i, (A, B, C) in enumerate(sets)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not failed, failed
for p, sets in work:
    for A, B, C in sets:
        assert compare(C, cupy.matmul(A, B), A, B).ok, p
print("ok")
"""


def test_threads_calling_the_same_plans_at_once_get_their_own_results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


SMALL = dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3)
PATHS = {"plain": SMALL, "split-K": dict(SMALL, SPLITK=4), "slabs": dict(SMALL, SPLITK=8, REDUCE=1),
         "packed": dict(SPEC.defaults(), A_T=1, PACK_A=1, PACK_B=1), "batched": None}


@pytest.mark.parametrize("path", PATHS)
def test_a_graph_launch_gives_every_call_its_own_operands(path, monkeypatch):
    # calls queued back to back through the plan's graph, each with other operands, alpha and beta:
    # each node's parameters are set before each launch, and a launch already queued keeps its own.
    # The results are the same bits as the same calls launched kernel by kernel.
    if not graphs.available():
        pytest.skip("this driver has no graph functions: calls launch kernel by kernel")
    rng = cupy.random.default_rng(12)
    shapes = [(5, 70, 300), (300, 90)] if path == "batched" else [(333, 1000), (1000, 301)]
    sets = [(rng.uniform(-1, 1, size=shapes[0], dtype=cupy.float32),
             rng.uniform(-1, 1, size=shapes[1], dtype=cupy.float32)) for _ in range(4)]
    C0 = [rng.uniform(-1, 1, size=sets[0][0].shape[:-1] + (shapes[1][1],), dtype=cupy.float32) for _ in sets]
    scalars = [(1.0, 0.0), (0.5, 2.0), (-1.5, 1.0), (2.0, -0.25)]
    p = PATHS[path] and fit(PATHS[path])
    out = {}
    for use_graphs in (True, False):
        monkeypatch.setattr(gemm, "USE_GRAPHS", use_graphs)
        gemm.clear_plans()
        try:
            Cs = [c.copy() for c in C0]
            for (A, B), C, (alpha, beta) in zip(sets, Cs, scalars):
                sgemm(A, B, C, alpha=alpha, beta=beta, params=p)          # no synchronisation in between
            cupy.cuda.Device().synchronize()
            plan = gemm.plan_for(*sets[0], Cs[0], p)
            assert bool(plan.graph(cupy.cuda.get_current_stream())) == use_graphs
            out[use_graphs] = Cs
        finally:
            gemm.clear_plans()
    for (A, B), C, C_in, (alpha, beta), D in zip(sets, out[True], C0, scalars, out[False]):
        ref = alpha * cupy.matmul(A, B) + beta * C_in
        assert float(cupy.abs(C - ref).max()) <= 1e-5 * float(cupy.abs(ref).max()), (alpha, beta)
        assert bool(cupy.all(C == D)), "a graph launch and kernel-by-kernel launches differ"


def test_a_graph_dropped_while_its_launch_waits_still_computes_it():
    # a stream per call: each new stream's graph drops the oldest while that stream still waits
    # on the GPU; the driver frees a dropped graph only after its launch has run
    if not graphs.available():
        pytest.skip("this driver has no graph functions: calls launch kernel by kernel")
    from helpers.runtime.timing import hold_gpu
    gemm.clear_plans()
    rng = cupy.random.default_rng(13)
    slabs = PATHS["slabs"]
    A, B = random_matrix(200, 900, rng), random_matrix(900, 150, rng)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(gemm.STREAM_GRAPHS + 4)]
    Cs = []
    for i, stream in enumerate(streams):
        with stream:
            hold_gpu(0.05)
            Cs.append(sgemm(A, B, alpha=float(i + 1), params=slabs))
    plan = gemm.plan_for(A, B, None, slabs)
    assert len(plan.graphs) == gemm.STREAM_GRAPHS
    cupy.cuda.Device().synchronize()
    ref = cupy.matmul(A, B)
    for i, C in enumerate(Cs):
        assert float(cupy.abs(C - (i + 1) * ref).max()) <= 1e-5 * (i + 1) * float(cupy.abs(ref).max()), i
    gemm.clear_plans()


def test_without_the_drivers_launch_calls_go_through_cupys_function(monkeypatch):
    # the path of a CuPy without driver.launchKernel (and so without graphs here): the same
    # parameters, launched by CuPy
    monkeypatch.setattr(gemm, "_launch_kernel", None)
    monkeypatch.setattr(gemm, "USE_GRAPHS", False)
    gemm.clear_plans()
    rng = cupy.random.default_rng(9)
    small = dict(SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3)
    A, B = random_matrix(100, 3000, rng), random_matrix(3000, 70, rng)
    try:
        for params in (small, dict(small, SPLITK=4), dict(small, SPLITK=8, REDUCE=1)):
            assert compare(sgemm(A, B, params=params), cupy.matmul(A, B), A, B).ok, params
        P, Q = random_matrix(1000, 777, rng), random_matrix(999, 777, rng).T
        packed = fit(dict(SPEC.defaults(), A_T=1, PACK_A=1, PACK_B=1))
        assert compare(sgemm(P, Q, params=packed), cupy.matmul(P, Q), P, Q).ok
        X, Y = batch(6, 70, 50, rng), random_matrix(50, 90, rng)
        each_product_matches(sgemm(X, Y), X, Y)
    finally:
        gemm.clear_plans()


def test_the_calls_benchmark_checks_and_times_both_libraries():
    from helpers.measure import calls

    rows = calls.run(shapes=[(None, 128, 128, 128, False), (8, 64, 64, 64, True)], calls=20, rounds=2,
                     log=lambda *a: None)
    for r in rows:
        assert r["status"] == "measured" and r["ok"] and r["rel_err"] < 1e-5, r
        assert min(r["ms"], r["cublas_ms"], r["host_us"], r["cublas_host_us"], r["loop_us"], r["cublas_loop_us"]) > 0
        assert r["pct_loop"] == pytest.approx(100 * r["cublas_loop_us"] / r["loop_us"])
        assert r["first_call_ms"] > r["host_us"] / 1e3          # a first call plans; a later one does not
        assert 0 < r["launch_floor_us"] < r["host_us"]          # a call costs more than an empty launch
        assert r["direct_launch_us"] > 0 and r["graph"] == graphs.available()
    assert rows[1]["path"].startswith("batched") and rows[1]["launches"] == 1
