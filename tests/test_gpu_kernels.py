"""Every registered kernel against cuBLAS on fresh random data (GPU only: ``pytest -m gpu``).

Shapes include sizes that are not multiples of any tile; a kernel whose spec refuses a
shape must refuse it with a ConfigError before anything launches.
"""
import cupy
import numpy as np
import pytest

from helpers import hardware
from helpers.runtime.check import check, compare, random_matrix
from helpers.runtime.launch import matmul, prepare
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import ALL, get, test_configs as checked_configs   # not collected as a test
from helpers.runtime.timing import measure

from gpu_configs import fit

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (1000, 3000, 777), (1024, 1024, 1024), (33, 4100, 300)]
# Kernels whose results are float32-accurate: TF32 (tests/test_gpu_tensor_cores.py has its own bound) is not.
FP32 = [s for s in ALL if getattr(s, "precision", "fp32") == "fp32"]
VECTOR_KERNELS = [s.name for s in FP32 if s.load_width == 4 and not s.broken]


def configs():
    return [pytest.param(spec, params, id=f"{spec.name}-{spec.label(params)}")
            for spec, params in checked_configs() if not spec.broken and spec in FP32]


@pytest.mark.parametrize("spec,params", configs())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_cublas(spec, params, shape):
    M, N, K = shape
    device = hardware.current()
    if not spec.is_valid(params, device):
        pytest.skip(f"{device.label} refuses this config: {spec.problems(spec.resolve(params), device)[0]}")
    try:
        spec.check_shape(params, M, N, K, device)
    except ConfigError:
        with pytest.raises(ConfigError):
            check(spec, M, N, K, params)
        return
    result = check(spec, M, N, K, params)
    assert result.unwritten == 0 and result.wrong == 0, str(result)
    assert result.ok, str(result)


def operands(M, N, K, seed=0):
    rng = cupy.random.default_rng(seed)
    return random_matrix(M, K, rng), random_matrix(K, N, rng)


def view_off_by_one(X):
    """A C-contiguous copy of X that starts 4 bytes past a 16-byte boundary (a view into a buffer)."""
    flat = cupy.empty(X.size + 1, dtype=cupy.float32)
    view = flat[1:].reshape(X.shape)
    view[...] = X
    return view


@pytest.mark.parametrize("kernel", VECTOR_KERNELS)
@pytest.mark.parametrize("shape", [(130, 132, 36), (256, 256, 64)], ids=lambda s: "x".join(map(str, s)))
def test_views_4_bytes_off_take_the_scalar_paths(kernel, shape):
    M, N, K = shape
    if not get(kernel).is_valid({}, hardware.current()):
        pytest.skip(f"{hardware.current().label} refuses {kernel}")
    A, B = operands(M, N, K, seed=4)
    C = view_off_by_one(cupy.full((M, N), np.nan, dtype=cupy.float32))
    prepare(kernel, M, N, K)(view_off_by_one(A), view_off_by_one(B), C)
    c = compare(C, cupy.matmul(A, B), A, B)
    assert c.ok, c


def test_launcher_checks_its_operands():
    launch = prepare("naive", 8, 8, 4)
    A, B, C = cupy.ones((8, 4), cupy.float32), cupy.ones((4, 8), cupy.float32), cupy.empty((8, 8), cupy.float32)
    launch(A, B, C)
    with pytest.raises(TypeError, match="float32"):
        launch(A.astype(cupy.float64), B, C)
    with pytest.raises(ValueError, match="shape"):
        launch(cupy.ones((8, 5), cupy.float32), B, C)
    with pytest.raises(ValueError, match="C-contiguous"):
        launch(A, cupy.ones((8, 4), cupy.float32).T, C)
    with pytest.raises(ValueError, match="C-contiguous"):
        launch(A, B, cupy.empty((8, 16), cupy.float32)[:, ::2])
    with pytest.raises(TypeError, match="cupy.ndarray"):
        launch(np.ones((8, 4), np.float32), B, C)


def test_matmul_refuses_bad_inputs_clearly():
    A = cupy.ones((8, 4), dtype=cupy.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul("naive", A, cupy.ones((5, 8), cupy.float32))
    with pytest.raises(ConfigError, match="threads per block"):
        matmul("naive", A, cupy.ones((4, 8), cupy.float32), BX=64, BY=32)


def test_a_few_wrong_elements_in_a_large_result_fail():
    A, B = operands(2048, 2048, 2048, seed=5)
    ref = cupy.matmul(A, B)
    C = ref.copy()
    C[17, 1900] += 0.05          # one element off by far less than its typical size
    c = compare(C, ref, A, B)
    assert c.wrong == 1 and not c.ok and c.rel_err < 1e-5   # the Frobenius norm alone would pass it


def test_measure_reports_sane_numbers():
    r = measure("naive", 512, 512, 512)
    assert r.ok and r.ms > 0 and r.ms_p20 <= r.ms <= r.ms_p80
    assert 0 < r.tflops < r.cublas_tflops < 200
    assert r.buffers >= 2 and r.source_hash


def test_the_fast_path_refuses_operands_off_16_byte_boundaries():
    A, B = operands(256, 256, 256, seed=4)
    launcher = prepare(get("double_buffering"), 256, 256, 256, {"FAST_PATH": 1})
    C = cupy.full((256, 256), np.nan, dtype=cupy.float32)
    launcher(A, B, C)
    assert compare(C, cupy.matmul(A, B), A, B).ok
    with pytest.raises(ConfigError, match="16-byte boundary"):
        launcher(view_off_by_one(A), B, C)
    with pytest.raises(ConfigError, match="multiple of 128"):
        prepare(get("double_buffering"), 256, 250, 256, {"FAST_PATH": 1})
    assert get("double_buffering").config_for(256, 256, 256, hardware.current())["FAST_PATH"] == 1
    assert get("double_buffering").config_for(256, 250, 256, hardware.current())["FAST_PATH"] == 0


def test_queued_timing_measures_the_gpu_not_the_host():
    """A call whose host part takes 200 us around a 64^3 product that takes a few: the GPU's time is timed."""
    import time

    from helpers.runtime.timing import time_fn

    launcher = prepare(get("final"), 64, 64, 64, fit(get("final").defaults()))
    A, B = operands(64, 64, 64, seed=3)
    C = cupy.empty((64, 64), dtype=cupy.float32)

    def slow_call(A, B, C):
        t = time.perf_counter()
        while time.perf_counter() - t < 200e-6:
            pass
        launcher(A, B, C)

    t = time_fn(slow_call, [(A, B, C)], max_reps=50, target_s=1.0)
    assert t.queued and t.reps == 50
    assert t.ms < 0.1, f"{t.ms * 1e3:.0f} us per launch: the host's time leaked into the measurement"


def test_64_bit_indexing_kernel_runs_past_2_to_31_elements():
    """A of 65537 x 32768 has 2^31 + 32768 elements: a 64-bit kernel must get it right."""
    M, K, N = 65537, 32768, 1
    if cupy.cuda.Device().mem_info[0] < 12 * 2**30:
        pytest.skip("needs 12 GB of free GPU memory")
    A, B = operands(M, N, K, seed=6)
    C = matmul("double_buffering", A, B)
    assert compare(C, cupy.matmul(A, B), A, B).ok
    del A, B, C
    cupy.get_default_memory_pool().free_all_blocks()


def test_32_bit_kernels_refuse_such_shapes_before_compiling():
    with pytest.raises(ConfigError, match="2\\^31"):
        prepare("vectorized", 65537, 1, 32768)
