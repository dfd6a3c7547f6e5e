from helpers.coalescing import figure, warp_load


def test_naive_mapping_a_load_touches_32_sectors():
    r = warp_load("naive", "A", 32, 32)
    assert (r["sectors"], r["bytes_moved"], r["bytes_used"]) == (32, 1024, 128)
    assert r["efficiency"] == 0.125


def test_naive_mapping_b_load_is_a_broadcast():
    r = warp_load("naive", "B", 32, 32)
    assert (r["distinct_addresses"], r["sectors"], r["bytes_used"]) == (1, 1, 4)


def test_coalesced_b_load_uses_every_byte():
    r = warp_load("coalesced", "B", 32, 8)
    assert (r["sectors"], r["bytes_moved"], r["efficiency"]) == (4, 128, 1.0)


def test_coalesced_8x8_block_spans_four_rows():
    r = warp_load("coalesced", "B", 8, 8)          # 8 consecutive floats = 1 sector per row, same k row
    assert r["distinct_addresses"] == 8 and r["sectors"] == 1
    a = warp_load("coalesced", "A", 8, 8)          # 4 rows of A -> 4 addresses, 4 sectors
    assert a["distinct_addresses"] == 4 and a["sectors"] == 4


def test_figure_has_a_menu_per_block():
    fig = figure(blocks=((32, 32), (8, 8)))
    assert len(fig.layout.updatemenus[0].buttons) == 2 and len(fig.data) == 4
