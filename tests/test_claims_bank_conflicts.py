"""The chapter "Bank conflicts" (book/08_bank_conflicts.md) against its models and its recorded data.

Every sentence of the chapter's prose that states a fact is checked here (the measured ones
are computed in the page itself, by helpers.figures.banks): the test fails when the model or
the data say otherwise."""
from collections import Counter
from pathlib import Path

import pytest

from helpers.figures import banks as fig
from helpers.measure import ncu
from helpers.measure.results import recorded
from helpers.models import banks
from helpers.models.roofline import intensity
from helpers.runtime import offline, sass
from helpers.runtime.specs import get
from helpers.runtime.specs.bank_conflicts import VARIANTS

CHAPTER = Path(__file__).resolve().parent.parent / "book" / "08_bank_conflicts.md"
DEEP_DIVE = CHAPTER.with_name("08_bank_conflicts_deep_dive.md")


def prose(page: Path = CHAPTER) -> str:
    """A page's Markdown without its code cells."""
    out, code = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            code = not code
            continue
        if not code:
            out.append(line)
    return "\n".join(out)


# ------------------------------------------------------------ the model's claims
def test_b_reads_collide_in_the_contiguous_tile_and_not_in_the_split_one():
    acc = banks.kernel_access("B load", **VARIANTS["contiguous (as 07)"])
    assert banks.bank(acc.words[0][0]) == banks.bank(acc.words[4][0]) == 0          # lanes 0 and 4
    assert acc.wavefronts() == 8 and acc.ideal() == 4
    assert banks.kernel_access("B load", **VARIANTS["split"]).wavefronts() == 4


@pytest.mark.parametrize("BK", [8, 16])
def test_a_store_conflict_is_bk_over_4_ways(BK):
    assert banks.kernel_access("A store", BK=BK, **VARIANTS["split"]).wavefronts() == BK // 4


def test_a_reads_never_conflict():
    for BK in (8, 16):
        for v in VARIANTS.values():
            assert banks.tile_totals(BK, **v)["A load"]["conflicts"] == 0


def test_the_picture_paragraph():
    """Chapter: 'The plain layout stores without conflict ...; transposed, ... the store is a 4-way conflict.
    Padding each row, or permuting its columns (a swizzle), removes the conflict.'"""
    from helpers.figures import pictures_mid
    acc = {name: pictures_mid.store_access(name, 16) for name in pictures_mid.LAYOUTS}
    plain, trans, pad, swz = acc.values()
    assert plain.wavefronts() == plain.ideal()
    assert trans.wavefronts() == 4 * trans.ideal()
    assert pad.wavefronts() == pad.ideal() == swz.wavefronts() == swz.ideal() == 1


def test_the_reads_carry_most_of_the_gain():
    """Chapter: 'the split tile carries most of the gain and the store fix only a little' (BK = 16)."""
    rows = {r["layout"]: r for r in fig.layout_rows(recorded("bank_conflicts")) if r["params"]["BK"] == 16}
    split_gain = rows["split"]["tflops"] / rows["contiguous (as 07)"]["tflops"] - 1
    store_gain = rows["split + swizzle"]["tflops"] / rows["split"]["tflops"] - 1
    assert split_gain > 3 * abs(store_gain)


def test_padding_paragraph():
    w = lambda BK, PAD: banks.kernel_access("A store", BK=BK, PAD=PAD).wavefronts()
    assert w(8, 4) == 1 and w(16, 2) == 1                          # the pads that separate the rows
    assert all(w(16, pad) > 1 for pad in (0, 4))                   # no 16-byte aligned pad fixes BK = 16
    assert w(16, 1) == w(16, 0) // 2 and w(8, 1) == w(8, 0)        # PAD = 1 halves BK = 16, leaves BK = 8


def test_swizzle_paragraph():
    assert [r["XOR mask x(k)"] for r in fig.swizzle(16).rows] == [0, 8, 16, 24]
    for BK in (8, 16):
        assert banks.kernel_access("A store", BK=BK, **VARIANTS["split + swizzle"]).wavefronts() == 1


def test_store_instructions_mix_sts_and_sts128():
    tot = banks.tile_totals(16, **VARIANTS["split + swizzle"])
    assert tot["A store"]["ideal"] / tot["A store"]["instructions"] == 1
    assert tot["B store"]["ideal"] / tot["B store"]["instructions"] == 4


