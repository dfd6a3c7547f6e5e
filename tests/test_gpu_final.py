"""GPU tests for the final kernel beyond the generic ones: the per-shape choice on
the shape suite, split-K determinism and the self-resetting split-K counters."""
import pytest

from helpers.specs.final import SUITE

pytestmark = pytest.mark.gpu


def _operands(M, N, K, seed=0):
    import cupy

    from helpers.check import random_matrix

    rng = cupy.random.default_rng(seed)
    return random_matrix(M, K, rng), random_matrix(K, N, rng)


@pytest.mark.parametrize("shape", list(SUITE) + [(4096, 4096, 4096), (33, 4100, 300), (1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_cublas(shape):
    import cupy

    from helpers.check import compare
    from helpers.final import matmul

    A, B = _operands(*shape)
    err, unwritten, ok = compare(matmul(A, B), cupy.matmul(A, B), shape[2])
    assert unwritten == 0 and ok, f"relative error {err:.2e}"


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_is_deterministic_and_reusable(split):
    import cupy

    from helpers.check import compare
    from helpers.final import matmul

    params = dict(BM=128, BN=128, BK=8, WM=64, WN=64, TM=16, TN=8, STAGES=4, SPLITK=split, GROUP=8)
    A, B = _operands(640, 384, 3000, seed=1)
    first = matmul(A, B, params)
    for _ in range(3):   # the turn counters must be back at zero after each launch
        again = matmul(A, B, params)
        assert bool((again == first).all()), "split-K results differ between runs"
    err, unwritten, ok = compare(first, cupy.matmul(A, B), 3000)
    assert unwritten == 0 and ok, f"relative error {err:.2e}"


def test_split_k_with_empty_splits():
    import cupy

    from helpers.check import compare
    from helpers.final import matmul

    # K = 9 is two k-tiles: with 8 splits six blocks per tile have nothing to add
    params = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=2, SPLITK=8, GROUP=0)
    A, B = _operands(100, 70, 9, seed=2)
    err, unwritten, ok = compare(matmul(A, B, params), cupy.matmul(A, B), 9)
    assert unwritten == 0 and ok


def _view_off_by_one(X):
    """A C-contiguous copy of X that starts 4 bytes past a 16-byte boundary."""
    import cupy

    flat = cupy.empty(X.size + 1, dtype=cupy.float32)
    view = flat[1:].reshape(X.shape)
    view[...] = X
    return view


@pytest.mark.parametrize("kernel,params", [("final", {}), ("final", dict(BM=128, BN=128, STAGES=4, SPLITK=2)),
                                           ("warptiling", {})])
@pytest.mark.parametrize("shape", [(130, 132, 36), (256, 256, 64)], ids=lambda s: "x".join(map(str, s)))
def test_operands_4_bytes_off_alignment(kernel, params, shape):
    """Views that do not start on a 16-byte boundary must take the 4-byte paths (no misaligned access)."""
    import cupy
    import numpy as np

    from helpers.check import compare
    from helpers.launch import prepare

    M, N, K = shape
    A, B = _operands(M, N, K, seed=4)
    Av, Bv = _view_off_by_one(A), _view_off_by_one(B)
    C = _view_off_by_one(cupy.full((M, N), np.nan, dtype=cupy.float32))
    prepare(kernel, M, N, K, params)(Av, Bv, C)
    err, unwritten, ok = compare(C, cupy.matmul(A, B), K)
    assert unwritten == 0 and ok, f"relative error {err:.2e}"
