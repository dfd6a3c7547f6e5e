"""Live mode on a GPU: the device model against the GPU's own properties, the live row
cache, an emulated target's compile path, and the block-schedule trace."""
import cupy
import pytest

from helpers import hardware
from helpers.hardware import Device
from helpers.measure import results, schedule
from helpers.runtime.check import check
from helpers.runtime.compile import compile_kernel
from helpers.runtime.specs import get

pytestmark = pytest.mark.gpu


def test_device_model_matches_the_gpu():
    d = hardware.gpu()
    a = cupy.cuda.Device().attributes
    assert d.sm_count == a["MultiProcessorCount"]
    assert d.max_threads_per_sm == a["MaxThreadsPerMultiProcessor"]
    assert d.smem_per_block == a["MaxSharedMemoryPerBlockOptin"]
    assert d.smem_per_sm == a["MaxSharedMemoryPerMultiprocessor"]
    assert d.registers_per_sm == a["MaxRegistersPerMultiprocessor"]
    assert d.fp32_tflops > 1 and d.bandwidth_gbs > 100


def test_live_rows_are_cached_and_not_measured_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path))
    spec = get("naive")
    items = [(spec, spec.defaults(), (256, 256, 256))]
    first, _ = results.measure_items(items, hardware.gpu(), log=lambda line: None)
    again, _ = results.measure_items(items, hardware.gpu(), log=lambda line: None)
    assert first == again and first[0]["ok"]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89"])
def test_emulated_target_compiles_its_own_ptx_and_runs(arch, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_TARGET", arch)
    device = hardware.current()
    assert device.emulated and device.arch == arch
    spec = get("vectorized")
    kernel = compile_kernel(spec, spec.defaults(), device)
    assert kernel is not None
    assert check("vectorized", 130, 129, 17).ok


@pytest.mark.parametrize("kernel", ["cp_async", "final"])
def test_emulated_sm_75_runs_the_cp_async_kernels_with_plain_copies(kernel, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_TARGET", "sm_75")      # PTX with __CUDA_ARCH__ 750: no cp.async
    device = hardware.current()
    for shape in ((130, 129, 17), (257, 300, 1000)):
        params = get(kernel).config_for(*shape, device)       # final: the config chosen for a T4
        assert check(kernel, *shape, params).ok


def test_block_schedule_trace_covers_every_block():
    trace, ms, err = schedule.trace_schedule({"BX": 64, "BY": 4, "SWAP": 1}, n=1024)
    assert err < 1e-5 and ms > 0
    assert (trace[:, 2] > trace[:, 1]).all()        # every block wrote a start and an end