def test_exercise_solutions():
    assert banks.kernel_access("A store", BK=8, PAD=4).wavefronts() == 1
    assert banks.kernel_access("A store", BK=16, PAD=1).wavefronts() == 2
    assert banks.wavefronts([[33 * i] for i in range(32)]) == 1


def test_every_layout_has_one_intensity():
    assert len({round(intensity("bank_conflicts", dict(v, BK=bk), 4096, 4096, 4096), 9)
                for bk in (8, 16) for v in VARIANTS.values()}) == 1


# ------------------------------------------------------------ the machine code
def loop_families(BK, layout):
    try:
        text = sass.inner_loop(offline.sass("bank_conflicts", dict(VARIANTS[layout], BK=BK)))
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    return Counter(i.family for i in sass.instructions(text) if i.predicate != "@!PT")


def test_padding_silently_narrows_the_reads():
    pad2, pad1 = loop_families(16, "split + pad 2"), loop_families(16, "split + pad 1")
    assert pad2["LDS.64"] > 0 and pad2["LDS.128"] > 0 and pad2["LDS"] == 0        # LDS.64 for half the k-rows
    assert pad1["LDS"] > 0                                                         # down to 32-bit reads
    for layout in ("split", "split + pad 4", "split + swizzle"):                   # single LDS.128
        c = loop_families(16, layout)
        assert c["LDS.64"] == 0 and c["LDS"] == 0 and c["LDS.128"] > 0
    table = {r["layout"]: r for r in fig.read_widths(16).rows}                     # the page's table says so too
    assert table["split + pad 2"]["LDS.64"] == pad2["LDS.64"] and table["split + pad 1"]["LDS"] == pad1["LDS"]


# ------------------------------------------------------------ the recorded data
def test_every_recorded_run_is_correct():
    rs = recorded("bank_conflicts")
    assert rs.rows and all(r["ok"] for r in rs.rows)


def test_counters_cover_every_layout_and_chapters_06_and_07():
    rows = ncu.pivot(recorded("bank_conflicts_ncu").rows)
    if not rows:
        pytest.skip("no Nsight Compute counters recorded")
    have = {(d["kernel"], banks.variant_name(d["params"]), d["params"].get("BK")) for d in rows}
    assert {k for k, _, _ in have} >= {"thread_tile_2d", "vectorized", "bank_conflicts"}
    assert {(n, bk) for k, n, bk in have if k == "bank_conflicts"} == {(n, bk) for n in VARIANTS for bk in (8, 16)}


def test_a_clean_store_phase_averages_between_sts_and_sts128():
    rows = [d for d in ncu.pivot(recorded("bank_conflicts_ncu").rows) if d["kernel"] == "bank_conflicts"]
    clean = [d for d in rows if banks.tile_totals(**get("bank_conflicts").smem_layout(d["params"]))["store"]["conflicts"] == 0]
    if not clean:
        pytest.skip("no counters of a conflict-free store layout")
    for d in clean:
        assert 1 <= d["store wavefronts per instruction"] <= 4, d


def test_ranking_names_the_recorded_fastest_fix_at_each_bk():
    rs = recorded("bank_conflicts")
    text = str(fig.ranking(rs))
    for BK in (8, 16):
        fixes = [r for r in fig.layout_rows(rs) if r["params"]["BK"] == BK and (r["params"]["PAD"] or r["params"]["SWIZZLE"])]
        best = max(fixes, key=lambda r: r["tflops"])
        assert f"fastest store fix here is **{best['layout']}**" in text


def test_the_prose_names_no_single_fix():
    for page in (CHAPTER, DEEP_DIVE):
        text = prose(page).lower()
        assert "the fix" not in text and "is the fix" not in text
        assert "fastest" not in text.replace("is *fastest*", "").replace("which store fix is fastest", "")


def test_the_counter_figures_are_recorded_in_either_mode():
    # deep dive: "The figures below show the recorded counters in either mode": live mode never runs ncu for them
    from helpers.measure import sources
    assert "recorded counters in either mode" in prose(DEEP_DIVE)
    assert not sources.SOURCES["bank_conflicts_ncu"].live
