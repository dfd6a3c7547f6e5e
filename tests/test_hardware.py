"""The device model: limits by compute capability, ceilings, and the occupancy rules
against hand-computed cases (CPU only; tests/test_gpu_live.py compares with a real GPU)."""
import pytest

from helpers.hardware import Device, occupancy

H200 = Device.from_datasheet("NVIDIA H200")
H100 = Device.from_datasheet("NVIDIA H100 80GB HBM3")


def occ(threads, regs, smem, device=H200):
    return occupancy(threads, regs, smem, device)


def test_ceilings_from_the_datasheet():
    assert H100.fp32_tflops == pytest.approx(66.9, abs=0.05)       # 132 SMs x 128 lanes x 2 x 1.98 GHz
    assert H100.attainable(1.0) == pytest.approx(3.35) and H100.attainable(1e3) == H100.fp32_tflops
    assert H200.ridge == pytest.approx(H200.fp32_tflops / 4.8)


@pytest.mark.parametrize("arch,smem_block,threads_sm,blocks_sm,lanes", [
    ("sm_75", 64 * 1024, 1024, 16, 64), ("sm_80", 163 * 1024, 2048, 32, 64),
    ("sm_86", 99 * 1024, 1536, 16, 128), ("sm_89", 99 * 1024, 1536, 24, 128)])
def test_limits_of_other_gpus(arch, smem_block, threads_sm, blocks_sm, lanes):
    d = Device.emulating(arch)
    assert (d.smem_per_block, d.max_threads_per_sm, d.max_blocks_per_sm, d.fp32_lanes) == \
           (smem_block, threads_sm, blocks_sm, lanes)
    assert d.emulated and d.arch == arch and d.has_cp_async == (arch != "sm_75")


def test_register_budget():
    assert H200.register_budget(256, 2) == 128
    assert H200.register_budget(128, 1) == 255
    assert H200.register_budget(1024, 1) == 64


def test_a_recorded_device_round_trips():
    assert Device.from_record(H200.as_record()).fp32_tflops == H200.fp32_tflops


def test_register_limited():
    o = occ(256, 128, 0)      # 4096 registers per warp: 4 warps per sub-partition, 16 per SM
    assert (o.blocks_per_sm, o.active_warps, o.limiter, o.fraction) == (2, 16, "registers", 0.25)


def test_thread_limited():
    o = occ(1024, 32, 0)
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (2, 64, "warps")


def test_shared_memory_limited_with_the_drivers_reserve():
    o = occ(128, 32, 48 * 1024)   # 48 KB + 1 KB reserved = 49 KB; 228 // 49 = 4 blocks
    assert (o.blocks_per_sm, o.limiter) == (4, "shared memory")
    assert occ(32, 16, 100).detail["smem_allocated_per_block"] == 1152    # rounded up to 128 B


def test_block_count_limited():
    assert (occ(32, 16, 0).blocks_per_sm, occ(32, 16, 0).limiter) == (32, "blocks per SM")


def test_register_allocation_granularity_and_sub_partitions():
    assert occ(256, 33, 0).detail["registers_per_warp"] == 1280 and occ(256, 33, 0).blocks_per_sm == 6
    assert (occ(64, 104, 0).blocks_per_sm, occ(64, 104, 0).active_warps) == (8, 16)


def test_1024_thread_block_is_all_or_nothing():
    assert [occ(1024, r, 0).blocks_per_sm for r in (32, 33, 64, 65)] == [2, 1, 1, 0]


def test_too_much_and_too_many():
    assert occ(256, 256, 0).blocks_per_sm == 0
    assert occ(128, 32, 228 * 1024).blocks_per_sm == 0
    assert occ(128, 32, 227 * 1024).blocks_per_sm == 1
    assert occ(2048, 16, 0).blocks_per_sm == 0


def test_an_older_gpu_fits_fewer_blocks():
    o = occ(64, 32, 0, Device.emulating("sm_86"))
    assert (o.blocks_per_sm, o.active_warps, o.max_warps) == (16, 32, 48)
    assert str(o) == "16 blocks/SM, 32/48 warps (67%), limited by blocks per SM"


@pytest.mark.parametrize("arch", ["sm_70", "sm_75"])
def test_no_shared_memory_on_gpus_without_a_driver_reserve(arch):
    # Before compute capability 8.0 the driver keeps no shared memory per block, so a
    # kernel without shared memory allocates 0 B: the block limit decides, not a division by 0.
    d = Device.emulating(arch)
    o = occupancy(32, 32, 0, d)
    assert (o.blocks_per_sm, o.limiter) == (d.max_blocks_per_sm, "blocks per SM")
    assert occupancy(64, 32, 1, d).detail["smem_allocated_per_block"] == 256
