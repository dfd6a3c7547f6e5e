import pytest

from helpers.occupancy import occupancy, occupancy_of


def test_register_limited():
    o = occupancy(256, 128, 0)          # 256*128 = 32768 registers per block -> 2 blocks
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (2, 16, "registers")


def test_thread_limited():
    o = occupancy(1024, 32, 0)          # 2048 threads per SM -> 2 blocks
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (2, 64, "warps")
    assert o.fraction == 1.0


def test_shared_memory_limited():
    o = occupancy(128, 32, 48 * 1024)   # 49 KB per block with the reserve -> 4 blocks in 228 KB
    assert (o.blocks_per_sm, o.limiter) == (4, "shared memory")


def test_block_count_limited():
    o = occupancy(32, 16, 0)
    assert (o.blocks_per_sm, o.limiter) == (32, "blocks per SM")


def test_register_allocation_granularity():
    # 33 registers round up to 40 per thread in units of 256 per warp: 1280 per warp
    assert occupancy(256, 33, 0).by_limit["registers"] == 65536 // (1280 * 8)


def test_occupancy_of_a_kernel_uses_the_offline_report():
    pytest.importorskip("cuda.bindings")
    res, occ = occupancy_of("smem_tiling", {"TILE": 32})
    assert res.registers > 0 and occ.blocks_per_sm == 2 and occ.active_warps == 64
