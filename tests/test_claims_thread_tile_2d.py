"""The prose of the chapter "2D thread tiles" against the recorded data and the offline compile:
each test fails when the data (or the compiler) says otherwise."""
import pytest

from helpers import validate
from helpers.measure.results import recorded
from helpers.figures.registers import fma_heatmap
from helpers.figures.tiling import largest_square
from helpers.models import loads, register_tiles
from helpers.models.occupancy import of_config
from helpers.runtime.specs import get


@pytest.fixture(scope="module")
def t2():
    return recorded("thread_tile_2d")



def test_every_recorded_row_is_correct(t2):
    assert t2.all_correct


def test_two_rules_cut_the_map_of_a_128x128_block(t2):
    """'Two rules cut this map': too many threads and more registers; whole warps always hold."""
    text = [c for row in fma_heatmap(128, 128, t2.device).data[0].text for c in row]
    marks = {m for m in ("✗ threads", "✗ registers", "✗ warps") if any(m in c for c in text)}
    assert marks == {"✗ threads", "✗ registers"}


def test_the_two_refusals_name_their_rule(t2):
    assert "registers" in str(validate("thread_tile_2d", BM=256, BN=128, TM=16, TN=8))
    refused = str(validate("thread_tile_2d", BM=32, BN=128, TM=8, TN=8))
    assert refused.startswith("**Refused.**") and "64 threads" in refused and "BN=128" in refused


def test_no_config_the_chapter_compiles_spills(t2, nvrtc):
    """'The spilled bytes column is what the register rule protects': none of the valid configs spills."""
    p = get("thread_tile_2d").defaults()
    for params in (p, dict(p, BK=8), dict(p, BK=32), dict(p, TM=4, TN=4), dict(p, BM=64, BN=64, TM=4, TN=4),
                   dict(p, BM=64, BN=64), dict(p, TM=16, TN=8)):
        res, _ = of_config("thread_tile_2d", params, t2.device)
        assert not res.spills, params


def test_small_problems_leave_the_gpu_idle(t2):
    """'Small problems leave most of the GPU idle: a block tile of 128 x 128 gives few blocks at small n.'"""
    spec = get("thread_tile_2d")
    rows = sorted((r for r in t2.where(**spec.defaults()) if r["M"] == r["N"] == r["K"] and r["M"] % 64 == 0),
                  key=lambda r: r["M"])
    gx, gy, _ = spec.grid(rows[0]["params"], rows[0]["M"], rows[0]["N"], rows[0]["K"], t2.device)
    assert gx * gy < t2.device.sm_count
    assert rows[0]["tflops"] < 0.5 * rows[-1]["tflops"]


def test_a_small_tile_is_bound_by_shared_memory(t2, nvrtc):
    """'A small tile reads shared memory for almost every multiply-add: shared memory, not arithmetic, sets
    the pace.'"""
    big = largest_square(t2.rows)
    small = min(big, key=lambda r: register_tiles.fma_per_load(r["params"]["TM"], r["params"]["TN"]))
    assert register_tiles.fma_per_load(small["params"]["TM"], small["params"]["TN"]) <= 1
    assert loads.shared_bound("thread_tile_2d", small["params"], t2.device) < t2.device.fp32_tflops
    assert small["tflops"] == min(r["tflops"] for r in big)


def test_doubling_a_square_tile_doubles_the_ratio():
    for t in (2, 4, 8):
        assert register_tiles.fma_per_load(2 * t, 2 * t) == 2 * register_tiles.fma_per_load(t, t)


def test_every_config_sits_under_the_compute_roof(t2):
    """Chapter: 'All of them sit under the same roof (the FP32 peak), so none is limited by memory bandwidth.'"""
    from helpers.models.roofline import intensity
    for r in largest_square(t2.rows):
        assert intensity(r["kernel"], r["params"], r["M"], r["N"], r["K"]) > t2.device.ridge


def test_a_16x16_tile_is_refused(t2):
    """Chapter: 'A 16 x 16 tile would buy the most, but no thread may hold that many values.'"""
    costs = {(tm, tn): register_tiles.tile_cost(128, 128, tm, tn, t2.device) for tm, tn in ((8, 8), (16, 8), (16, 16))}
    assert costs[(16, 16)].why == "needs more registers"
    assert costs[(16, 16)].fma_per_load == max(c.fma_per_load for c in costs.values())
