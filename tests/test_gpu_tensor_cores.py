"""The tensor-core kernels of kernels/14_tf32.cu against cuBLAS (GPU only: ``pytest -m gpu``).

* ``tf32x3`` must meet the book's float32 bound (helpers/runtime/check.py) against cuBLAS
  FP32, on the shapes every kernel is checked on and on operands whose magnitudes span six
  orders.
* ``tf32`` rounds its operands to TF32, so it cannot meet that bound against the float32
  product. Two checks replace it. (1) Against the product of its *rounded* operands it must
  meet the float32 bound itself: the tensor cores multiply TF32 values exactly and add in
  float32. (2) Against the float32 product, the bound of TF32's input rounding: each operand
  moves by at most u = 2^-11 of itself, so a product a*b by at most 2u |a b| (to first
  order), and a dot product of length K by at most 2u sum |a_k b_k| <= 2u ||a|| ||b||
  (Cauchy-Schwarz), to which the float32 accumulation adds check.py's 8 eps sqrt(K):
  |C - AB|[i, j] <= (2u + 8 eps sqrt(K)) ||A[i, :]|| ||B[:, j]|| (helpers.models.tf32.bound).
"""
import math

import cupy
import numpy as np
import pytest

from helpers import hardware
from helpers.measure import tensor_cores as tc
from helpers.models import tf32
from helpers.runtime.check import check, compare, tolerance
from helpers.runtime.launch import matmul, prepare
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import get
from helpers.runtime.specs.tensor_cores import VARIANTS_OF

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (128, 128, 20), (1000, 3000, 777), (33, 4100, 300),
          (1024, 1024, 1024)]


@pytest.fixture(autouse=True)
def tensor_cores_here():
    if not tc.supported(hardware.current()):
        pytest.skip(f"{hardware.current().label} has no TF32 mma.sync (compute capability < 8.0)")


def operands(M, N, K, seed, wide=False):
    return tc.operands(M, N, K, seed, wide=wide)


def view_off_by_one(X):
    flat = cupy.empty(X.size + 1, dtype=cupy.float32)
    view = flat[1:].reshape(X.shape)
    view[...] = X
    return view


@pytest.mark.parametrize("params", VARIANTS_OF["tf32x3"], ids=lambda v: get("tf32x3").label(get("tf32x3").resolve(v)))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_3xtf32_meets_the_float32_bound(params, shape):
    result = check("tf32x3", *shape, params)
    assert result.ok, str(result)


