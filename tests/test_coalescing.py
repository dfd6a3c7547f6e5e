"""The sector and L1-line models of chapters "The naive kernel" and "Global-memory coalescing",
the grid-order analysis, the schedule summary, and the figures and tables built on them."""
import numpy as np
import pytest

from helpers.figures import coalescing as figures
from helpers.figures import style
from helpers.hardware import WARP_SIZE, Device
from helpers.models import coalescing as co
from helpers.models.coalescing import per_k_step, warp_access

H200 = Device.from_datasheet("NVIDIA H200")


def ceiling(device: Device, lines: int) -> float:
    return device.sm_count * device.clock_mhz * 1e6 * 2 * WARP_SIZE / lines / 1e12


def timing_row(kernel, params, n, tflops, cublas=50.0):
    ms = 2 * n**3 / tflops / 1e9
    return {"kernel": kernel, "params": params, "M": n, "N": n, "K": n, "tflops": tflops, "cublas_tflops": cublas,
            "ms": ms, "ms_p20": 0.99 * ms, "ms_p80": 1.01 * ms, "ok": True, "rel_err": 0.0}


# ------------------------------------------------------------------ sector model
def test_lanes_fill_rows_of_the_block_first():
    assert co.lanes(32, 32)[:3] == [(0, 0), (1, 0), (2, 0)]
    assert co.lanes(8, 8)[8] == (0, 1)                 # lane 8 starts the second row of an 8-wide block
    assert co.lanes(64, 4, warp=1)[0] == (32, 0)        # second warp of a 64-wide block: same row, next 32 x


def test_element_follows_each_kernels_index_math():
    assert co.element("naive", 3, 5) == (3, 5)          # row = threadIdx.x
    assert co.element("coalescing", 3, 5) == (5, 3)     # col = threadIdx.x
    with pytest.raises(ValueError):
        co.element("smem_tiling", 0, 0)


def test_naive_mapping_a_load_touches_32_sectors():
    r = warp_access("naive", "A", 32, 32)
    assert (r["sectors"], r["lines"], r["bytes_moved"], r["bytes_used"], r["efficiency"]) == (32, 32, 1024, 128, 0.125)


def test_naive_mapping_b_load_is_a_broadcast():
    r = warp_access("naive", "B", 32, 32)
    assert (r["distinct_addresses"], r["sectors"], r["lines"], r["bytes_moved"], r["bytes_used"]) == (1, 1, 1, 32, 4)


def test_coalesced_b_load_and_c_store_use_every_byte():
    for op in ("B", "C"):
        r = warp_access("coalescing", op, 32, 8)
        assert (r["sectors"], r["lines"], r["bytes_moved"], r["efficiency"]) == (4, 1, 128, 1.0)
    a = warp_access("coalescing", "A", 64, 4)
    assert (a["distinct_addresses"], a["sectors"]) == (1, 1)


def test_coalesced_8x8_block_spans_four_rows():
    b = warp_access("coalescing", "B", 8, 8)
    assert (b["distinct_addresses"], b["sectors"], b["efficiency"]) == (8, 1, 1.0)
    a = warp_access("coalescing", "A", 8, 8)
    assert (a["distinct_addresses"], a["sectors"], a["lines"]) == (4, 4, 4)


