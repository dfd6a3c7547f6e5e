"""The occupancy calculator against hand-computed cases (sm_90 limits), and on a GPU
against the driver's own calculator."""
import pytest

from helpers.occupancy import SM90, declared_smem, occupancy, occupancy_of


def occ(threads, regs, smem):
    return occupancy(threads, regs, smem, limits=SM90)


def test_register_limited():
    # 128 regs * 32 = 4096 per warp; 16384 per sub-partition -> 4 warps each, 16 per SM -> 2 blocks of 8
    o = occ(256, 128, 0)
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (2, 16, "registers")
    assert o.fraction == 0.25


def test_thread_limited():
    o = occ(1024, 32, 0)          # 2048 threads per SM -> 2 blocks (registers allow 2 too)
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (2, 64, "warps")
    assert o.fraction == 1.0


def test_shared_memory_limited():
    o = occ(128, 32, 48 * 1024)   # 48 KB + 1 KB reserved = 49 KB; 228 // 49 = 4 blocks
    assert (o.blocks_per_sm, o.limiter) == (4, "shared memory")
    assert o.detail["smem_allocated_per_block"] == 49 * 1024


def test_shared_memory_allocation_unit_and_reserve():
    # 100 B + 1024 B reserve rounds up to 1152 B: 233472 // 1152 = 202 (then capped by the block limit)
    o = occ(32, 16, 100)
    assert o.detail["smem_allocated_per_block"] == 1152
    assert o.by_limit["shared memory"] == 202


def test_block_count_limited():
    o = occ(32, 16, 0)
    assert (o.blocks_per_sm, o.active_warps, o.limiter) == (32, 32, "blocks per SM")


def test_register_allocation_granularity():
    # 33 registers: 1056 per warp, rounded to 1280; 16384 // 1280 = 12 warps per
    # sub-partition, 48 per SM -> 6 blocks of 8 warps
    o = occ(256, 33, 0)
    assert o.detail["registers_per_warp"] == 1280
    assert (o.blocks_per_sm, o.limiter) == (6, "registers")


def test_registers_fill_sub_partitions_with_whole_warps():
    # 104 registers: 3328 per warp. The SM's 65536 would hold 19 such warps, but each
    # 16384-register sub-partition holds only 4: 16 warps, 8 blocks of 2 warps (not 9).
    o = occ(64, 104, 0)
    assert (o.blocks_per_sm, o.active_warps) == (8, 16)


def test_1024_thread_block_is_all_or_nothing():
    assert occ(1024, 32, 0).blocks_per_sm == 2
    assert occ(1024, 33, 0).blocks_per_sm == 1       # one register more halves the warps
    assert occ(1024, 64, 0).blocks_per_sm == 1
    o = occ(1024, 65, 0)                              # 66560 registers: the block cannot launch
    assert (o.blocks_per_sm, o.limiter) == (0, "registers")


def test_too_much_and_too_many():
    assert occ(256, 256, 0).blocks_per_sm == 0                       # above 255 registers per thread
    assert occ(128, 32, 228 * 1024).blocks_per_sm == 0               # above 227 KB per block
    assert occ(128, 32, 227 * 1024).blocks_per_sm == 1               # exactly the opt-in maximum
    assert occ(2048, 16, 0).blocks_per_sm == 0                       # above 1024 threads


def test_limits_can_be_overridden():
    # an SM with 100 KB of shared memory (e.g. compute capability 8.6)
    o = occupancy(128, 32, 32 * 1024, limits={"smem_per_sm": 100 * 1024})
    assert o.blocks_per_sm == 3 and o.limiter == "shared memory"


def test_str_names_the_limiter():
    assert str(occ(256, 128, 0)) == "2 blocks/SM, 16/64 warps (25%), limited by registers"


class _Res:
    def __init__(self, log, static, dynamic=0):
        self.log, self.static_smem, self.dynamic_smem = log, static, dynamic


def test_declared_smem_excludes_the_reserve_in_the_cubin():
    # sm_90 cubins count the driver's 1 KB in their shared size; ptxas's line does not
    res = _Res("ptxas info    : Used 31 registers, used 1 barriers, 8192 bytes smem", 9216, 512)
    assert declared_smem(res) == 8192 + 512
    assert declared_smem(_Res("", 4096)) == 4096


def test_occupancy_of_a_kernel_uses_the_offline_report():
    pytest.importorskip("cuda.bindings")
    for tile, blocks in ((8, 32), (16, 8), (32, 2)):
        res, o = occupancy_of("smem_tiling", {"TILE": tile}, limits=SM90)
        assert res.registers > 0 and not res.spills
        assert o.smem_per_block == 2 * tile * tile * 4
        assert (o.blocks_per_sm, o.active_warps) == (blocks, 64)


def test_explorer_has_one_menu_entry_per_block_size():
    fig = __import__("helpers.occupancy", fromlist=["explorer"]).explorer(block_sizes=(256, 1024))
    assert len(fig.layout.updatemenus[0].buttons) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,params", [
    ("smem_tiling", {"TILE": 8}), ("smem_tiling", {"TILE": 32}),
    ("thread_tile_1d", {}), ("thread_tile_1d", {"TM": 16}), ("thread_tile_1d", {"BK": 64, "TM": 4}),
    ("thread_tile_1d", {"BM": 32, "BN": 16, "BK": 4, "TM": 16}),
])
def test_matches_the_driver(kernel, params):
    """Our count equals cuOccupancyMaxActiveBlocksPerMultiprocessor for the compiled kernel."""
    from cupy_backends.cuda.api import driver

    from helpers.compile import compile_kernel
    from helpers.occupancy import device_limits
    from helpers.registry import get

    spec = get(kernel)
    full = spec.validate(params)
    k = compile_kernel(spec, full)
    threads = spec.block(full)[0] * spec.block(full)[1] * spec.block(full)[2]
    theirs = driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, threads, spec.smem_bytes(full))
    res, _ = occupancy_of(kernel, full)
    ours = occupancy(threads, k.num_regs, declared_smem(res), limits=device_limits())
    assert ours.blocks_per_sm == theirs, (ours, k.num_regs, k.shared_size_bytes)
