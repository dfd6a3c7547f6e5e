"""The bank model (helpers.banks) on textbook patterns and on kernel 07's accesses."""
import pytest

from helpers.banks import (Access, a_load_pieces, ideal_wavefronts, kernel_access, schedule, table,
                           tile_totals, wavefronts)


# ------------------------------------------------------------ textbook cases
def test_stride_one_32bit_is_one_wavefront():
    assert wavefronts([[i] for i in range(32)]) == 1


def test_stride_32_words_is_32_wavefronts():
    assert wavefronts([[32 * i] for i in range(32)]) == 32


def test_stride_two_is_two_way():
    assert wavefronts([[2 * i] for i in range(32)]) == 2


def test_odd_stride_is_conflict_free():
    assert wavefronts([[33 * i] for i in range(32)]) == 1


def test_broadcast_is_not_a_conflict():
    assert wavefronts([[7] for _ in range(32)]) == 1
    # two addresses in one bank is a conflict, the same address twice is not
    assert wavefronts([[0], [32]] + [[0]] * 30) == 2


def test_lds128_needs_four_wavefronts_at_least():
    contiguous = [[4 * i + j for j in range(4)] for i in range(32)]
    assert wavefronts(contiguous, width=4) == 4
    assert ideal_wavefronts(contiguous, width=4) == 4
    same = [[0, 1, 2, 3] for _ in range(32)]          # every lane the same float4: broadcast per phase
    assert wavefronts(same, width=4) == 4


def test_lds128_conflicts_are_counted_per_quarter_warp():
    # lanes 8 floats apart: lanes i and i+4 of each quarter warp share banks
    stride8 = [[8 * i + j for j in range(4)] for i in range(32)]
    assert wavefronts(stride8, width=4) == 8
    # lanes 0 and 8 share banks but sit in different quarter warps: no conflict
    wrap = [[4 * (i % 8) + j + 32 * (i // 8) for j in range(4)] for i in range(32)]
    assert wavefronts(wrap, width=4) == 4


def test_lds64_is_served_by_half_warps():
    assert wavefronts([[2 * i, 2 * i + 1] for i in range(32)], width=2) == 2


def test_inactive_lanes_cost_nothing():
    words = [[i] if i < 8 else [] for i in range(32)]
    assert wavefronts(words) == 1 and ideal_wavefronts(words) == 1
    assert wavefronts([[] for _ in range(32)]) == 0


def test_schedule_numbers_the_serialised_words():
    words = [[32 * (i % 2)] for i in range(32)]        # two words in bank 0
    s = schedule(words)
    assert {s[0][0], s[1][32]} == {1, 2}


def test_access_reports_instruction_and_conflicts():
    acc = Access("x", [[32 * i] for i in range(32)], 1, "store")
    assert acc.instruction == "STS" and acc.conflicts() == 31


def test_bad_width():
    with pytest.raises(ValueError):
        wavefronts([[0]] * 32, width=3)


# ------------------------------------------------------------ kernel 07
def test_alignment_decides_the_compiled_reads():
    assert a_load_pieces(0) == [4] and a_load_pieces(130) == [2, 2] and a_load_pieces(129) == [1, 2, 1]


def test_transposed_a_store_conflicts_without_a_fix():
    for BK, ways in ((8, 2), (16, 4)):
        acc = kernel_access("A store", BK=BK, SPLIT=1, PAD=0, SWIZZLE=0)
        assert acc.width == 1 and acc.wavefronts() == ways


@pytest.mark.parametrize("BK,PAD,ways", [(8, 4, 1), (8, 1, 2), (8, 2, 2), (16, 2, 1), (16, 4, 2), (16, 1, 2)])
def test_padding_fixes_the_store_only_for_the_right_pad(BK, PAD, ways):
    assert kernel_access("A store", BK=BK, PAD=PAD, SWIZZLE=0).wavefronts() == ways


@pytest.mark.parametrize("BK", [8, 16])
def test_swizzle_fixes_the_store_and_keeps_float4_contiguous(BK):
    for j in range(4):
        assert kernel_access("A store", BK=BK, SWIZZLE=1, j=j).wavefronts() == 1
    for k in range(BK):
        acc = kernel_access("A load", BK=BK, SWIZZLE=1, k=k)
        assert acc.width == 4
        assert all(ws == list(range(ws[0], ws[0] + 4)) and ws[0] % 4 == 0 for ws in acc.words)


def test_split_tile_fixes_the_b_reads():
    assert kernel_access("B load", SPLIT=0).wavefronts() == 8
    assert kernel_access("B load", SPLIT=1).wavefronts() == 4


def test_b_store_is_conflict_free():
    assert kernel_access("B store", BK=16).wavefronts() == 4


def test_default_layout_is_conflict_free():
    tot = tile_totals(BK=16, SPLIT=1, PAD=0, SWIZZLE=1)
    assert tot["load"]["conflicts"] == 0 and tot["store"]["conflicts"] == 0


def test_tile_totals_count_every_instruction():
    tot = tile_totals(BK=16, SPLIT=0, PAD=0, SWIZZLE=0)
    # per warp and k-tile: 2 sweeps x 4 STS of A, 2 STS.128 of B, 16 k x 2 LDS.128 of each; 8 warps
    assert tot["A store"]["instructions"] == 8 * 8
    assert tot["B store"]["instructions"] == 8 * 2
    assert tot["A load"]["instructions"] == tot["B load"]["instructions"] == 8 * 32
    assert tot["B load"]["per_instruction"] == 8.0 and tot["A store"]["per_instruction"] == 4.0


def test_pad_one_trades_wavefronts_for_instructions():
    plain, pad1 = tile_totals(8, 1, 0, 0), tile_totals(8, 1, 1, 0)
    assert pad1["A load"]["wavefronts"] == plain["A load"]["wavefronts"]
    assert pad1["A load"]["instructions"] > plain["A load"]["instructions"]


def test_table_has_every_variant_and_access():
    rows = table(16)
    assert len(rows) == 6 * 4
    assert {r["access"] for r in rows} == {"A store", "B store", "A load", "B load"}


def test_figures_build():
    from helpers.banks import figure, summary_figure

    fig = figure(BK=8)
    assert len(fig.data) == 6 * 4 and fig.layout.updatemenus
    assert len(summary_figure().data) == 2 * 4
