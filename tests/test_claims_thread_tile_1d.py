"""The prose of the chapter "1D thread tiles" against the recorded data and the offline compile:
each test fails when the data (or the compiler) says otherwise."""
import pytest

from helpers.measure import results
from helpers.figures.tiling import largest_square
from helpers.models import loads, roofline
from helpers.models.occupancy import of_config


@pytest.fixture(scope="module")
def recorded():
    return results.recorded("thread_tile_1d"), results.recorded("smem_tiling")



def test_every_recorded_row_is_correct(recorded):
    assert recorded[0].all_correct


def test_the_order_text_counts_the_k_slices_that_compile_alike(recorded, nvrtc):
    """Deep dive: 'Of the N k-slices recorded in both orders, M compile to loops with exactly the same opcode counts'."""
    t1 = recorded[0]
    slices = sorted({r["params"]["BK"] for r in t1.rows if r["params"]["LOOP"] == 0})
    assert slices
    alike = sum(loads.order_difference({"BK": bk}, t1.device).same_counts for bk in slices)
    text = str(loads.loop_order_text(t1.rows, t1.device, t1.source))
    assert f"Of the {len(slices)} k-slices" in text and f"{alike} compile to loops with exactly the same" in text


def test_ptx_loads_b_once_per_k_and_sass_merges_a(recorded, nvrtc):
    """Deep dive: 'Every load is a scalar ld.shared.f32 ...'; 'four ld.shared.f32 become one LDS.128'; the
    chapter: 'the compiler turns both into almost the same machine code'."""
    device = recorded[0].device
    p8 = {"BM": 64, "BN": 64, "BK": 8, "TM": 8}
    for loop in (0, 1):
        step = loads.ptx_step("thread_tile_1d", dict(p8, LOOP=loop), device)
        assert step.counts["ld.shared.f32"] == 8 * 8 + 8
        assert not any(op.startswith("ld.shared.v") for op in step.counts)
        c = loads.loop_counts("thread_tile_1d", dict(p8, LOOP=loop), device)
        per = c.k_per_pass // 8
        assert (c.counts["LDS"] // per, c.counts["LDS.128"] // per) == (8, 16)


def test_some_k_slice_runs_the_two_orders_at_different_speeds(recorded, nvrtc):
    """Deep dive, 'Same instructions, different speed': equal opcode counts, yet the two orders run at
    different speeds at some k-slice."""
    t1 = recorded[0]
    assert any(d["apart"] and d["same_counts"] for d in loads.loop_order_rows(t1.rows, t1.device))


def test_the_bound_rose_and_the_share_of_it_fell(recorded, nvrtc):
    """Deep dive: 'Reaching a smaller share of a higher bound means something else now holds the kernel back.'"""
    t1, sm = recorded
    grid = largest_square(t1.where(BM=64, BN=64, LOOP=1))
    fastest = sorted(grid, key=lambda r: -r["tflops"])[:3]
    smem = largest_square(sm.where(kernel="smem_tiling", TILE=32, SWAP=1))[0]
    b0 = loads.shared_bound("smem_tiling", smem["params"], sm.device)
    for r in fastest:
        b1 = loads.shared_bound("thread_tile_1d", r["params"], t1.device)
        assert b1 > b0 and r["tflops"] / b1 < smem["tflops"] / b0


def test_thread_tile_and_k_slice_leave_the_intensity_unchanged(recorded):
    """Deep dive, 'Every config on the roofline': 'TM and BK leave the block tile, and so the arithmetic
    intensity, unchanged.'"""
    rows = largest_square(recorded[0].where(BM=64, BN=64))
    assert len({round(roofline.intensity("thread_tile_1d", r["params"], r["M"], r["N"], r["K"]), 9)
                for r in rows}) == 1


def test_more_results_per_thread_cost_registers(recorded, nvrtc):
    """'More results per thread cost registers, and registers cost resident warps.'"""
    device = recorded[0].device
    regs = [of_config("thread_tile_1d", {"TM": tm, "BK": 32}, device)[0].registers for tm in (4, 8, 16)]
    assert regs == sorted(regs) and regs[0] < regs[-1]


def test_loads_per_result_in_the_prose():
    assert loads.per_result("thread_tile_1d", {"BM": 64, "BN": 64, "TM": 8}, 4096)["shared"] == 4096 * 9 / 8
    assert loads.per_result("thread_tile_1d", {"TM": 4}, 4096)["shared"] == 4096 * 5 / 4
    assert loads.per_result("thread_tile_1d", {"TM": 16}, 4096)["shared"] == 4096 * 17 / 16
    assert loads.per_result("thread_tile_1d", {"BM": 64, "BN": 64}, 4096)["global"] == 4096 / 32
