"""Kernel specs: rules, messages, the register model, sweeps, the suggestion search (CPU only)."""
import time

import pytest

from helpers import hardware
from helpers.hardware import Device
from helpers.measure import sources
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import ALL, UnknownKernel, get
from helpers.runtime.specs import test_configs as checked_configs
from helpers.settings import KERNEL_DIR

H200 = Device.from_datasheet("NVIDIA H200")
OTHER_GPUS = [Device.emulating(a) for a in ("sm_75", "sm_80", "sm_86", "sm_89")]


def test_every_kernel_file_has_a_spec():
    assert {p.name for p in KERNEL_DIR.glob("*.cu")} == {f for s in ALL for f in (s.file, *s.also_runs)}


def test_a_config_runs_only_the_other_kernels_it_launches():
    # scripts/check_source_equivalence.py: a change to the packing or the adding of slabs makes only
    # the configs that run them need a new record
    final = get("final")
    plain = final.defaults()
    assert final.runs_also(plain) == ()
    assert final.runs_also(dict(plain, PACK_A=1)) == final.runs_also(dict(plain, PACK_B=1)) == ("12_pack.cu",)
    assert final.runs_also(dict(plain, SPLITK=4, REDUCE=1)) == ("12_reduce.cu",)
    assert final.runs_also(dict(plain, PACK_B=1, SPLITK=4, REDUCE=1)) == final.also_runs
    assert get("naive").runs_also(get("naive").defaults()) == ()


def test_unknown_kernel_lists_names():
    with pytest.raises(UnknownKernel, match="registered: naive, coalescing"):
        get("no_such_kernel")


def test_too_many_threads_names_the_rule_and_an_alternative():
    with pytest.raises(ConfigError) as exc:
        get("naive").validate(BX=64, BY=32, device=H200)
    assert "2048 threads per block exceeds the limit of 1024" in str(exc.value)
    assert "A valid alternative: 32x32 (BX=32)" in str(exc.value)


def test_disallowed_value_and_unknown_parameter():
    with pytest.raises(ConfigError, match=r"BX=3 is not allowed; choose one of \[1, 2, 4"):
        get("naive").validate(BX=3)
    with pytest.raises(ConfigError, match="unknown parameter"):
        get("naive").validate(TM=8)


def test_partial_warp_refused():
    with pytest.raises(ConfigError, match="whole number of 32-thread warps"):
        get("naive").validate(BX=4, BY=4)


@pytest.mark.parametrize("shape", [(0, 4, 4), (4, -1, 4), (4, 4, 2.5), (4, True, 4)])
def test_bad_shapes_refused(shape):
    spec = get("naive")
    with pytest.raises(ConfigError, match="positive int"):
        spec.check_shape(spec.defaults(), *shape, H200)


@pytest.mark.parametrize("spec", [s for s in ALL if s.int32_indices], ids=lambda s: s.name)
def test_32_bit_kernels_refuse_operands_of_2_to_31_elements(spec):
    with pytest.raises(ConfigError, match="below 2\\^31 elements"):
        spec.check_shape(spec.defaults(), 65537, 1, 32768, H200)


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.name)
def test_every_kernel_refuses_a_dimension_its_int_arguments_cannot_hold(spec):
    with pytest.raises(ConfigError, match="int arguments"):
        spec.check_shape(spec.defaults(), 2**31, 1, 1, H200)


@pytest.mark.parametrize("spec,params", checked_configs(), ids=lambda x: getattr(x, "name", str(x)))
def test_defaults_and_test_configs_are_valid_on_the_reference_gpu(spec, params):
    spec.validate(params, device=H200)


@pytest.mark.parametrize("chapter", [c for c, s in sources.SOURCES.items() if isinstance(s, sources.Sweep)])
def test_sweeps_use_valid_configs_and_shapes(chapter):
    for spec, params, (M, N, K) in sources.get(chapter).items(H200):
        full = spec.validate(params, device=H200)
        spec.check_shape(full, M, N, K, H200)


