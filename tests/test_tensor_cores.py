"""Chapters 14 and 15 without a GPU: TF32 rounding and the 3xTF32 split in NumPy, the fragment
layout figure, the specs' rules, the offline compile, the data sources and the recorded-mode notes."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from helpers.figures import style
from helpers.figures import tensor_cores as fig
from helpers.hardware import Device
from helpers.measure import sources, tensor_cores as data
from helpers.models import tf32
from helpers.runtime import offline
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import get
from helpers.runtime.specs import test_configs as checked_configs

H200 = Device.from_datasheet("NVIDIA H200")


def reference_tf32(x: float) -> float:
    """Round a float32 to 10 mantissa bits, to nearest, ties away from zero, with exact arithmetic."""
    if not math.isfinite(x) or x == 0:
        return x
    m, e = math.frexp(abs(x))                  # |x| = m 2^e, m in [0.5, 1)
    scaled = m * 2 ** 11                       # 11 significant bits (1 implicit + 10)
    lo = math.floor(scaled)
    r = lo + 1 if scaled - lo >= 0.5 else lo   # a tie goes up: away from zero in magnitude
    v = math.ldexp(r, e - 11)
    v = struct.unpack("f", struct.pack("f", v))[0] if v < 3.4e38 else math.inf
    return math.copysign(v, x)


def test_tf32_rounding_is_cvt_rna_bit_for_bit():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]                  # finite
    bits = bits[(bits & 0x7F800000) != 0]                           # normal (subnormals: not claimed)
    ties = (bits[:2000] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)  # exactly halfway
    x = np.concatenate([bits, ties]).view(np.float32)
    got = tf32.to_tf32(x)
    want = np.array([reference_tf32(float(v)) for v in x], dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    assert not (got.view(np.uint32) & np.uint32(0x1FFF)).any()      # low 13 bits zero
    assert tf32.to_tf32(np.float32(1 + 2**-11)) == np.float32(1 + 2**-10)       # tie: away from zero
    assert tf32.to_tf32(np.float32(-(1 + 2**-11))) == np.float32(-(1 + 2**-10))
    special = tf32.to_tf32(np.array([np.inf, -np.inf, np.nan], np.float32))
    assert np.isinf(special[:2]).all() and np.isnan(special[2])


def test_split_is_within_its_bound_at_any_magnitude():
    rng = np.random.default_rng(2)
    x = (rng.uniform(-1, 1, 200000) * 10.0 ** rng.uniform(-30, 30, 200000)).astype(np.float32)
    big, small = tf32.split(x)
    assert not (big.view(np.uint32) & np.uint32(0x1FFF)).any() and not (small.view(np.uint32) & np.uint32(0x1FFF)).any()
    x64 = x.astype(np.float64)
    assert (np.abs(x64 - big) <= tf32.UNIT * np.abs(x64)).all()
    err = np.abs(x64 - big - small) / np.abs(x64)
    assert err.max() <= tf32.SPLIT_BOUND and err.max() > tf32.SPLIT_BOUND / 4     # the bound is nearly reached
    # x - big is exact in float32: the same in float64
    np.testing.assert_array_equal((x - big).astype(np.float64), x64 - big.astype(np.float64))


def test_three_products_keep_float32_accuracy_and_the_fourth_is_below_it():
    t = tf32.product_terms(np.pi, np.e)
    assert abs(t["small * small"]) < 2**-20 * abs(t["exact"])
    assert abs(t["kept"] - t["exact"]) < 2**-21 * abs(t["exact"])
    assert abs(t["big * big"] - t["exact"]) > 2**-14 * abs(t["exact"])     # TF32 alone is not


def test_tf32_bound_adds_the_input_rounding_to_the_float32_bound():
    assert tf32.bound(1) == pytest.approx(2**-10 + 8 * 2**-23)
    assert tf32.bound(4096) == pytest.approx(2**-10 + 8 * 2**-23 * 64)


@pytest.mark.parametrize("name,shape,regs", [("A", (16, 8), 4), ("B", (8, 8), 2), ("C", (16, 8), 4)])
def test_fragment_layout_gives_every_element_one_lane_and_register(name, shape, regs):
    owner = fig.fragment_owners(name)
    assert owner.shape[:2] == shape and (owner >= 0).all()
    pairs = {tuple(p) for p in owner.reshape(-1, 2)}
    assert pairs == {(lane, r) for lane in range(32) for r in range(regs)}


def test_fragment_layout_matches_the_ptx_tables():
    a, b, c = (fig.fragment_owners(n) for n in "ABC")
    lane = 13                                     # groupID 3, threadID_in_group 1
    assert tuple(a[3, 1]) == (lane, 0) and tuple(a[11, 1]) == (lane, 1)
    assert tuple(a[3, 5]) == (lane, 2) and tuple(a[11, 5]) == (lane, 3)
    assert tuple(b[1, 3]) == (lane, 0) and tuple(b[5, 3]) == (lane, 1)
    assert tuple(c[3, 2]) == (lane, 0) and tuple(c[3, 3]) == (lane, 1) and tuple(c[11, 2]) == (lane, 2)


def test_fragment_layout_figure_has_a_menu_over_a_b_c_and_says_lane_and_register():
    f = fig.fragment_layout()
    assert len(f.data) == 3 and [t.visible for t in f.data] == [True, False, False]
    assert [b.label for b in f.layout.updatemenus[0].buttons] == ["A", "B", "C"]
    assert f.data[0].z.shape == (16, 8) if hasattr(f.data[0].z, "shape") else len(f.data[0].z) == 16
    assert "lane 13, register a1" in f.data[0].hovertext[11][1]
    assert "lane 13, register b1" in f.data[1].hovertext[5][3]


def test_specs_refuse_gpus_without_tf32_mma_and_name_the_rule():
    for name in ("tf32", "tf32x3"):
        spec = get(name)
        with pytest.raises(ConfigError, match="compute capability 8.0 or newer.*7.5"):
            spec.validate(device=Device.emulating("sm_75"))
        assert not spec.is_valid({}, Device.emulating("sm_70"))
        for arch in ("sm_80", "sm_86", "sm_89", "sm_90"):
            device = Device.emulating(arch)
            assert spec.is_valid(spec.config_for(4096, 4096, 4096, device), device), arch
        # the defaults where they fit (the H200), a shallower pipeline where they do not (99 KB a block)
        assert spec.config_for(4096, 4096, 4096, Device.emulating("sm_90")) == spec.defaults()
        assert spec.config_for(4096, 4096, 4096, Device.emulating("sm_86"))["STAGES"] == 2
    assert get("tf32").precision == "tf32" and get("tf32x3").precision == "fp32"


def test_specs_refuse_tiles_their_threads_cannot_copy_and_register_hungry_blocks():
    with pytest.raises(ConfigError, match="not a multiple of the block's 512 threads"):
        get("tf32").validate(dict(BM=64, BN=64, WM=16, WN=16, BK=8), device=H200)
    with pytest.raises(ConfigError, match="spill"):
        get("tf32x3").validate(dict(BM=256, BN=256, WN=64, STAGES=3), device=H200)
    with pytest.raises(ConfigError, match="shared memory"):
        get("tf32").validate(dict(BM=256, BN=128, WN=64, BK=32, STAGES=4), device=Device.emulating("sm_86"))


def test_every_shape_is_accepted():
    for name in ("tf32", "tf32x3"):
        spec = get(name)
        for shape in ((1, 1, 1), (7, 13, 5), (4097, 4097, 4097)):
            spec.check_shape(spec.defaults(), *shape, H200)


TC_CONFIGS = [(s, p) for s, p in checked_configs() if s.name in ("tf32", "tf32x3")]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("spec,params", TC_CONFIGS, ids=lambda x: getattr(x, "name", None) or str(x))
def test_offline_compile_without_spills(nvrtc, arch, spec, params):
    device = Device.emulating(arch)
    if not spec.is_valid(params, device):
        pytest.skip(f"{arch} refuses it: {spec.problems(spec.resolve(params), device)}")
    res = offline.resources(spec, params, device)
    assert not res.spills, str(res)
    assert res.registers <= spec.registers(spec.resolve(params)) + 16, str(res)    # the model is close


def test_peak_kernel_compiles_to_hmma(nvrtc):
    from helpers.runtime.spec import inline_includes
    from helpers.settings import KERNEL_DIR

    cubin, _, _ = offline.nvrtc_compile(inline_includes(KERNEL_DIR / "14_tf32.cu"), "14_tf32.cu",
                                        "tf32_mma_peak<8>", "sm_90")
    text = offline.cuobjdump(cubin, "--dump-sass")
    assert text.count("HMMA.1688.F32.TF32") >= 8


def test_both_chapters_are_data_sources():
    for chapter in data.CHAPTERS:
        assert isinstance(sources.get(chapter), sources.Table)
    assert data.RECORD_COMMAND.endswith("--chapter tensor_cores --chapter tf32x3")


def test_without_data_every_function_returns_a_note():
    for fn in (fig.tf32_text, fig.error_k_text, fig.tf32x3_text, fig.gap_text, fig.ceilings, fig.hopper_text,
               fig.hopper_gap_text):
        assert "Not recorded yet" in str(fn(None))
    assert "Not recorded yet" in str(fig.speed_bars(None, ("tf32",), "t"))
    assert "Not recorded yet" in str(fig.not_recorded())


def test_split_tables():
    t = fig.split_table()
    assert [r["term"] for r in t.rows][:4] == ["big * big", "big * small", "small * big", "small * small"]
    b = fig.split_bound_table(samples=20000)
    assert b.rows[1]["worst relative error"] <= tf32.SPLIT_BOUND


def test_a_printed_bound_holds():
    assert fig.within(2.85) == "2.9" and fig.within(2.8) == "2.8"
    run = fig.data.run("tf32x3")
    if run is not None:
        for a, b in (("tf32x3", "simt"), ("tf32x3", "cublas_fp32")):
            assert float(fig.within(fig.max_ratio(run, a, b))) >= fig.max_ratio(run, a, b)


def test_error_axes_read_as_powers_of_ten_and_only_ceilings_are_grey():
    run = data.recorded("tf32x3")
    if run is None:
        pytest.skip("tf32x3 is not recorded")
    assert fig.promotion_figure(run).layout.yaxis.exponentformat == "power"
    assert fig.error_vs_k(run).layout.yaxis.exponentformat == "power"
    bars = fig.ceilings(run).data[0]
    greys = [name for name, c in zip(bars.y, bars.marker.color) if len({c[1:3], c[3:5], c[5:7]}) == 1
             and c != style.CUBLAS]
    assert greys and all("peak" in g or "cap" in g or "loop" in g for g in greys)


def test_ceiling_names_leave_the_bars_room_on_a_phone():
    # a name's longest line sets how much of a phone's width the names take; hover says each in full
    run = data.recorded("tf32x3")
    if run is None:
        pytest.skip("tf32x3 is not recorded")
    bars = fig.ceilings(run).data[0]
    assert max(len(line) for name in bars.y for line in name.split("<br>")) <= 22
    assert all("<br>" not in h and h == name.replace("<br>", " ") for name, h in zip(bars.y, bars.hovertext))
