"""The sector model of chapter "Global-memory coalescing", the spec's sweep, and the schedule summary."""
import numpy as np
import pytest

from helpers import coalescing as co
from helpers.coalescing import figure, per_k_step, warp_access, warp_load
from helpers.registry import ConfigError, get
from helpers.specs import coalesced as spec_module


# ------------------------------------------------------------------ sector model
def test_lanes_fill_rows_of_the_block_first():
    assert co.lanes(32, 32)[:3] == [(0, 0), (1, 0), (2, 0)]
    assert co.lanes(8, 8)[8] == (0, 1)                 # lane 8 starts the second row of an 8-wide block
    assert co.lanes(64, 4, warp=1)[0] == (32, 0)        # second warp of a 64-wide block: same row, next 32 x


def test_naive_mapping_a_load_touches_32_sectors():
    r = warp_load("naive", "A", 32, 32)
    assert (r["sectors"], r["lines"], r["bytes_moved"], r["bytes_used"]) == (32, 32, 1024, 128)
    assert r["efficiency"] == 0.125


def test_naive_mapping_b_load_is_a_broadcast():
    r = warp_load("naive", "B", 32, 32)
    assert (r["distinct_addresses"], r["sectors"], r["lines"], r["bytes_moved"], r["bytes_used"]) == (1, 1, 1, 32, 4)


def test_naive_mapping_c_store_is_scattered():
    r = warp_access("naive", "C", 32, 32)
    assert (r["sectors"], r["bytes_moved"], r["bytes_used"], r["efficiency"]) == (32, 1024, 128, 0.125)


def test_coalesced_b_load_and_c_store_use_every_byte():
    for op in ("B", "C"):
        r = warp_access("coalesced", op, 32, 8)
        assert (r["sectors"], r["lines"], r["bytes_moved"], r["efficiency"]) == (4, 1, 128, 1.0)


def test_coalesced_a_load_is_a_broadcast():
    r = warp_load("coalesced", "A", 64, 4)
    assert (r["distinct_addresses"], r["sectors"]) == (1, 1)


def test_coalesced_8x8_block_spans_four_rows():
    r = warp_load("coalesced", "B", 8, 8)          # 8 consecutive floats = 1 sector, same k row for all 4 rows
    assert r["distinct_addresses"] == 8 and r["sectors"] == 1 and r["efficiency"] == 1.0
    a = warp_load("coalesced", "A", 8, 8)          # 4 rows of A -> 4 addresses K floats apart
    assert (a["distinct_addresses"], a["sectors"], a["lines"]) == (4, 4, 4)
    c = warp_access("coalesced", "C", 8, 8)        # 4 rows x 32 bytes: fully used, but 4 lines
    assert (c["sectors"], c["lines"], c["efficiency"]) == (4, 4, 1.0)