# Configs the offline compile shows spilling (ptxas: "bytes spill stores").
@pytest.mark.parametrize("kernel,params", [
    ("final", dict(BM=256, BN=256, WM=32, WN=128, TM=8, TN=16)),
    ("final", dict(BM=128, BN=256, WM=32, WN=32, TM=4, TN=8)),
    ("thread_tile_2d", dict(BM=256, BN=128, TM=16, TN=8, BK=8)),
    ("thread_tile_1d", dict(BM=64, BN=128, BK=64, TM=16)),
])
def test_configs_that_would_spill_are_refused(kernel, params):
    with pytest.raises(ConfigError, match="spill"):
        get(kernel).validate(params, device=H200)


def test_a_launch_bound_the_kernel_fits_sets_the_registers_the_occupancy_counts():
    # final's 8 x 8 tile asks __launch_bounds__ for four blocks where ptxas fits it (plain, B
    # row-major): it takes that budget, above which the estimate lies, and is not refused as spilling
    from helpers.runtime.specs import final

    spec, narrow = get("final"), dict(BN=64, WN=32, TM=8, TN=8, BK=16, STAGES=4)
    plain, split, nt = (spec.resolve(dict(narrow, **x)) for x in ({}, dict(SPLITK=3), dict(B_T=1)))
    budget = H200.register_budget(128, final.BOUND_BLOCKS)
    assert spec.registers(plain) > budget == spec.registers_on(plain, H200)
    spec.validate(plain, device=H200)
    assert final.blocks_per_sm(plain, H200) == final.BOUND_BLOCKS == spec.min_blocks(plain)
    for p in (split, nt):                    # the compiler's own count: the estimate, one block fewer
        assert spec.registers_on(p, H200) == spec.registers(p) and spec.min_blocks(p) == 1
        assert final.blocks_per_sm(p, H200) == final.BOUND_BLOCKS - 1


def test_suggest_answers_in_milliseconds():
    spec = get("final")
    bad = dict(BM=256, BN=256, WM=32, WN=128, TM=8, TN=16)
    t0 = time.perf_counter()
    for _ in range(5):
        with pytest.raises(ConfigError, match="A valid alternative"):
            spec.validate(bad, device=H200)
    assert (time.perf_counter() - t0) / 5 < 0.05


def test_cp_async_kernels_run_before_compute_capability_8():
    # kernels/common.cuh turns each copy into a load and a store there (no overlap, same result)
    for arch in ("sm_70", "sm_75"):
        get("cp_async").validate(device=Device.emulating(arch))


@pytest.mark.parametrize("device", OTHER_GPUS + [Device.emulating("sm_70")], ids=lambda d: d.arch)
def test_final_choice_fits_every_gpu(device):
    from helpers.runtime.specs.final import choose_config

    for shape in ((4096,) * 3, (8192, 128, 8192), (512, 512, 512), (1000, 3000, 777), (1, 1, 1), (64, 64, 100000)):
        get("final").validate(choose_config(*shape, device), device=device)


def test_a100_refuses_the_shared_memory_only_a_hopper_has():
    big = dict(BM=128, BN=256, BK=32, STAGES=4)     # 198,656 B of shared memory
    get("final").validate(big, device=H200)
    with pytest.raises(ConfigError, match="allows 166,912"):
        get("final").validate(big, device=Device.emulating("sm_80"))


def test_tiles_describe_the_block_and_thread_tiles():
    t = get("thread_tile_1d").tiles(get("thread_tile_1d").defaults())
    assert (t.BM, t.BN, t.BK, t.TM, t.TN) == (64, 64, 32, 8, 1)
    assert not get("naive").tiles(get("naive").defaults()).shared


def test_source_hash_changes_with_an_included_header(tmp_path, monkeypatch):
    import shutil

    from helpers import settings

    for f in KERNEL_DIR.iterdir():
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(settings, "KERNEL_DIR", tmp_path)
    spec = get("vectorized")
    before = spec.source_hash()
    (tmp_path / "common.cuh").write_text((tmp_path / "common.cuh").read_text() + "\n// changed\n")
    assert spec.source_hash() != before
    assert '#line 1 "common.cuh"' in spec.source()


def test_default_device_without_a_gpu_is_the_reference():
    if hardware.gpu_available():
        pytest.skip("a GPU is present")
    assert hardware.default().name == "NVIDIA H200"


def test_fitting_keeps_a_valid_config_and_moves_one_that_does_not_fit():
    final, t4 = get("final"), Device.emulating("sm_75")
    assert final.fitting(None, H200) == final.defaults()
    moved = final.fitting(None, t4)
    assert moved != final.defaults() and final.is_valid(moved, t4)
