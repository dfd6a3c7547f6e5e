"""The final kernel on a GPU: the per-shape choice, split-K under concurrency and graph capture."""
import os
import subprocess
import sys

import cupy
import pytest

from helpers import hardware
from helpers.runtime.check import compare, random_matrix
from helpers.runtime.gemm import matmul
from helpers.runtime.launch import prepare
from helpers.runtime.specs.final import SPEC, choose_config
from helpers.settings import ROOT
from helpers.shapes import SUITE, broad_suite

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    hardware.gpu_available() and not hardware.current().has_cp_async,
    reason="the final kernel uses cp.async (compute capability 8.0); this target has none")]
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
    params = dict(SPLIT, BK=8, SPLITK=split)
    A, B = operands(640, 384, 3000, seed=1)
    first = matmul(A, B, params)
    for _ in range(3):
        assert bool((matmul(A, B, params) == first).all()), "split-K results differ between runs"
    assert compare(first, cupy.matmul(A, B), A, B).ok


def test_split_k_with_empty_splits():
    # K = 9 is two k-tiles of 8: with 8 splits six blocks per tile have nothing to add
    params = dict(SPEC.defaults(), BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=2, SPLITK=8, GROUP=0)
    A, B = operands(100, 70, 9, seed=2)
    assert compare(matmul(A, B, params), cupy.matmul(A, B), A, B).ok


CONCURRENT = """
import cupy
from helpers.runtime.check import compare, random_matrix
from helpers.runtime.launch import prepare
from helpers.runtime.specs.final import SPEC
p = dict(SPEC.defaults(), BM=128, BN=128, BK=16, STAGES=4, SPLITK=4)
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
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_split_k_in_a_cuda_graph():
    M, N, K = 2048, 128, 4096
    A, B = operands(M, N, K, seed=3)
    launch = prepare("final", M, N, K, SPLIT)
    C = cupy.empty((M, N), cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        launch(A, B, C)                       # warm the memory pool outside the capture
        stream.synchronize()
        stream.begin_capture()
        launch(A, B, C)
        graph = stream.end_capture()
        for _ in range(3):
            C[...] = cupy.nan
            graph.launch(stream)
            stream.synchronize()
            assert compare(C, cupy.matmul(A, B), A, B).ok


def test_choice_uses_the_device():
    d = hardware.current()
    p = choose_config(4096, 4096, 4096, d)
    assert SPEC.is_valid(p, d)
