from helpers.banks import access, table, wavefronts


def test_wavefront_rules():
    assert wavefronts([[i] for i in range(32)]) == 1            # stride 1
    assert wavefronts([[32 * i] for i in range(32)]) == 32      # stride 32 words: one bank
    assert wavefronts([[7] for _ in range(32)]) == 1            # broadcast
    assert wavefronts([[4 * i + j for j in range(4)] for i in range(32)], width=4) == 4   # contiguous LDS.128


def test_kernel_accesses():
    rows = {(r["variant"], r["access"]): r["wavefronts"] for r in table(BK=8)}
    assert rows[("contiguous tile, no padding", "A store (transposed)")] == 2    # stride-128 layout
    assert rows[("split tile + pad 4", "A store (transposed)")] == 1
    assert rows[("split tile + swizzle", "A store (transposed)")] == 1
    assert rows[("contiguous tile, no padding", "B load (LDS.128)")] > rows[("split tile", "B load (LDS.128)")]


def test_swizzled_float4_stays_contiguous():
    words, width = access("A load (LDS.128)", SWIZZLE=1, k=5)
    assert width == 4 and all(ws == list(range(ws[0], ws[0] + 4)) for ws in words)
