"""GPU checks specific to kernels 05-07 (the generic test covers every config vs cuBLAS).

* matrices that start at a 4-byte offset (views into a bigger buffer) must take the
  scalar path, never a misaligned float4 access, and give bit-identical results;
* Nsight Compute, where installed, must see the model's wavefronts per instruction in the default
  layout of kernel 07 (no load conflicts) and some in the contiguous one, with the metric names helpers.ncu uses.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _offset_view(cupy, rows, cols, seed):
    """A C-contiguous (rows, cols) float32 array that starts 4 bytes into its buffer."""
    rng = cupy.random.default_rng(seed)
    buf = rng.uniform(-1, 1, rows * cols + 1, dtype=cupy.float32)
    view = buf[1:].reshape(rows, cols)
    assert view.data.ptr % 16 == 4 and view.flags.c_contiguous
    return view


@pytest.mark.parametrize("kernel,params", [("vectorized", {}), ("vectorized", {"BK": 8}),
                                           ("bank_conflicts", {}), ("bank_conflicts", {"SWIZZLE": 0, "PAD": 4, "BK": 8}),
                                           ("thread_tile_2d", {})])
@pytest.mark.parametrize("shape", [(256, 256, 256), (300, 260, 132)], ids=lambda s: "x".join(map(str, s)))
def test_misaligned_views_take_the_scalar_path(kernel, params, shape):
    import cupy

    from helpers.check import tolerance
    from helpers.launch import prepare

    M, N, K = shape
    A, B = _offset_view(cupy, M, K, 1), _offset_view(cupy, K, N, 2)
    C = cupy.full(M * N + 1, np.nan, dtype=cupy.float32)[1:].reshape(M, N)
    run = prepare(kernel, M, N, K, params)
    run(A, B, C)
    cupy.cuda.runtime.deviceSynchronize()
    ref = cupy.matmul(A, B)
    err = float(cupy.linalg.norm(C - ref) / cupy.linalg.norm(ref))
    assert not bool(cupy.isnan(C).any()) and err <= tolerance(K), err
    # the same product from aligned copies: same summation order, so bit-identical
    A2, B2 = cupy.ascontiguousarray(A.copy()), cupy.ascontiguousarray(B.copy())
    C2 = cupy.empty((M, N), dtype=cupy.float32)
    run(A2, B2, C2)
    assert bool((C2 == C).all())


def test_ncu_sees_the_conflicts_the_model_predicts():
    from helpers import banks, ncu

    if ncu.find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    try:
        clean = ncu.pivot([dict(r, kernel="bank_conflicts", params={}, label="default")
                           for r in ncu.profile("bank_conflicts", {})])[0]
        bad = ncu.pivot([dict(r, kernel="bank_conflicts", params={"SPLIT": 0, "SWIZZLE": 0}, label="contiguous")
                         for r in ncu.profile("bank_conflicts", {"SPLIT": 0, "SWIZZLE": 0})])[0]
    except ncu.NcuUnavailable as exc:
        pytest.skip(str(exc))
    # What the model gets exactly: the stores' wavefronts per instruction, and how many
    # wavefronts the contiguous layout adds per load. Where it is cautious: a broadcast
    # LDS.128 (the A reads, two distinct addresses per warp) takes 2 wavefronts on the
    # H200, not the 4 of the model, so both layouts measure 1 load wavefront below it.
    # The store counter also charges a few stray conflicts to clean stores (about 1 per
    # 60 instructions), so the clean layout is judged by wavefronts per instruction.
    model_clean, model_bad = banks.tile_totals(16, 1, 0, 1), banks.tile_totals(16, 0, 0, 0)
    assert clean["load bank conflicts"] == 0, clean
    assert clean["store wavefronts per instruction"] == pytest.approx(model_clean["store"]["per_instruction"], rel=0.03)
    assert clean["load wavefronts per instruction"] <= model_clean["load"]["per_instruction"], clean
    assert bad["load bank conflicts"] > 0 and bad["store bank conflicts"] > 10 * clean["store bank conflicts"], bad
    assert bad["store wavefronts per instruction"] == pytest.approx(model_bad["store"]["per_instruction"], rel=0.03)
    added = bad["load wavefronts per instruction"] - clean["load wavefronts per instruction"]
    assert added == pytest.approx(model_bad["load"]["per_instruction"] - model_clean["load"]["per_instruction"], abs=0.1)