@pytest.mark.parametrize("shape", [(1000, 3000, 777), (2048, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
def test_3xtf32_meets_the_float32_bound_on_operands_spanning_six_orders(shape):
    A, B = operands(*shape, seed=11, wide=True)
    C = matmul("tf32x3", A, B)
    c = compare(C, cupy.matmul(A, B), A, B)
    assert c.ok, c


@pytest.mark.parametrize("params", VARIANTS_OF["tf32"], ids=lambda v: get("tf32").label(get("tf32").resolve(v)))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tf32_is_the_float32_product_of_its_rounded_operands(params, shape):
    M, N, K = shape
    A, B = operands(M, N, K, seed=M + N + K)
    C = matmul("tf32", A, B, params)
    At, Bt, ref = tc.tf32_reference(A, B)
    c = compare(C, ref, At, Bt)
    assert c.ok, c


@pytest.mark.parametrize("shape", SHAPES[2:], ids=lambda s: "x".join(map(str, s)))
def test_tf32_within_the_tf32_bound_of_the_float32_product_and_far_from_float32(shape):
    M, N, K = shape
    A, B = operands(M, N, K, seed=3)
    C, ref = matmul("tf32", A, B), cupy.matmul(A, B)
    bound = cupy.outer(cupy.linalg.norm(A, axis=1), cupy.linalg.norm(B, axis=0)) * cupy.float32(tf32.bound(K))
    assert bool((cupy.abs(C - ref) <= bound).all())
    assert not compare(C, ref, A, B).ok or K < 100        # the float32 bound is not TF32's


@pytest.mark.parametrize("name", ["tf32", "tf32x3"])
@pytest.mark.parametrize("shape", [(130, 132, 36), (256, 256, 64)], ids=lambda s: "x".join(map(str, s)))
def test_views_4_bytes_off_take_the_checked_copies(name, shape):
    M, N, K = shape
    A, B = operands(M, N, K, seed=4)
    C = view_off_by_one(cupy.full((M, N), np.nan, dtype=cupy.float32))
    prepare(name, M, N, K)(view_off_by_one(A), view_off_by_one(B), C)
    if name == "tf32":
        At, Bt, ref = tc.tf32_reference(A, B)
        c = compare(C, ref, At, Bt)
    else:
        c = compare(C, cupy.matmul(A, B), A, B)
    assert c.ok, c


def test_3xtf32_error_is_float32_level_and_tf32_is_not():
    A, B = operands(512, 512, 4096, seed=5)
    errors = {}
    for m in ("cublas_fp32", "tf32", "tf32x3"):
        fn, _ = tc.multiply(m, 512, 512, 4096)
        C = cupy.empty((512, 512), dtype=cupy.float32)
        fn(A, B, C)
        errors[m] = tc.rel_error(C, A, B)
    assert errors["tf32x3"] < 4 * errors["cublas_fp32"] + 1e-6, errors
    assert errors["tf32"] > 20 * errors["tf32x3"], errors


@pytest.mark.parametrize("promote", [1, 2, 4])
def test_promotion_keeps_3xtf32_at_the_error_of_a_float32_ffma_chain(promote):
    """One long chain of mma drifts (the tensor cores' adder cuts); promoted, 3xTF32's error at
    K = 8192 is within a small factor of the book's FFMA kernel's, and below the unpromoted one."""
    A, B = operands(256, 256, 8192, seed=12)
    errors = {}
    for name, params in (("simt", None), ("tf32x3", dict(PROMOTE=promote)), ("unpromoted", dict(PROMOTE=0))):
        fn, _ = tc.multiply("tf32x3" if name == "unpromoted" else name, 256, 256, 8192,
                            None if params is None else get("tf32x3").resolve(params))
        C = cupy.full((256, 256), np.nan, dtype=cupy.float32)
        fn(A, B, C)
        errors[name] = tc.rel_error(C, A, B)
    assert errors["tf32x3"] < 3 * errors["simt"] + 1e-7, errors
    assert errors["unpromoted"] > 3 * errors["tf32x3"], errors


def test_cublas_tf32_mode_is_switched_back():
    A, B = operands(1024, 1024, 1024, seed=6)
    C = cupy.empty((1024, 1024), dtype=cupy.float32)
    with tc.cublas_tf32():
        cupy.matmul(A, B, out=C)
    tf32_error = tc.rel_error(C, A, B)
    assert tc.fp32_is_default()
    fp32_error = tc.rel_error(cupy.matmul(A, B), A, B)
    assert tf32_error > 10 * fp32_error, (tf32_error, fp32_error)   # TF32 was on inside, off after
    with pytest.raises(RuntimeError):
        with tc.cublas_tf32():
            raise RuntimeError("inside")
    assert tc.fp32_is_default()


def test_spec_refuses_before_launch_what_it_cannot_run():
    with pytest.raises(ConfigError, match="multiple of the block"):
        prepare("tf32", 64, 64, 64, dict(BM=64, BN=64, WM=16, WN=16, BK=8))
    assert math.isfinite(tolerance(4096))


def test_mma_peak_kernel_runs():
    rows = [r for r in tc.peak_rows(log=lambda line: None) if r["chains"] == tc.PEAK_CHAINS[-1]]
    assert all(r["tflops"] > 10 for r in rows)