def test_lines_per_k_step_grow_as_the_block_narrows():
    lines = {bx: per_k_step("coalesced", bx, 1024 // bx if bx < 32 else 2048 // bx // 8)["lines"] for bx in (8, 16, 32, 64)}
    assert lines == {8: 5, 16: 3, 32: 2, 64: 2}
    assert per_k_step("naive", 32, 32)["lines"] == 33
    assert per_k_step("coalesced", 8, 8)["rows"] == 4 and per_k_step("coalesced", 8, 8)["cols"] == 8


def test_bad_mapping_or_operand_is_refused():
    with pytest.raises(ValueError):
        warp_access("diagonal", "A", 32, 32)
    with pytest.raises(ValueError):
        warp_access("naive", "D", 32, 32)


def test_figure_has_a_menu_per_block():
    fig = figure(blocks=((32, 32), (8, 8)))
    assert len(fig.layout.updatemenus[0].buttons) == 2 and len(fig.data) == 4
    assert list(fig.data[0].y) == [1024, 32, 1024, 32, 128, 128]   # naive A, B, C; coalesced A, B, C (32x32)


# ------------------------------------------------------------------------ spec
def test_default_and_sweep():
    spec = get("coalesced")
    assert spec.defaults() == spec_module.DEFAULT == {"BX": 64, "BY": 4, "SWAP": 1}
    shapes = {s for p, s in spec_module.SWEEP if p == spec_module.DEFAULT}
    assert {(n, n, n) for n in (1024, 2048, 4096)} <= shapes
    at4096 = {(p["BX"], p["BY"], p["SWAP"]) for p, s in spec_module.SWEEP if s == (4096,) * 3}
    for bx, by in ((8, 8), (16, 16), (32, 8), (32, 16), (32, 32), (64, 4), (128, 2)):
        assert (bx, by, 0) in at4096 and (bx, by, 1) in at4096
    assert len(spec_module.SWEEP) <= 32
    assert len({(tuple(sorted(p.items())), s) for p, s in spec_module.SWEEP}) == len(spec_module.SWEEP)


def test_grid_swaps_and_covers_c():
    spec = get("coalesced")
    assert spec.grid({"BX": 64, "BY": 4, "SWAP": 0}, 1000, 3000, 7) == (47, 250, 1)
    assert spec.grid({"BX": 64, "BY": 4, "SWAP": 1}, 1000, 3000, 7) == (250, 47, 1)


@pytest.mark.parametrize("swap", [0, 1])
@pytest.mark.parametrize("bx,by", [(8, 8), (64, 4), (256, 1), (32, 32)])
@pytest.mark.parametrize("M,N", [(1, 1), (7, 13), (127, 129), (33, 4100)])
def test_every_element_written_once(bx, by, swap, M, N):
    """NumPy emulation of the kernel's index math: each C element exactly once, never outside."""
    p = {"BX": bx, "BY": by, "SWAP": swap}
    (gx, gy), row_strip, col_strip = co.strips(p, M, N)
    tx, ty = np.meshgrid(np.arange(bx), np.arange(by), indexing="ij")
    hits = np.zeros((M, N), dtype=int)
    for r, c in zip(row_strip, col_strip):
        row, col = r * by + ty, c * bx + tx
        ok = (row < M) & (col < N)
        np.add.at(hits, (row[ok], col[ok]), 1)
    assert (hits == 1).all()


def test_invalid_blocks_are_refused():
    spec = get("coalesced")
    with pytest.raises(ConfigError, match="1024"):
        spec.validate(BX=64, BY=32)
    with pytest.raises(ConfigError, match="warps"):
        spec.validate(BX=4, BY=4)


# ------------------------------------------------------------- schedule trace
def test_schedule_summary_of_a_round_robin_trace():
    p0, p1 = {"BX": 64, "BY": 4, "SWAP": 0}, {"BX": 64, "BY": 4, "SWAP": 1}
    s0 = co.schedule_summary(co.simulate_trace(p0, 4096, 4096), p0, 4096, 4096, 4096)
    s1 = co.schedule_summary(co.simulate_trace(p1, 4096, 4096), p1, 4096, 4096, 4096)
    assert s0["blocks"] == s1["blocks"] == 64 * 1024
    assert s0["median"]["in_flight"] == s1["median"]["in_flight"] == 132 * 8
    # x walks N: the blocks in flight cover every column strip (all of B), 8 per SM
    assert s0["median"]["col_strips"] == 64 and s0["median"]["b_mb"] == 64.0
    assert s0["median"]["sm_col_strips"] == 8
    # x walks M: every row strip (all of A), but an SM's blocks share one or two column strips
    assert s1["median"]["row_strips"] == 1024 and s1["median"]["sm_col_strips"] <= 2
    assert s1["first_blocks_sm"][:3] == [0, 1, 2] and s1["sms"] == 132


def test_trace_source_compiles_offline():
    pytest.importorskip("cuda.bindings")
    from helpers import resources as R

    _, log, _ = R._compile_cubin(co.TRACE_SOURCE, "trace.cu", "sgemm_coalesced_traced<64, 4, 1>",
                                 ("-std=c++17",), "sm_90")
    assert "0 bytes spill stores" in log


def test_schedule_recorder_is_registered():
    from helpers.record import TABLE_RECORDERS

    assert TABLE_RECORDERS["coalescing_schedule"] is co.record_schedule
