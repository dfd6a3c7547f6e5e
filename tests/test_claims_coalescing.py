"""Claims of the chapter "Global-memory coalescing" that its prose states, checked against
the recorded data: each test fails if a re-recording says otherwise."""
import pytest

import helpers
from helpers.figures import coalescing as figures
from helpers.figures.results import percent_of_cublas
from helpers.measure.results import ResultSet
from helpers.models import coalescing as co


@pytest.fixture(autouse=True)
def recorded(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")


@pytest.fixture
def rs():
    return helpers.results("coalescing")


def largest_sweep(rs):
    n = max(r["M"] for r in rs.rows if sum(1 for x in rs.rows if x["M"] == r["M"]) > 2)
    return n, [r for r in rs.rows if r["M"] == n and r["N"] == n and r["K"] == n]


def test_all_recorded_rows_are_correct(rs):
    assert rs.all_correct


def test_an_order_of_magnitude_over_naive_and_far_from_cublas():
    """'The same arithmetic runs an order of magnitude faster, and is still far from cuBLAS'."""
    pair, _ = figures.step_rows("naive", "coalescing")
    naive, coalesced = pair.values()
    assert coalesced["tflops"] / naive["tflops"] >= 5
    assert percent_of_cublas(coalesced) < 25


def test_8x8_is_by_far_the_slowest(rs):
    """'The 8 × 8 block stands out as by far the slowest.'"""
    n, rows = largest_sweep(rs)
    eight = max(r["tflops"] for r in rows if (r["params"]["BX"], r["params"]["BY"]) == (8, 8))
    others = min(r["tflops"] for r in rows if (r["params"]["BX"], r["params"]["BY"]) != (8, 8))
    assert others / eight >= 1.3


def test_swap_1_wins_for_most_wide_blocks(rs):
    """Deep dive, 'The grid order': 'For most blocks at least 32 wide, SWAP=1 beats SWAP=0 at the largest size.'"""
    n, _ = largest_sweep(rs)
    wide = [g for g in co.swap_gain(rs.rows) if g["n"] == n and g["BX"] >= 32]
    assert sum(g["gain_pct"] > 0 for g in wide) > len(wide) / 2


def test_narrow_blocks_on_their_ceiling_wide_ones_below(rs):
    """'The narrow blocks sit on their ceiling ... The wide blocks, at two lines per step, stop well short'."""
    n, rows = largest_sweep(rs)
    fit = co.ceiling_fit(rows, rs.device)
    for bx, by in ((8, 8), (16, 16)):
        assert max(f["ratio"] for f in fit if (f["BX"], f["BY"]) == (bx, by)) >= 0.95
    assert all(f["ratio"] <= 0.85 for f in fit if f["lines"] == 2)


def test_swap_summary_follows_the_data(rs):
    """The summary of the two L2 predictions (deep dive) is computed; here it is held against the analysis."""
    text = str(figures.swap_summary(rs))
    for a in co.swap_analysis(rs.rows, rs.device):
        assert f"n = {a['n']}" in text
        sentence = text[text.index(f"At n = {a['n']},"):].split(" At n = ")[0]
        if a["fits_in_l2"]:
            worst = max(abs(g["gain_pct"]) for g in a["gains"])
            assert f"at most {worst:.1f}%" in sentence and ("as predicted" in sentence) == (worst <= 3)
        else:
            square = max(g["gain_pct"] for g in a["gains"] if g["rereads_b_over_a"] == 1)
            wide = max(g["gain_pct"] for g in a["gains"] if g["rereads_b_over_a"] >= 4)
            assert f"up to {wide:+.1f}%" in text
            assert ("against the prediction" in text) == (wide <= square)


def test_swap_summary_says_when_the_data_go_against_the_prediction(rs):
    rows = [dict(r, tflops=r["tflops"] * (1.3 if r["params"]["BX"] == r["params"]["BY"] and r["params"]["SWAP"]
                                           else 1.0)) for r in rs.rows]
    flipped = ResultSet(rs.chapter, rows, rs.device, rs.source, False)
    assert "against the prediction" in str(figures.swap_summary(flipped))


def test_256x1_is_the_two_line_shape_furthest_below_its_ceiling(rs):
    """The deep dive's exercise: 'yet it runs furthest below the L1 ceiling in both grid orders'."""
    n, rows = largest_sweep(rs)
    fit = [f for f in co.ceiling_fit(rows, rs.device) if f["lines"] == 2]
    mine = [f["ratio"] for f in fit if (f["BX"], f["BY"]) == (256, 1)]
    assert len(mine) == 2 and max(mine) < min(f["ratio"] for f in fit if (f["BX"], f["BY"]) != (256, 1))


def test_the_schedule_shows_the_strips_the_argument_expects():
    """Deep dive: 'with SWAP=0 the blocks in flight span every column strip (all of B) ...; with SWAP=1, one or two'."""
    rows = helpers.results("coalescing_schedule").rows
    assert {r["params"]["SWAP"] for r in rows} == {0, 1}
    for r in rows:
        m = r["median"]
        if r["params"]["SWAP"] == 0:
            assert m["col_strips"] == r["N"] // r["params"]["BX"]
        else:
            assert m["col_strips"] <= 3


def test_swap_text_names_each_contradiction_and_its_spread(rs):
    text = str(figures.swap_text(rs))
    for a in co.swap_analysis(rs.rows, rs.device):
        for g in ([] if a["fits_in_l2"] else a["against"]):
            assert f"{g['BX']}x{g['BY']} gains {g['gain_pct']:+.1f}%" in text
            if g["within_spread"]:
                assert f"from {g['gain_lo_pct']:+.1f}% to {g['gain_hi_pct']:+.1f}%: within that spread" in text
    assert ("contradict" in text) == any(a["against"] for a in co.swap_analysis(rs.rows, rs.device)
                                         if not a["fits_in_l2"])
