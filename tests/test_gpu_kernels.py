"""Every registered kernel against cuBLAS on fresh random data (GPU only).

Run on a GPU machine with ``pytest -m gpu``. Shapes include sizes that are not
multiples of any tile; a kernel whose spec refuses a shape must refuse it with a
ConfigError before launching.
"""
import pytest

from helpers.registry import ConfigError, all_specs
from helpers.specs import test_configs as checked_configs

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (1000, 3000, 777), (1024, 1024, 1024), (33, 4100, 300)]


def configs():
    return [pytest.param(spec, params, id=f"{spec.name}-{spec.label_of(spec.resolve(params))}")
            for spec, params in checked_configs() if not spec.broken]


@pytest.mark.parametrize("spec,params", configs())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_cublas(spec, params, shape):
    from helpers.check import check

    M, N, K = shape
    full = spec.validate(params)
    try:
        spec.check_shape(full, M, N, K)
    except ConfigError:
        with pytest.raises(ConfigError):
            check(spec, M, N, K, full)
        return
    result = check(spec, M, N, K, full)
    assert result.unwritten == 0, str(result)
    assert result.ok, str(result)


def test_naive_4096_passes():
    from helpers.check import check

    assert check("naive", 4096, 4096, 4096).ok


def test_bad_inputs_are_refused_clearly():
    import cupy

    from helpers.launch import matmul

    A = cupy.ones((8, 4), dtype=cupy.float32)
    with pytest.raises(TypeError, match="float32"):
        matmul("naive", A.astype(cupy.float64), cupy.ones((4, 8), cupy.float32))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul("naive", A, cupy.ones((5, 8), cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        matmul("naive", cupy.ones((4, 8), cupy.float32).T, cupy.ones((4, 8), cupy.float32))
    with pytest.raises(TypeError, match="cupy.ndarray"):
        import numpy as np
        matmul("naive", np.ones((8, 4), np.float32), cupy.ones((4, 8), cupy.float32))
    with pytest.raises(ConfigError, match="threads per block"):
        matmul("naive", A, cupy.ones((4, 8), cupy.float32), BX=64, BY=32)


def test_unwritten_output_fails_the_check():
    """A kernel that skips elements must fail: the NaN poison survives."""
    import cupy

    from helpers.check import compare

    ref = cupy.ones((4, 4), cupy.float32)
    C = ref.copy()
    C[2, 3] = cupy.nan
    err, unwritten, ok = compare(C, ref, 4)
    assert unwritten == 1 and not ok


def test_measure_reports_sane_numbers():
    from helpers.bench import measure

    r = measure("naive", 512, 512, 512)
    assert r.ok and r.ms > 0 and r.ms_p20 <= r.ms <= r.ms_p80
    assert 0 < r.tflops < 100 and 0 < r.cublas_tflops < 100
    assert r.buffers >= 2  # 3 MiB of operands: rotated to keep L2 cold
