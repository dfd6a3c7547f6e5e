"""The chapter "Warp tiling" (book/10_warptiling.md) against its models, the machine code and its
recorded data (timings: ``warptiling``; Nsight Compute: ``warptiling_ncu``, ``bank_conflicts_ncu``).

The measured comparisons are computed in the page (helpers.figures.warptiling); what the prose
states is checked here."""
import pytest

import helpers
from helpers import hardware
from helpers.measure import ncu
from helpers.measure.results import recorded
from helpers.models import pipeline
from helpers.models.banks import chunk_wavefronts, fragment_wavefronts, warp_ffma
from helpers.models.roofline import intensity
from helpers.runtime import offline
from helpers.runtime.specs import get
from helpers.runtime.specs import warptiling as ws

SPEC = get("warptiling")


# ------------------------------------------------------------ the models
def test_previous_kernel_reads_four_lds128_per_64_ffma():
    d = fragment_wavefronts("double_buffering")
    assert (d["lds_per_thread"], d["ffma_per_thread"]) == (4, 64)


def test_warp_tile_doubles_the_ffma_for_six_lds128():
    w = fragment_wavefronts("warptiling")
    assert (w["lds_per_thread"], w["ffma_per_thread"]) == (6, 128)
    p = SPEC.defaults()
    assert p["TM"] + p["TN"] == 24 and p["TM"] * p["TN"] == 128 and 2 * (p["TM"] + p["TN"]) == 48


def test_chunk_model_one_wavefront_per_warp_tile_read_two_for_the_split_b_reads():
    for v in ws.VARIANTS:
        a, b = SPEC.fragments(SPEC.resolve(v))
        assert all(len(set(x)) <= 8 and chunk_wavefronts(x) == 1 for x in a + b), v
    a, b = get("double_buffering").fragments(get("double_buffering").defaults())
    assert all(len(set(x)) == 16 and chunk_wavefronts(x) == 2 for x in b)


def test_quarter_warp_model_charges_four_per_lds128():
    for name, p in (("warptiling", {}), ("double_buffering", {}), ("warptiling", dict(WN=32, TM=8, TN=8))):
        f = fragment_wavefronts(name, p)
        assert f["quarter_warp_wavefronts"] == 4 * f["lds_per_thread"]


def test_exercise_1_lane_grid():
    p = SPEC.resolve(dict(TM=8, TN=16))
    assert (p["WM"] // p["TM"], p["WN"] // p["TN"]) == (8, 4)
    a, b = SPEC.fragments(p)
    assert [len(set(x)) for x in a] == [8, 8] and all(len(set(x)) == 4 for x in b) and len(a) + len(b) == 6
    f = fragment_wavefronts("warptiling", p)
    assert f["wavefronts"] == 6 and f["quarter_warp_wavefronts"] == 24


def test_exercise_3_the_8x8_warp_tile_sits_between():
    eight = fragment_wavefronts("warptiling", dict(WN=32, TM=8, TN=8))
    prev, sixteen = fragment_wavefronts("double_buffering"), fragment_wavefronts("warptiling")
    assert sixteen["waves_per_1k_warp_ffma"] < eight["waves_per_1k_warp_ffma"] < prev["waves_per_1k_warp_ffma"]
    assert eight["quarter_per_1k_warp_ffma"] == prev["quarter_per_1k_warp_ffma"]


def test_a_lane_grid_of_16_cells_is_refused():
    text = str(helpers.validate("warptiling", WM=32, WN=32, TM=16, TN=8))
    assert text.startswith("**Refused.**") and "must be 32" in text and "valid alternative" in text


def test_padding_of_the_transposed_a_tile():
    assert ws.PAD == 4 and SPEC.smem_bytes(SPEC.defaults()) == 2 * (8 * (128 + 4) + 8 * 128) * 4


def test_configs_differ_in_their_block_tile():
    assert len({round(intensity("warptiling", v, 4096, 4096, 4096), 9) for v in ws.VARIANTS}) > 1


def test_the_warp_tiled_loop_issues_a_larger_share_of_ffma():
    device = hardware.default()
    try:
        two = pipeline.loop_mix("double_buffering", {}, device)
        warp = pipeline.loop_mix("warptiling", {}, device)
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    assert warp["ffma_share"] > two["ffma_share"]
    assert warp["lds128"] * two["ffma"] * 4 == two["lds128"] * warp["ffma"] * 3        # 6 per 128 against 4 per 64


# ------------------------------------------------------------ the recorded data
def test_every_recorded_run_is_correct():
    rs = recorded("warptiling")
    assert rs.rows and all(r["ok"] for r in rs.rows)


def test_the_counters_count_the_lds128_the_model_expects():
    rs = recorded("warptiling_ncu")
    sizes = {r["kernel"]: r["M"] for r in rs.rows if r.get("M")}
    rows = [d for d in ncu.pivot(rs.rows) if d["kernel"] == "warptiling"]
    if not rows:
        pytest.skip("no counters of the warp-tiling kernel recorded")
    for d in rows:
        p, n = SPEC.resolve(d["params"]), sizes["warptiling"]
        warps = (n // p["BM"]) * (n // p["BN"]) * SPEC.threads(p) // 32
        assert d["load instructions"] == fragment_wavefronts("warptiling", p)["lds_per_thread"] * warps * n
        assert warp_ffma(n, n, n) > 0


def test_most_fragment_loads_are_covered_by_the_previous_step():
    try:
        c = pipeline.shared_load_cover("warptiling", {}, hardware.default())
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    assert c["short"] < c["loads"] / 2 and c["median"] >= pipeline.SHORT


def test_exercise_3_which_blocks_take_the_checked_path():
    # "On 4096 × 4100 × 4096 the grid has 32 × 33 = 1,056 blocks; ... only the 32 blocks of the last
    #  column ... take the checked path. On 4097³ every block does"
    p = SPEC.defaults()
    blocks = SPEC.grid(p, 4096, 4100, 4096, hardware.Device.from_datasheet("NVIDIA H200"))
    assert blocks[0] * blocks[1] == 1056 and (blocks[1], blocks[0]) == (32, 33)
    assert ws.fast_blocks(p, 4096, 4100, 4096) == 1056 - 32
    assert ws.fast_blocks(p, 4097, 4097, 4097) == 0


def test_the_kernel_marks_the_regions_the_chapter_shows():
    import re
    src = SPEC.path.read_text()
    for name in ("warp_tile", "fragments", "main_loop", "fast_path", "loads"):
        assert re.search(rf"// region {name}\n.*// endregion {name}", src, re.S), name
    # "a block keeps its choice for its whole life": the branch is taken once, outside the loop
    fast = src[src.index("// region fast_path"):src.index("// endregion fast_path")]
    assert "block_tile<BM, BN, BK, WM, WN, TM, TN, true>" in fast and "false>" in fast


def test_the_fast_path_has_no_checks_in_its_main_loop():
    # "runs the loop without a single check": the interior loop's SASS has no predicated global load
    device = hardware.default()
    try:
        loop = pipeline.executed_loop("warptiling", {}, device, source=pipeline.interior_source("warptiling"))
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    loads = [i for i in loop if i.opcode.startswith("LDG")]
    assert loads and all(not i.predicate for i in loads)
