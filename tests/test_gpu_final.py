"""The final kernel on a GPU: helpers.sgemm on every layout against cuBLAS on the same views,
alpha and beta, views and odd shapes, a column-major C, beta = 0 with NaN in C; the per-shape
choice; split-K and stream-K under concurrency and graph capture."""
import os
import subprocess
import sys

import cupy
import pytest

from helpers import hardware
from helpers.runtime.check import compare, random_matrix
from helpers.runtime.gemm import matmul, sgemm
from helpers.runtime.launch import prepare
from helpers.runtime.specs.final import CANDIDATES, SPEC, choose_config
from helpers.settings import ROOT
from helpers.shapes import SUITE, broad_suite

from gpu_configs import fit

pytestmark = pytest.mark.gpu
SPLIT = dict(SPEC.defaults(), BM=128, BN=128, BK=16, STAGES=4, SPLITK=4)


def operands(M, N, K, seed=0):
    rng = cupy.random.default_rng(seed)
    return random_matrix(M, K, rng), random_matrix(K, N, rng)


@pytest.mark.parametrize("shape", list(SUITE) + [(4096,) * 3, (33, 4100, 300), (1, 1, 1)] + broad_suite()[:6],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_chosen_config_matches_cublas(shape):
    A, B = operands(*shape)
    c = compare(matmul(A, B), cupy.matmul(A, B), A, B)
    assert c.ok, c


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_is_deterministic(split):
    params = fit(dict(SPLIT, BK=8, SPLITK=split))
    A, B = operands(640, 384, 3000, seed=1)
    first = matmul(A, B, params)
    for _ in range(3):
        assert bool((matmul(A, B, params) == first).all()), "split-K results differ between runs"
    assert compare(first, cupy.matmul(A, B), A, B).ok


def test_split_k_with_empty_splits():
    # K = 9 is two k-tiles of 8: with 8 splits six blocks per tile have nothing to add
    params = fit(dict(SPEC.defaults(), BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=2, SPLITK=8, GROUP=0))
    A, B = operands(100, 70, 9, seed=2)
    assert compare(matmul(A, B, params), cupy.matmul(A, B), A, B).ok


CONCURRENT = """
import cupy
from helpers.runtime.check import compare, random_matrix
from helpers.runtime.launch import prepare
from helpers import hardware
from helpers.runtime.specs.final import SPEC
p = SPEC.resolve(dict(SPEC.defaults(), BM=128, BN=128, BK=16, STAGES=4, SPLITK=4))
if not SPEC.is_valid(p, hardware.current()):          # an emulated target with less shared memory
    p = SPEC.suggest(p, hardware.current())
M, N, K = 8192, 128, 8192
rng = cupy.random.default_rng(0)
A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
ref = cupy.matmul(A, B)
launch = prepare("final", M, N, K, p)
streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
outs = [cupy.empty((M, N), cupy.float32) for _ in streams]
for rep in range(25):
    for s, C in zip(streams, outs):
        with s:
            launch(A, B, C)
for s in streams:
    s.synchronize()
assert all(bool((C == outs[0]).all()) for C in outs), "concurrent results differ"
assert compare(outs[0], ref, A, B).ok
print("ok")
"""


def test_split_k_on_four_streams_at_once_neither_hangs_nor_mixes_results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_split_k_in_a_cuda_graph():
    M, N, K = 2048, 128, 4096
    A, B = operands(M, N, K, seed=3)
    replay_in_a_graph(prepare("final", M, N, K, fit(SPLIT)), A, B, times=3)


def test_arrival_counters_are_the_streams_own_and_left_zero():
    M, N, K = 2048, 128, 4096
    A, B = operands(M, N, K, seed=11)
    launch, ref = prepare("final", M, N, K, fit(SPLIT)), cupy.matmul(A, B)
    for _ in range(3):
        C = cupy.full((M, N), cupy.nan, cupy.float32)
        launch(A, B, C)
        assert compare(C, ref, A, B).ok
    (counters,) = launch.counters.values()          # one stream: one array, reused
    assert counters.size == launch.ws_sizes[1] and int(counters.max()) == 0


def replay_in_a_graph(launch, A, B, times: int) -> None:
    """Capture one launch in a CUDA graph and replay it ``times`` times, each into a C of NaN
    checked against cuBLAS: the workspace the capture recorded must still be there."""
    C = cupy.empty((A.shape[0], B.shape[1]), cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        launch(A, B, C)                       # warm the memory pool outside the capture
        stream.synchronize()
        stream.begin_capture()
        launch(A, B, C)
        graph = stream.end_capture()
        for _ in range(times):
            C[...] = cupy.nan
            graph.launch(stream)
            stream.synchronize()
            assert compare(C, cupy.matmul(A, B), A, B).ok


LAYOUTS = {"NN": (0, 0), "NT": (0, 1), "TN": (1, 0), "TT": (1, 1)}


def stored(rows, cols, transposed, rng, pad=0):
    """A (rows x cols) float32 view: row-major with `pad` extra columns, or the transpose of a
    (cols x rows) array, padded the same way."""
    r, c = (cols, rows) if transposed else (rows, cols)
    X = random_matrix(r, c + pad, rng)[:, :c]
    return X.T if transposed else X


def close(out, A, B, C0, alpha, beta) -> bool:
    """out against alpha A B + beta C0 (cuBLAS on the same views, TF32 off): within the
    product's bound of compare() times |alpha|, plus a few roundings of the sum."""
    from helpers.runtime.check import tolerance

    ab = cupy.matmul(A, B)
    ref = alpha * ab + (beta * C0 if beta else 0)
    bound = abs(alpha) * cupy.outer(cupy.linalg.norm(A, axis=1), cupy.linalg.norm(B, axis=0)) * tolerance(A.shape[1])
    bound += 4 * float(cupy.finfo(cupy.float32).eps) * (abs(alpha) * cupy.abs(ab) + (abs(beta) * cupy.abs(C0) if beta else 0))
    return bool(cupy.isfinite(out).all()) and bool((cupy.abs(out - ref) <= bound + 1e-30).all())


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape,alpha,beta,pad", [
    ((257, 130, 67), 1.0, 0.0, 0),
    ((1000, 3000, 777), 1.5, 0.0, 3),
    ((129, 4100, 300), -1.0, 0.5, 1),
    ((4097, 33, 1025), 2.0, -1.0, 4),
    ((1, 1, 1), 1.0, 1.0, 0),
    ((2048, 2048, 2048), 1.0, 0.0, 0),
], ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_sgemm_matches_cublas_on_the_same_views(layout, shape, alpha, beta, pad):
    M, N, K = shape
    a_t, b_t = LAYOUTS[layout]
    rng = cupy.random.default_rng(M + N + K)
    A, B = stored(M, K, a_t, rng, pad), stored(K, N, b_t, rng, pad)
    C = random_matrix(M, N + pad, rng)[:, :N] if beta else cupy.full((M, N), cupy.nan, cupy.float32)
    C0 = C.copy()
    out = sgemm(A, B, C, alpha=alpha, beta=beta)
    assert out is C
    assert close(out, A, B, C0, alpha, beta), (layout, shape)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_column_major_c_is_written_in_place(layout):
    M, N, K = 300, 200, 150
    a_t, b_t = LAYOUTS[layout]
    rng = cupy.random.default_rng(5)
    A, B = stored(M, K, a_t, rng), stored(K, N, b_t, rng)
    C = cupy.asfortranarray(random_matrix(M, N, rng))
    C0 = C.copy()
    out = sgemm(A, B, C, alpha=0.5, beta=2.0)
    assert out is C and C.flags.f_contiguous
    assert close(out, A, B, C0, 0.5, 2.0)


def test_beta_zero_never_reads_c():
    rng = cupy.random.default_rng(6)
    A, B = random_matrix(130, 70, rng), random_matrix(70, 90, rng)
    for params in (None, fit(SPLIT), fit(dict(SPEC.defaults(), KU=4, STREAMK=1))):
        C = cupy.full((130, 90), cupy.nan, cupy.float32)
        sgemm(A, B, C, beta=0.0, params=params)
        assert bool(cupy.isfinite(C).all())
        assert compare(C, cupy.matmul(A, B), A, B).ok


def test_views_four_bytes_off_alignment():
    rng = cupy.random.default_rng(7)
    big = random_matrix(600, 801, rng)
    A, B = big[1:257, 1:130], big[300:429, 5:598]          # start 4 (or 20) bytes past a 16-byte boundary
    C = cupy.full((260, 600), cupy.nan, cupy.float32)[3:259, 1:594]
    out = sgemm(A, B, C)
    assert compare(out, cupy.matmul(A, B), A, B).ok


@pytest.mark.parametrize("variant", [dict(KU=4), dict(KU=8), dict(KU=4, STREAMK=1), dict(STREAMK=1),
                                     dict(BM=256, BN=128, KU=4, STREAMK=1), dict(KU=4, STREAMK=1, A_T=1, B_T=1)],
                         ids=str)
def test_inner_loop_and_stream_k_variants(variant):
    for shape in ((4096, 4096, 512), (1000, 3000, 777), (129, 131, 5000)):
        M, N, K = shape
        rng = cupy.random.default_rng(8)
        A = stored(M, K, variant.get("A_T", 0), rng)
        B = stored(K, N, variant.get("B_T", 0), rng)
        out = sgemm(A, B, params=fit(dict(SPEC.defaults(), **variant)))
        assert compare(out, cupy.matmul(A, B), A, B).ok, (variant, shape)


@pytest.mark.parametrize("option", [dict(), dict(SPLITK=3), dict(SPLITK=4, REDUCE=1)], ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", [c.name for c in CANDIDATES])
def test_every_candidate_matches_cublas_off_its_tiles(name, layout, option):
    # each block and warp arrangement the dispatcher may choose, plain, split and as slabs, in
    # every layout, at a shape that is no multiple of any tile and with rows 4 bytes off alignment
    a_t, b_t = LAYOUTS[layout]
    params = fit(dict(next(c for c in CANDIDATES if c.name == name).params, A_T=a_t, B_T=b_t, **option))
    M, N, K = 333, 270, 517
    rng = cupy.random.default_rng(M + N)
    A, B = stored(M, K, a_t, rng, pad=1), stored(K, N, b_t, rng, pad=3)
    C = random_matrix(M, N, rng)
    C0 = C.copy()
    assert close(sgemm(A, B, C, alpha=0.75, beta=-1.5, params=params), A, B, C0, 0.75, -1.5), params


@pytest.mark.parametrize("option", [dict(), dict(SPLITK=3), dict(SPLITK=4, REDUCE=1), dict(STREAMK=1)], ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", [c.name for c in CANDIDATES])
def test_edge_tiles_moved_back_match_cublas(name, layout, option):
    # EDGES = 1: tiles over the last row and column of C move back to end at M and N (by other
    # than a multiple of 4 on unaligned shapes); beta reads each element of C once, so a second
    # store of the overlap would show
    a_t, b_t = LAYOUTS[layout]
    params = dict(next(c for c in CANDIDATES if c.name == name).params, A_T=a_t, B_T=b_t, EDGES=1, **option)
    if not SPEC.is_valid(params):
        pytest.skip("not a config the rules allow")
    for M, N, K, pad in ((333, 270, 517, 3), (331, 258, 517, 0), (4096 + 1, 256 + 4, 300, 1)):
        rng = cupy.random.default_rng(M + N + pad)
        A, B = stored(M, K, a_t, rng, pad=pad), stored(K, N, b_t, rng, pad=pad)
        C = random_matrix(M, N, rng)
        C0 = C.copy()
        assert close(sgemm(A, B, C, alpha=0.75, beta=-1.5, params=fit(params)), A, B, C0, 0.75, -1.5), (params, M, N)


@pytest.mark.parametrize("name", ["large", "medium"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_stream_k_on_the_128_result_candidates(name, layout):
    # their segments start their copies at the segment's first k-tile (kernels/12_final.cu, FOLD)
    a_t, b_t = LAYOUTS[layout]
    params = SPEC.resolve(dict(next(c for c in CANDIDATES if c.name == name).params, STREAMK=1, A_T=a_t, B_T=b_t))
    if not SPEC.is_valid(params, hardware.current()):
        pytest.skip(f"{name} with stream-K in {layout}: {SPEC.problems(params, hardware.current())}")
    for (M, N, K), alpha, beta in (((1000, 3000, 777), 1.0, 0.0), ((129, 131, 5000), -0.5, 2.0),
                                   ((4097, 257, 1025), 1.0, 1.0)):
        rng = cupy.random.default_rng(M + K)
        A, B = stored(M, K, a_t, rng), stored(K, N, b_t, rng)
        C = random_matrix(M, N, rng) if beta else cupy.full((M, N), cupy.nan, cupy.float32)
        C0 = C.copy()
        assert close(sgemm(A, B, C, alpha=alpha, beta=beta, params=params), A, B, C0, alpha, beta), (M, N, K)


def test_stream_k_is_deterministic():
    rng = cupy.random.default_rng(9)
    A, B = random_matrix(1500, 2000, rng), random_matrix(2000, 1700, rng)
    params = fit(dict(SPEC.defaults(), KU=4, STREAMK=1))
    first = sgemm(A, B, params=params)
    for _ in range(3):
        assert bool((sgemm(A, B, params=params) == first).all())


def test_errors_name_the_fix_on_the_gpu():
    rng = cupy.random.default_rng(10)
    A = random_matrix(64, 32, rng)
    with pytest.raises(ValueError, match="negative stride"):
        sgemm(A[::-1], random_matrix(32, 16, rng))
    with pytest.raises(ValueError, match="two non-unit strides"):
        sgemm(A[::2, ::2], random_matrix(16, 16, rng))
    with pytest.raises(TypeError, match="float32"):
        sgemm(A.astype(cupy.float64), random_matrix(32, 16, rng))
    with pytest.raises(ValueError, match="no C was given"):
        sgemm(A, random_matrix(32, 16, rng), beta=1.0)


def test_choice_uses_the_device():
    d = hardware.current()
    p = choose_config(4096, 4096, 4096, d)
    assert SPEC.is_valid(p, d)


# ---------------------------------------------------------------- packing
@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("transposed", [0, 1])
@pytest.mark.parametrize("R,K,pad", [(1, 1, 0), (33, 70, 3), (257, 129, 1), (4, 2_200_000, 0)],
                         ids=lambda x: str(x))
def test_pack_copies_every_element_k_major(operand, transposed, R, K, pad):
    # (4, 2.2M): more k-tiles of 32 than a grid's y may have, so blocks walk K in strides
    from helpers.runtime import pack

    rng = cupy.random.default_rng(R + K)
    X = stored(R, K, transposed, rng, pad) if operand == "A" else stored(K, R, transposed, rng, pad)
    dst = cupy.full(8 + pack.floats(R, K) + 8, cupy.nan, cupy.float32)
    assert pack.pack(X, operand, dst, offset=8) == pack.row_floats(R)
    got = pack.packed_view(operand, dst, R, K, offset=8)
    assert got.shape == X.shape and bool((got == X).all())
    assert bool(cupy.isnan(dst[:8]).all()) and bool(cupy.isnan(dst[8 + pack.floats(R, K):]).all()), \
        "wrote outside its rows"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("packs", [(1, 0), (0, 1), (1, 1)], ids=lambda p: "pack" + "A" * p[0] + "B" * p[1])
@pytest.mark.parametrize("extra", [dict(), dict(SPLITK=4, BM=128, BN=128, BK=16, STAGES=4),
                                   dict(STREAMK=1, BM=128, BN=64, WN=32, TM=8, TN=8, BK=16, STAGES=4)],
                         ids=["plain", "splitk", "streamk"])
def test_packed_operands_match_cublas(layout, packs, extra):
    a_t, b_t = LAYOUTS[layout]
    pa, pb = packs
    params = fit(dict(SPEC.defaults(), **extra, PACK_A=pa, PACK_B=pb, A_T=1 if pa else a_t, B_T=0 if pb else b_t))
    for (M, N, K), alpha, beta, pad in (((1000, 3001, 777), 1.0, 0.0, 3), ((129, 4099, 300), -1.5, 0.5, 1),
                                        ((4097, 33, 1025), 1.0, 0.0, 0)):
        rng = cupy.random.default_rng(M + N + K)
        A, B = stored(M, K, a_t, rng, pad), stored(K, N, b_t, rng, pad)
        C = random_matrix(M, N + pad, rng)[:, :N] if beta else cupy.full((M, N), cupy.nan, cupy.float32)
        C0 = C.copy()
        assert close(sgemm(A, B, C, alpha=alpha, beta=beta, params=params), A, B, C0, alpha, beta), (M, N, K)


def test_packing_in_a_cuda_graph():
    # the packed copies live in the launch's workspace: a graph replay must find them there
    M, N, K = 1000, 999, 1500
    A, B = operands(M, N, K, seed=11)
    replay_in_a_graph(prepare("final", M, N, K, fit(dict(SPEC.defaults(), A_T=1, PACK_A=1, PACK_B=1))), A, B,
                      times=2)


def test_layouts_run_checks_and_times_every_layout():
    from helpers.measure import bench

    rows = bench.run_layouts(sizes=(257,), target_s=0.01, log=lambda *a: None)
    assert [r["layout"] for r in rows] == list(bench.LAYOUTS)
    for r in rows:
        assert r["status"] == "measured" and r["ok"] and r["rel_err"] < 1e-5, r
        assert r["tflops"] > 0 and r["cublas_tflops"] > 0 and r["pct_cublas"] == pytest.approx(
            100 * r["tflops"] / r["cublas_tflops"])
        a_t, b_t = (op == "T" for op in r["layout"])   # the kernel reads each operand as it lies, or packed
        assert r["params"]["A_T"] == (1 if r["params"]["PACK_A"] else a_t)
        assert r["params"]["B_T"] == (0 if r["params"]["PACK_B"] else b_t)


def test_tune_picks_a_config_that_sgemm_runs_correctly(tmp_path, monkeypatch):
    # helpers.tune on this GPU: times the model's first options, remembers the fastest
    from helpers.runtime.tune import tune

    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path))
    monkeypatch.delenv("SGEMM_BOOK_TARGET", raising=False)      # it times the GPU present
    lines = []
    params = tune(300, 200, 1501, top=3, log=lines.append)
    assert len(lines) == 4 and lines[-1].startswith("fastest: ")
    assert tune(300, 200, 1501, top=3, log=lines.append) == params and "tuned before" in lines[-1]
    A, B = operands(300, 200, 1501, seed=5)
    assert compare(sgemm(A, B, params=params), cupy.matmul(A, B), A, B).ok
