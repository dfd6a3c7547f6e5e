"""The wgmma kernels of kernels/15_wgmma.cu against cuBLAS (GPU only: ``pytest -m gpu``; they
run on compute capability 9.0 alone, and skip elsewhere).

* ``wgmma_tf32x3`` must meet the book's float32 bound (helpers/runtime/check.py) against
  cuBLAS FP32, on odd shapes, K not a multiple of the k-tile, and operands whose magnitudes
  span six orders.
* ``wgmma_tf32``: the tensor cores read a float32 as TF32 by dropping its low 13 bits. Against
  the product of the *truncated* operands (in float64) it must meet the float32 bound itself;
  against the float32 product, the bound of truncation: each operand moves by at most
  2u = 2^-10 of itself, so |C - AB|[i, j] <= (4u + 8 eps sqrt(K)) ||A[i, :]|| ||B[:, j]||.
"""
import math

import cupy
import numpy as np
import pytest

from helpers import hardware
from helpers.measure import tensor_cores as tc
from helpers.models import tf32
from helpers.runtime.check import compare, tolerance
from helpers.runtime.launch import matmul
from helpers.runtime.specs import get
from helpers.runtime.specs.wgmma import CC, VARIANTS_OF

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (128, 256, 32), (1000, 3000, 777), (33, 4100, 300),
          (257, 383, 4096), (1024, 1024, 1024)]
CONFIGS = [(name, v) for name in VARIANTS_OF for v in VARIANTS_OF[name]]


@pytest.fixture(autouse=True)
def hopper_here():
    if hardware.current().cc_tuple != CC or hardware.current().emulated:
        pytest.skip(f"{hardware.current().label}: wgmma runs on compute capability 9.0 only")


def truncated(X):
    return (X.view(cupy.uint32) & cupy.uint32(0xFFFFE000)).view(cupy.float32)


def operands(M, N, K, seed, wide=False):
    return tc.operands(M, N, K, seed=seed, wide=wide)


@pytest.mark.parametrize("name,params", CONFIGS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_against_cublas(name, params, shape):
    M, N, K = shape
    A, B = operands(M, N, K, seed=M * 7 + N * 3 + K)
    C = matmul(name, A, B, params)
    assert not cupy.isnan(C).any(), "elements never written"
    if get(name).precision == "fp32":
        c = compare(C, cupy.matmul(A, B), A, B)
        assert c.ok, c
    else:
        At, Bt = truncated(A), truncated(B)
        ref = cupy.matmul(At.astype(cupy.float64), Bt.astype(cupy.float64)).astype(cupy.float32)
        c = compare(C, ref, At, Bt)
        assert c.ok, c
        diff = cupy.abs(C - cupy.matmul(A, B))
        bound = cupy.outer(cupy.linalg.norm(A, axis=1), cupy.linalg.norm(B, axis=0)) * (
            4 * tf32.UNIT + 8 * 2.0 ** -23 * math.sqrt(K))
        assert bool((diff <= bound).all())


@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 3000, 777), (512, 512, 8192)], ids=str)
def test_3xtf32_on_operands_spanning_six_orders(shape):
    M, N, K = shape
    A, B = operands(M, N, K, seed=K, wide=True)
    c = compare(matmul("wgmma_tf32x3", A, B), cupy.matmul(A, B), A, B)
    assert c.ok, c


def test_3xtf32_is_more_accurate_than_tf32():
    A, B = operands(512, 512, 4096, seed=5)
    ref = cupy.matmul(A, B)
    e1 = float(cupy.abs(matmul("wgmma_tf32", A, B) - ref).max())
    e3 = float(cupy.abs(matmul("wgmma_tf32x3", A, B) - ref).max())
    assert e3 < e1 / 100 and compare(matmul("wgmma_tf32x3", A, B), ref, A, B).rel_err <= tolerance(4096)


def test_misaligned_a_and_a_strided_view():
    A, B = operands(130, 70, 45, seed=3)
    A1 = cupy.empty(130 * 45 + 1, dtype=cupy.float32)[1:].reshape(130, 45)
    A1[...] = A                                                   # starts 4 bytes past 16
    assert A1.data.ptr % 16
    c = compare(matmul("wgmma_tf32x3", A1, B), cupy.matmul(A, B), A, B)
    assert c.ok, c
    with pytest.raises(ValueError, match="C-contiguous"):
        matmul("wgmma_tf32x3", cupy.asfortranarray(A), B)


def test_results_do_not_move_between_runs():
    A, B = operands(1000, 1000, 1000, seed=9)
    first = matmul("wgmma_tf32x3", A, B)
    np.testing.assert_array_equal(cupy.asnumpy(first), cupy.asnumpy(matmul("wgmma_tf32x3", A, B)))