def test_lines_per_k():
    assert {bx: per_k_step("coalescing", bx, 256 // bx if bx < 64 else 4)["lines"] for bx in (8, 16, 32, 64)} == \
        {8: 5, 16: 3, 32: 2, 64: 2}
    assert per_k_step("coalescing", 256, 1)["lines"] == 2
    assert {s: per_k_step("naive", *s)["lines"] for s in ((32, 32), (16, 16), (8, 8), (4, 64))} == \
        {(32, 32): 33, (16, 16): 17, (8, 8): 9, (4, 64): 5}
    s = per_k_step("coalescing", 8, 8)
    assert (s["rows"], s["cols"]) == (4, 8)


def test_bad_operand_is_refused():
    with pytest.raises(ValueError):
        warp_access("naive", "D", 32, 32)


def test_l1_ceiling_takes_the_device():
    assert co.l1_ceiling(64, 4, H200) == pytest.approx(ceiling(H200, 2))
    assert co.l1_ceiling(32, 32, H200, "naive") == pytest.approx(ceiling(H200, 33))
    older = Device.emulating("sm_86")
    assert co.l1_ceiling(8, 8, older) == pytest.approx(ceiling(older, 5))
    assert co.l1_ceiling(8, 8, older) != co.l1_ceiling(8, 8, H200)


# ------------------------------------------------------------------ grid order
def test_write_counts_cover_c_once_in_both_orders():
    for swap in (0, 1):
        for M, N in ((127, 129), (33, 4100), (1, 1)):
            assert (co.write_counts({"BX": 64, "BY": 4, "SWAP": swap}, M, N) == 1).all()
    t = figures.write_table([({"BX": 64, "BY": 4, "SWAP": 1}, 127, 129)])
    assert t.rows[0]["written once"] == 127 * 129 and t.rows[0]["never"] == 0 and t.rows[0]["twice or more"] == 0


SWEEP = [timing_row("coalescing", {"BX": bx, "BY": by, "SWAP": s}, n, t)
         for (bx, by, n), (t0, t1) in {(8, 8, 4096): (3.3, 3.3), (32, 32, 4096): (6.0, 6.1), (32, 4, 4096): (5.6, 6.2),
                                       (256, 1, 4096): (4.9, 5.0), (64, 4, 2048): (6.6, 6.7)}.items()
         for s, t in ((0, t0), (1, t1))]


def test_swap_gain_and_analysis():
    gains = {(g["n"], g["BX"], g["BY"]): g["gain_pct"] for g in co.swap_gain(SWEEP)}
    assert gains[(4096, 32, 4)] == pytest.approx(100 * (6.2 / 5.6 - 1))
    a = {x["n"]: x for x in co.swap_analysis(SWEEP, H200)}
    assert a[2048]["fits_in_l2"] and not a[4096]["fits_in_l2"]          # 48 MB and 192 MB against 60 MB
    assert [(g["BX"], g["BY"]) for g in a[4096]["against"]] == [(256, 1)]
    assert not a[4096]["against"][0]["within_spread"]                  # +-1% bands: 2% against 10.7% is clear
    assert a[4096]["against"][0]["below"]["BX"] == 32 and a[4096]["against"][0]["below"]["BY"] == 4


def test_ceiling_fit():
    fit = co.ceiling_fit([timing_row("naive", {"BX": 32, "BY": 32}, 4096, 0.5)], H200, "naive")
    assert fit[0]["lines"] == 33 and fit[0]["ratio"] == pytest.approx(0.5 / ceiling(H200, 33))


# ------------------------------------------------------------------ schedule
def test_schedule_summary_of_a_simulated_trace():
    for swap, cols in ((0, 64), (1, 2)):
        p = {"BX": 64, "BY": 4, "SWAP": swap}
        trace = co.simulate_trace(p, 4096, 4096, H200, per_sm=8)
        s = co.schedule_summary(trace, p, 4096, 4096, 4096)
        assert s["median"]["in_flight"] == H200.sm_count * 8 and s["sms"] == H200.sm_count
        assert s["median"]["col_strips"] == pytest.approx(cols, abs=1)


def test_schedule_table_and_figure():
    p = {"BX": 64, "BY": 4, "SWAP": 1}
    row = co.schedule_summary(co.simulate_trace(p, 1024, 1024, H200), p, 1024, 1024, 1024)
    row["kernel_ms"] = 1.0
    fig = figures.schedule_figure([row], "test")
    assert [t.name for t in fig.data][0] == "blocks resident per SM" and len(fig.data) == 3
    assert figures.schedule_table([row]).rows[0]["config"] == "64x4 SWAP=1"


# ------------------------------------------------------------------ figures and tables
def test_warp_map_marks_one_warp():
    fig = figures.warp_map(shapes=((32, 32), (8, 8)), mapping="naive")
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["block 32x32", "block 8x8"]
    z = np.array(fig.data[0].z)
    assert (z == 2).sum() == 32 and (z[:32, 0] == 2).all()            # naive 32x32: the first warp is a column
    z = np.array(figures.warp_map(shapes=((64, 4),), mapping="coalescing").data[0].z)
    assert (z[0, :32] == 2).all() and (z == 2).sum() == 32           # coalescing: along a row


def test_access_figure_values():
    fig = figures.access_figure(blocks=((32, 32), (8, 8)))
    assert len(fig.layout.updatemenus[0].buttons) == 2 and len(fig.data) == 4
    assert list(fig.data[0].x) == [1024, 32, 1024, 32, 128, 128]   # naive A, B, C; coalescing A, B, C (32x32)
    assert list(fig.data[0].y)[0] == "naive: load A"
    t = figures.access_table([("naive", 32, 32)])
    assert [r["32-byte sectors"] for r in t.rows] == [32, 1, 32]


def test_shapes_figure_sorts_numerically():
    rows = [timing_row("naive", {"BX": bx, "BY": by}, n, 1.0)
            for n in (1024, 4096) for bx, by in ((64, 4), (8, 32), (16, 16), (4, 64), (32, 8), (8, 8))]
    fig = figures.shapes_figure(rows, "test", "Naive")
    assert list(fig.data[-1].y) == ["4x64", "8x8", "8x32", "16x16", "32x8", "64x4"]
    assert fig.layout.yaxis.type == "category" and len(fig.layout.updatemenus[0].buttons) == 2


def test_ceiling_figure_values_and_order():
    rows = [timing_row("coalescing", {"BX": bx, "BY": by, "SWAP": s}, 4096, t)
            for bx, by, s, t in ((8, 8, 0, 3.3), (8, 8, 1, 3.2), (64, 4, 0, 5.8), (64, 4, 1, 6.4), (16, 16, 1, 5.4))]
    fig = figures.ceiling_figure(rows, H200, "test", "coalescing", order=figures.wide_key)
    assert list(fig.data[0].y) == ["8x8 · 5 lines", "16x16 · 3 lines", "64x4 · 2 lines"]
    assert list(fig.data[0].x) == pytest.approx([ceiling(H200, 5), ceiling(H200, 3), ceiling(H200, 2)])
    assert list(fig.data[1].x) == [3.3, 5.4, 6.4]                       # the better grid order


def test_blocks_and_swap_figures():
    fig = figures.blocks_figure(SWEEP, "test")              # only n = 4096 has several shapes: one step, no menu
    assert len(fig.data) == 2 and not fig.layout.updatemenus
    assert list(fig.data[0].y) == ["8x8", "32x32", "32x4", "256x1"] and list(fig.data[1].x) == [3.3, 6.1, 6.2, 5.0]
    swap = figures.swap_figure(SWEEP, "test")
    assert [t.name for t in swap.data] == ["n = 2048", "n = 4096"]
    assert swap.data[1].x[-1] == pytest.approx(100 * (5.0 / 4.9 - 1))       # 256x1, widest last
    assert swap.data[1].y[-1] == "256x1 · B/A 256"
    # each label two spaces off its bar's end, on the side the bar ends, clear of the band's whisker
    for x, t in zip(swap.data[1].x, swap.data[1].text):
        gap = style.WHISKER_GAP
        assert t == "" if x is None else t.startswith(gap) if x >= 0 else t.endswith(gap)


def test_occupancy_uses_the_device_model():
    t = figures.occupancy_table("coalescing", {"BX": 8, "BY": 8, "SWAP": 1}, [H200, Device.emulating("sm_86")])
    h, a = t.rows
    assert h["block limit per SM"] == H200.max_blocks_per_sm and h["blocks per SM"] == H200.max_blocks_per_sm
    assert a["blocks per SM"] == Device.emulating("sm_86").max_blocks_per_sm and a["limited by"] == "blocks per SM"
    assert a["warps per SM"] == f"{2 * a['blocks per SM']} of {Device.emulating('sm_86').max_warps_per_sm}"


def test_launch_and_tolerance_tables():
    t = figures.launch_table("naive", [(1000, 3000, 777)], H200)
    assert t.rows[0]["instantiation"] == "sgemm_naive<32, 32>" and t.rows[0]["grid (x, y, z)"] == "(32, 94, 1)"
    tol = figures.tolerance_table((1, 4))
    assert tol.rows[1]["tolerance 8·eps·sqrt(K)"] == pytest.approx(2 * tol.rows[0]["tolerance 8·eps·sqrt(K)"])


def test_figures_of_rows_without_a_sweep():
    """A quick live run times the default config only: the figures say so instead of failing."""
    rows = [timing_row("coalescing", {"BX": 64, "BY": 4, "SWAP": 1}, n, 5.0) for n in (256, 512, 1024)]
    assert figures.blocks_figure(rows, "live").layout.annotations[0].text.startswith("no sweep")
    assert figures.swap_figure(rows, "live").layout.annotations[0].text.startswith("no sweep")
    assert figures.shapes_figure(rows, "live", "x").layout.annotations[0].text.startswith("no sweep")
    assert len(figures.ceiling_figure(rows, H200, "live", "coalescing").data[1].x) == 1


def test_a_contradiction_within_the_spread_is_called_so():
    rows = [dict(r) for r in SWEEP]
    for r in rows:
        if r["params"]["BX"] == 256 and r["params"]["SWAP"] == 0:
            r["ms_p80"] = r["ms"] * 1.3                                  # SWAP=0 launches of 256x1 varied
    a = {x["n"]: x for x in co.swap_analysis(rows, H200)}
    (g,) = a[4096]["against"]
    assert g["within_spread"] and g["gain_hi_pct"] > a[4096]["against"][0]["below"]["gain_lo_pct"]
    g = co.swap_gain(rows)[-1]
    assert g["gain_lo_pct"] < g["gain_pct"] < g["gain_hi_pct"]
