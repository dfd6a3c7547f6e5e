"""The wgmma kernels (kernels/15_wgmma.cu) without a GPU: the specs' rules (compute capability
9.0 only, never an emulated target), the shared-memory and register models against the
offline compile for sm_90a, and the SASS: the arithmetic is HGMMA on TF32."""
from __future__ import annotations

import pytest

from helpers.hardware import Device
from helpers.runtime import offline
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import get, wgmma

H200 = Device.from_datasheet("NVIDIA H200")
SPECS = ("wgmma_tf32", "wgmma_tf32x3")


@pytest.fixture(scope="module")
def nvrtc():
    try:
        offline.supported_archs()
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-40GB", "NVIDIA L4", "Tesla T4"])
def test_refused_below_compute_capability_9(name, gpu):
    with pytest.raises(ConfigError, match="compute capability 9.0"):
        get(name).validate(device=Device.from_datasheet(gpu))


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("target", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_refused_on_every_emulated_target(name, target):
    with pytest.raises(ConfigError, match="sm_90a"):
        get(name).validate(device=Device.emulating(target))


@pytest.mark.parametrize("name", SPECS)
def test_defaults_valid_on_the_h200_and_compiled_for_sm_90a(name):
    spec = get(name)
    assert spec.target == "sm_90a" and spec.validate(device=H200) == spec.defaults()


def test_shared_memory_is_the_stages_of_swizzled_tiles():
    tf32, x3 = get("wgmma_tf32").defaults(), get("wgmma_tf32x3").defaults()
    assert wgmma.smem_bytes(tf32) == 4 * (128 + 256) * 32 * 4 + 1024           # 4 stages of A and Bt
    assert wgmma.smem_bytes(x3) == 4 * (128 + 2 * 128) * 32 * 4 + 1024         # 4 of A, Bt, Bts
    assert wgmma.smem_bytes(dict(x3, AREG=0, STAGES=3)) == 3 * 2 * (128 + 128) * 32 * 4 + 1024   # and As
    with pytest.raises(ConfigError, match="shared memory"):
        get("wgmma_tf32x3").validate(dict(AREG=0), device=H200)


def test_warpgroups_take_whole_64_row_slices():
    with pytest.raises(ConfigError, match="64-row slices"):
        get("wgmma_tf32").validate(dict(BM=64, WGS=2), device=H200)


def test_pre_pass_rows_are_padded_to_the_k_tile():
    p = get("wgmma_tf32x3").defaults()
    assert wgmma.ldk(1) == 32 and wgmma.ldk(32) == 32 and wgmma.ldk(33) == 64
    assert wgmma.parts(p, 100, 50, 33) == (50 * 64, 0, 50 * 64)                # A split in registers
    assert wgmma.parts(dict(p, AREG=0), 100, 50, 33) == (50 * 64, 100 * 64, 50 * 64)
    assert wgmma.parts(get("wgmma_tf32").defaults(), 100, 50, 33) == (50 * 64, 0, 0)


def test_a_from_registers_is_a_3xtf32_option_only():
    with pytest.raises(ConfigError, match="AREG"):
        get("wgmma_tf32").validate(dict(AREG=1), device=H200)


def test_shapes_the_pre_pass_grid_cannot_hold_are_refused():
    spec = get("wgmma_tf32")
    with pytest.raises(ConfigError, match="pre-pass"):
        spec.check_shape(spec.defaults(), 32 * 65536, 64, 64, H200)


@pytest.mark.parametrize("name,params", [(n, v) for n in SPECS for v in wgmma.VARIANTS_OF[n]],
                         ids=lambda x: str(x))
def test_register_model_against_the_offline_compile(nvrtc, name, params):
    spec = get(name)
    res = offline.resources(spec, params, H200)
    assert res.arch == "sm_90a" and not res.spills, str(res)
    model = spec.registers(spec.resolve(params))
    assert model - 48 <= res.registers <= model + 16, str(res)          # close, rarely under


@pytest.mark.parametrize("name", SPECS)
def test_the_arithmetic_is_hgmma_on_tf32(nvrtc, name):
    spec = get(name)
    p = spec.defaults()
    sass = offline.sass(spec, p, H200)
    per_tile = 4 * wgmma.slices(p) * (3 if p["SPLIT"] else 1)        # k-steps x slices x products
    assert sass.count(f"HGMMA.64x{p['BN']}x8.F32.TF32") == per_tile
    assert "HMMA" not in sass and "FFMA" not in sass


def test_3xtf32_takes_a_from_registers():
    """The default 3xTF32 issues its wgmma with A in registers (HGMMA's A a register, not a
    descriptor) and loads those fragments from shared memory itself (LDS)."""
    spec = get("wgmma_tf32x3")
    p = spec.defaults()
    assert p["AREG"] == 1
    sass = offline.sass(spec, p, H200)
    hgmma = [line for line in sass.splitlines() if "HGMMA" in line]
    assert hgmma and all("gdesc[UR" in line and ", R" in line.split("HGMMA")[1].split("gdesc")[0] for line in hgmma)
    assert "LDS " in sass


def test_the_record_of_chapter_15_measures_the_wgmma_kernels_on_hopper_only():
    from helpers.measure import tensor_cores as data

    assert data.hopper_methods(H200) == ("wgmma_tf32", "wgmma_tf32x3")
    for gpu in ("NVIDIA A100-SXM4-40GB", "NVIDIA L4"):
        assert data.hopper_methods(Device.from_datasheet(gpu)) == ()
    assert data.hopper_methods(Device.emulating("sm_90")) == ()
    assert set(data.HOPPER_METHODS) <= set(data.LABELS) and not set(data.HOPPER_METHODS) & set(data.METHODS)
