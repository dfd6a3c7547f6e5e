"""The prose of the chapter "Shared-memory tiling" against the recorded data and the offline compile:
each test fails when the data (or the compiler) says otherwise."""
import pytest

from helpers.measure.results import recorded
from helpers.figures.tiling import largest_square
from helpers.models import loads, occupancy, roofline

TILES = (8, 16, 32)


@pytest.fixture(scope="module")
def sm():
    return recorded("smem_tiling")


@pytest.fixture(scope="module")
def co():
    return recorded("coalescing")



def by_tile(sm, **kw):
    return {r["params"]["TILE"]: r for r in largest_square(sm.where(kernel="smem_tiling", **kw))}


def test_every_recorded_row_is_correct(sm):
    assert sm.all_correct


def test_grid_order_changes_little_here_but_mattered_for_the_coalesced_kernel(sm, co):
    """Deep dive, 'What the bounds checks cost': 'The grid order, which mattered for the coalesced kernel,
    changes little once the operands come through shared memory.'"""
    rows, cols = by_tile(sm, SWAP=1), by_tile(sm, SWAP=0)
    here = max(abs(cols[t]["tflops"] / rows[t]["tflops"] - 1) for t in TILES)
    co_rows = largest_square(co.rows)
    there = max(abs(a["tflops"] / b["tflops"] - 1) for a in co_rows for b in co_rows
                if a["params"]["SWAP"] == 0 and b["params"]["SWAP"] == 1
                and {k: v for k, v in a["params"].items() if k != "SWAP"} == {k: v for k, v in b["params"].items() if k != "SWAP"})
    assert here < 0.03 and there > 2 * here


def test_the_tiles_take_little_shared_memory(sm, nvrtc):
    """Deep dive, 'Occupancy': 'Our three tile sizes take little of it ... the carveout leaves most of the on-chip
    memory to the L1 cache.'"""
    for t in TILES:
        _, o = occupancy.of_config("smem_tiling", {"TILE": t}, sm.device)
        assert o.blocks_per_sm * o.detail["smem_allocated_per_block"] < 0.25 * sm.device.smem_per_sm


def test_same_inner_loop_per_k_and_fewer_barriers_with_bigger_tiles(sm, nvrtc):
    """Deep dive, 'What each multiply-add costs': 'All tile sizes run the same inner loop per k ... the barriers
    per k fall too.'"""
    per_k, bars = set(), []
    for t in TILES:
        c = loads.loop_counts("smem_tiling", {"TILE": t}, sm.device)
        per_k.add(tuple(c.per_k(op) for op in ("FFMA", "LDS", "LDS.128")))
        bars.append(c.per_k("BAR"))
    assert per_k == {(1, 1, 0.25)}
    assert bars == sorted(bars, reverse=True) and bars[0] > bars[-1]


def test_more_than_one_shared_load_per_multiply_add():
    """'The compiled loop ... issues more than one shared load per multiply-add' (chapter, 'Why: two ceilings')."""
    for t in TILES:
        assert loads.per_result("smem_tiling", {"TILE": t}, 4096)["shared_per_ffma"] > 1


def test_speed_rises_with_the_tile(sm):
    """'The measured speed rises with the tile, as global loads per result fall.'"""
    rows = by_tile(sm, SWAP=1)
    speeds = [rows[t]["tflops"] for t in TILES]
    assert speeds == sorted(speeds)


def test_no_tile_reaches_either_ceiling_and_bigger_tiles_raise_the_roof(sm, nvrtc):
    """'No tile size reaches either ceiling' (the roof at its intensity, the shared-memory bound); the
    roof rises with the tile."""
    rows = by_tile(sm, SWAP=1)
    roofs = []
    for t in TILES:
        r = rows[t]
        roof = sm.device.attainable(roofline.intensity("smem_tiling", r["params"], r["M"], r["N"], r["K"]))
        low = min(roof, loads.shared_bound("smem_tiling", r["params"], sm.device))
        assert r["tflops"] < 0.8 * low
        roofs.append(roof)
    assert roofs == sorted(roofs)


def test_exercise_on_blocks_per_sm_by_shared_memory(sm):
    """Exercise 3's solution: 'two tiles ... 8 KB'; 'up to 228 KB of shared memory per SM: 28 blocks of 8 KB,
    or 25 once the driver's reserve of 1 KB per block is counted'; a 1024-thread block fills 32 of 64 warp slots."""
    d, block = sm.device, 2 * 32 * 32 * 4
    assert block == 8 * 1024 and (d.smem_per_sm, d.smem_reserved_per_block) == (228 * 1024, 1024)
    assert d.smem_per_sm // block == 28 and d.smem_per_sm // (block + d.smem_reserved_per_block) == 25
    assert (1024 // d.warp_size, d.max_warps_per_sm) == (32, 64)
