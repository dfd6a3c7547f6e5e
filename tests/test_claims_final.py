"""The final chapter's prose against the recorded data (book/data) and the kernel's code.

Every sentence of book/12_final.md and of its deep dive (book/12_final_deep_dive.md) that states
a measured fact and is not computed in a cell is checked here; a test fails when the data or the
code says otherwise. A quote marked "(deep dive)" lives on the deep-dive page.
"""
import dataclasses
import math

import pytest

from helpers.figures import final as F
from helpers.figures.leaderboard import recorded
from helpers.measure import datafile, final_experiments
from helpers.measure import final_features as ladder
from helpers.models.roofline import intensity
from helpers.runtime import offline
from helpers.runtime.specs import final as final_spec
from helpers.runtime.specs.final import SPEC as SPEC_FINAL

D = final_spec.SPEC.defaults()


@pytest.fixture(scope="module")
def rs():
    try:
        return recorded("final")
    except datafile.DataError as exc:
        pytest.skip(f"no recorded final chapter: {exc}")


def test_thin_shape_has_fewer_tiles_than_the_gpu_has_sms(rs):
    # "A shape like 8192 x 128 x 8192 has 64 output tiles of 128 x 128: fewer blocks than a large GPU has SMs"
    assert final_spec.tiles_of(dict(D, BM=128, BN=128), 8192, 128) == 64 < rs.device.sm_count


def test_every_recorded_row_is_correct(rs):
    # "Every recorded row was checked against cuBLAS ... before it was timed"
    rows = [r for r in rs.rows if r["kernel"] == "final"]
    assert rows and all(r["ok"] and r["rel_err"] is not None for r in rows)


@pytest.mark.parametrize("BM", [p for p in final_spec.SPEC.params if p.name == "BM"][0].allowed)
def test_pitch_bm_plus_4_is_conflict_free_for_every_bm(BM):
    # (deep dive) "With a pitch of `BM + 4` and BM a multiple of 32, ... all 32 differ, and every row still starts
    #  on a 16-byte boundary, as LDS.128 needs"
    r = {x["padding (floats)"]: x for x in F.transpose_banks((final_spec.PAD,), BM=BM).rows}[final_spec.PAD]
    assert r["wavefronts"] == 1 and r["rows 16-byte aligned"]


def test_final_loop_copies_with_ldgsts_and_warptiling_stages_through_registers(rs):
    # (deep dive) "where the warp-tiling kernel loads into registers (LDG) and stores to shared memory
    #  (STS), the final kernel issues LDGSTS"
    try:
        rows = {r["kernel"]: r for r in F.hot_loop_table(("warptiling", "final"), rs.device).rows}
    except offline.ToolMissing as exc:
        pytest.skip(f"no offline compiler: {exc}")
    assert rows["warptiling"]["LDG (to registers)"] > 0 and rows["warptiling"]["STS (registers to shared)"] > 0
    assert rows["final"]["STS (registers to shared)"] == 0 and rows["final"]["LDGSTS (cp.async)"] > 0
    # and the count is one k-tile's copies of one thread on the interior path (A row-major: 4-byte
    # copies; B row-major: 16-byte), not the static sum of the copy paths of edge tiles too
    p = SPEC_FINAL.fitting(None, rs.device)
    threads = SPEC_FINAL.threads(p)
    assert rows["final"]["LDGSTS (cp.async)"] == p["BM"] * p["BK"] // threads + p["BK"] * p["BN"] // 4 // threads
    assert rows["final"]["LDG (to registers)"] == 0


def test_final_and_cublas_sit_under_the_flat_roof(rs):
    # (deep dive) "Both sit under the flat roof: what is missing is not memory bandwidth."
    r = F.square_row(rs, 4096)
    ai = intensity("final", r["params"], 4096, 4096, 4096)
    assert ai > rs.device.ridge
    assert r["tflops"] < rs.device.fp32_tflops and r["cublas_tflops"] < rs.device.fp32_tflops


def test_smallest_suite_product_is_over_in_microseconds(rs):
    # (deep dive) "a product small enough to be over in microseconds"
    small = min(F.suite_rows(rs), key=lambda r: r["M"] * r["N"] * r["K"])
    assert small["ms"] < 0.1 and small["cublas_ms"] < 0.1


def test_knob_differences_are_small(rs):
    # (deep dive) "Differences this small can change order from run to run"
    for n in {r["M"] for r in F.knob_rows(rs)}:
        sel = [r["tflops"] for r in F.knob_rows(rs) if r["M"] == n]
        assert max(sel) / min(sel) < 1.03, f"n={n}: the knobs differ by more than 3%; reword the chapter"


def test_the_model_splits_the_thin_shape(rs):
    # the split-K example of the chapter must be a shape the dispatcher splits on the recorded device
    assert final_spec.choose_config(128, 8192, 8192, rs.device)["SPLITK"] > 1


def test_choice_table_shows_the_dispatchers_choice(rs):
    shapes = [(4096,) * 3, (128, 8192, 8192)]
    for (M, N, K), row in zip(shapes, F.choice_table(shapes, rs.device).rows):
        assert row["shape"] == f"{M}x{N}x{K}"
        assert row["config"] == final_spec.SPEC.label(final_spec.choose_config(M, N, K, rs.device))


def test_wide_b_tiles_lose_the_most_on_unaligned_rows():
    # (deep dive) "where the rows of B are not 16-byte aligned (N not a multiple of 4), B moves 4 bytes
    #  at a time: wide B tiles lose the most"
    from helpers.runtime.specs.final import CANDIDATES
    lowest = min(CANDIDATES, key=lambda c: c.unaligned)
    assert lowest.params["BN"] == max(c.params["BN"] for c in CANDIDATES)
    assert all(c.unaligned <= 1 for c in CANDIDATES) and lowest.unaligned < 1


def test_layout_factors_in_the_packing_section():
    # (deep dive) "the same config with A stored transposed (the layout "TN", ...) is 2-24% faster than
    #  with A row-major, and with both operands copied 4 bytes at a time ("NT") 1-15% slower"
    tn = [dict(c.layouts)["TN"] for c in final_spec.CANDIDATES]
    nt = [dict(c.layouts)["NT"] for c in final_spec.CANDIDATES if "NT" in dict(c.layouts)]
    assert round(100 * (min(tn) - 1)) == 2 and round(100 * (max(tn) - 1)) == 24
    assert round(100 * (1 - max(nt))) == 1 and round(100 * (1 - min(nt))) == 15


def test_packing_pays_on_large_products_only(rs):
    # "so it pays on large products only" (the deep dive: "and not on small ones")
    big = final_spec.choose_config(8192, 8192, 8192, rs.device)
    small = final_spec.choose_config(512, 512, 512, rs.device)
    assert big["PACK_A"] and not (small["PACK_A"] or small["PACK_B"])


def test_the_candidates_without_stream_k():
    # (deep dive) "The 64 x 256 tile, the 128 x 256 tile of the same warps, the two-stage 128 x 64, the 64 x 32
    #  and 32 x 32 tiles ... and the blocks of 96 rows or columns have none measured. The 64 x 128 tile had one"
    without = {(c.params["BM"], c.params["BN"], c.params["STAGES"]) for c in final_spec.CANDIDATES if c.stream_k is None}
    assert without == {(64, 256, 5), (128, 256, 5), (128, 64, 2), (64, 32, 3), (32, 32, 3),
                       (64, 128, 4), (96, 128, 4), (96, 64, 4), (128, 96, 4), (64, 96, 4)}


def test_the_micro_tile(rs):
    # (deep dive) "a thread of the 64 x 32 tile makes 4 x 8 results, 512 multiply-adds one after another per k-tile
    #  of 16"; "Warp tiles of 16 x 32 (4 x 4 results per thread ...) give the candidate "micro": 32 x 32
    #  blocks of two warps, half the chain of the 64 x 32 tile"; "the products of at most 0.4 GFLOP"
    spec = final_spec.SPEC
    by = {c.name: spec.resolve(c.params) for c in final_spec.CANDIDATES}
    tiny, micro = by["tiny"], by["micro"]
    chain = lambda p: p["TM"] * p["TN"] * p["BK"]  # noqa: E731  (multiply-adds in a row per k-tile)
    assert chain(tiny) == 512 and 2 * chain(micro) == chain(tiny)
    assert spec.threads(micro) == 2 * 32 and (micro["BM"], micro["BN"]) == (32, tiny["BN"])
    # the question's products: the smallest, where the model takes micro; a larger product keeps a larger tile
    sizes = sorted(set(final_experiments.broad_and_holdout()), key=lambda s: s[0] * s[1] * s[2])
    small = [s for s in sizes if 2 * s[0] * s[1] * s[2] <= final_experiments.MICRO_GFLOP * 1e9]
    assert small and final_experiments.MICRO_GFLOP == 0.4
    assert final_spec.candidate_of(final_spec.choose_config(*small[0], rs.device)).name == "micro"
    assert final_spec.candidate_of(final_spec.choose_config(*sizes[-1], rs.device)).name != "micro"


def test_the_blocks_of_96_rows_or_columns():
    # (deep dive) "A thread tile of 12 rows ... four warps of 96 x 32 side by side, a 96 x 128 block, or 2 x 2 warps
    #  of 48 x 32 with 12 x 4 results per thread, a 96 x 64 block; their transposes are 128 x 96 and
    #  64 x 96"; "a thread keeps 96 or 48 results ... where the 32 x 128 and 128 x 32 blocks above had 32"
    spec = final_spec.SPEC
    by = {c.name: spec.resolve(c.params) for c in final_spec.CANDIDATES}
    ninety_six = [p for p in by.values() if 96 in (p["BM"], p["BN"])]
    # four of them, four warps each, a side of 12 per thread along the side of 96; each one's transpose is one too
    assert len(ninety_six) == 4 and all(spec.threads(p) == 128 for p in ninety_six)
    assert all(p["TM" if p["BM"] == 96 else "TN"] == 12 for p in ninety_six)
    swap = lambda p: (p["BN"], p["BM"], p["WN"], p["WM"], p["TN"], p["TM"])  # noqa: E731
    assert {swap(p) for p in ninety_six} == {(p["BM"], p["BN"], p["WM"], p["WN"], p["TM"], p["TN"]) for p in ninety_six}
    assert {p["TM"] * p["TN"] for p in ninety_six} == {96, 48}
    tiles = final_experiments.TILES
    assert {tiles[n]["TM"] * tiles[n]["TN"] for n in ("row.32x128", "col.128x32")} == {32}



def test_the_lone_block_cap_and_the_cost_per_doubling_of_parts(rs):
    # (deep dive) "(`full_warps`, in the table of constants below)"; "`shared_us` for every doubling of the parts
    #  of a tile (two parts: once; eight: three times)"
    c = final_spec.CONSTANTS
    table = {r["constant"]: r["value"] for r in F.dispatch_constants_table().rows}
    assert table["full_warps"] == c.full_warps and table["shared_us"] == c.shared_us
    # the floor is the warps' own: a lone block's time per k-tile does not depend on the efficiency
    lone = final_spec.terms(dict(final_spec.D, BM=64, BN=32, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3), 64, 32, 1600,
                            rs.device)
    assert lone.last_share < 1 and lone.last_k_tiles == lone.k_tiles == 100
    floor = lone.k_tiles * lone.tile_ms * c.full_warps / lone.sm_warps
    for eff in (0.4, 0.6):
        assert final_spec.last_wave_pace(lone, eff, c) == c.full_warps / lone.sm_warps
        fill = c.pipeline_tiles / lone.per_sm ** c.fill_hidden * lone.fills * lone.tile_ms / eff
        assert math.isclose(final_spec.combine(lone, eff, c), max(floor + fill, lone.memory_ms) + c.launch_us * 1e-3)
    t8 = final_spec.terms(dict(final_spec.D, SPLITK=8), 64, 64, 8192, rs.device)
    assert t8.shared and t8.parts == 8
    t2 = dataclasses.replace(t8, parts=2)
    more = final_spec.combine(t8, 0.6, c) - final_spec.combine(t2, 0.6, c)
    assert math.isclose(more, 2 * c.shared_us * 1e-3)


def test_a_block_alone_on_its_sm_pays_its_whole_fill(rs):
    # (deep dive) "divided by `blocks_per_SM ** fill_hidden`: ... a block alone on its SM pays its whole fill and one
    #  of four pays less"
    c = final_spec.CONSTANTS
    assert 0 < c.fill_hidden <= 1
    by = {x.name: x.params for x in final_spec.CANDIDATES}
    M, N, K = 8192, 8192, 256                       # short K: the fill weighs
    cost = {}
    for name in ("big", "narrow"):
        t = final_spec.terms(by[name], M, N, K, rs.device)
        none = dataclasses.replace(t, fills=0)
        cost[t.per_sm] = (final_spec.combine(t, 0.6, c) - final_spec.combine(none, 0.6, c)) / (t.fills * t.tile_ms / 0.6)
    assert set(cost) == {1, 4}
    assert math.isclose(cost[1], c.pipeline_tiles) and math.isclose(cost[4], c.pipeline_tiles / 4 ** c.fill_hidden)
    # and the change it was made for: short K, many tiles, blocks of four per SM over big
    chosen = final_spec.candidate_of(final_spec.choose_config(12068, 6648, 249, rs.device))
    assert final_spec.blocks_per_sm(chosen.params, rs.device) > 1


def test_blocks_of_the_64x64_warp_tile_hold_fewer_warps_per_sm(rs):
    # (deep dive) "at 128 accumulators per thread the registers of an SM hold 8 of their warps, against 12 to 16
    #  of the 4-warp blocks of 8 x 8 per thread"
    fe = final_experiments
    warps = lambda p: final_spec.blocks_per_sm(p, rs.device) * final_spec.SPEC.threads(p) // 32  # noqa: E731
    named = ("pair.64x128", "pair.128x64", "solo.64x64")
    assert {warps(fe.TILES[n]) for n in named} == {8}
    assert all(fe.TILES[n]["TM"] * fe.TILES[n]["TN"] == 128 for n in named)
    eight = [c.params for c in final_spec.CANDIDATES if (c.params["TM"], c.params["TN"]) == (8, 8)
             and final_spec.SPEC.threads(c.params) == 128]
    seen = {warps(dict(p, SPLITK=s)) for p in eight for s in (1, 4)}
    assert min(seen) == 12 and max(seen) == 16


def test_the_big_block_is_eight_64x64_warps_of_8x16_and_fills_an_sm(rs):
    # "The final kernel's large squares run a 128 × 256 tile: eight warps, each with the 64 × 64 warp
    #  tile of the last chapter, as 8 × 16 results per thread. A thread keeps 128 accumulators, and
    #  one such block fills an SM"; "a 128 × 256 tile is best at 4096³"
    from helpers.runtime.specs import get
    p = final_spec.choose_config(4096, 4096, 4096, rs.device)
    assert (p["BM"], p["BN"], p["WM"], p["WN"], p["TM"], p["TN"]) == (128, 256, 64, 64, 8, 16)
    assert final_spec.SPEC.threads(p) // 32 == 8 and p["TM"] * p["TN"] == 128
    assert final_spec.blocks_per_sm(dict(p, PACK_A=0, A_T=0), rs.device) == 1
    w = get("warptiling").defaults()
    assert (w["WM"], w["WN"]) == (64, 64)


def test_the_big_tile_leaves_most_sms_idle_at_1024(rs):
    # "a 128 × 256 tile is best at 4096³ and leaves most SMs idle at 1024³"
    assert final_spec.tiles_of(D, 1024, 1024) < rs.device.sm_count / 2
    assert (D["BM"], D["BN"]) == (128, 256)


def test_the_big_block_pays_once_the_copies_hold_no_registers(rs):
    # (deep dive) "That only pays once the copies need no registers": the register-staged kernel's 128 x 256 tile
    # is slower than its own 128 x 128 tile; the final kernel's fastest 128 x 256 block (fed by
    # cp.async) is faster than both
    from helpers.measure.results import step
    from helpers.runtime.specs import get
    w = get("warptiling").defaults()
    wide, _ = step("warptiling", 4096, dict(w, BN=256, TM=8, TN=16))
    own, _ = step("warptiling", 4096, w)
    final = max((r for r in rs.rows if r["kernel"] == "final" and (r["M"], r["N"], r["K"]) == (4096,) * 3
                 and (r["params"]["BM"], r["params"]["BN"]) == (128, 256) and r["ok"]), key=lambda r: r["tflops"])
    assert wide["tflops"] < own["tflops"] < final["tflops"]


def test_the_stages_knob_is_recorded_around_the_choice(rs):
    # (deep dive) the table from the warp-tiling kernel: its last two rows are the choice at n = 4096
    # recorded with two stages and with its own
    rows = F.ladder_rows(rs, 4096)
    assert [r["step"].split(" ")[0] for r in rows] == ["warptiling", "final,", "+", "+"]
    assert all(r["TFLOP/s"] > 0 for r in rows)


def test_split_k_results_are_reproducible_by_design():
    # "adds them in the order z = 0, 1, …, SPLITK − 1": the last block reads the slots in k order,
    # from L2, and no block waits for another (no spin on a counter)
    from helpers.runtime.source import kernel_source
    publish, add = kernel_source("final", "split_k"), kernel_source("final", "add_parts")
    assert "atomicAdd" in publish and "arrivals[seg.pid] = 0" in publish
    assert "for (int c = 0; c < seg.parts; ++c)" in add and "__ldcg" in add
    assert "while" not in publish + add


# ------------------------------------------------------------------ the feature ladder


@pytest.fixture(scope="module")
def ladder_rows():
    run = F._recorded_or_none(ladder.CHAPTER)
    if run is None:
        pytest.skip("the feature ladder is not recorded yet: python -m helpers record --chapter final_features")
    return run


def test_the_reduced_kernel_is_the_warptiling_block_in_two_cp_async_stages():
    # "With all of them off it is the *reduced kernel*: the warp-tiling chapter's block (128 × 128, four
    #  warps of 64 × 64, 16 × 8 results per thread, k-slices of 8), fed by `cp.async` instead of
    #  registers, in two stages"
    from helpers.runtime.specs import get
    w, p = get("warptiling").defaults(), ladder.REDUCED
    assert (p["BM"], p["BN"], p["WM"], p["WN"], p["TM"], p["TN"], p["BK"]) == (128, 128, 64, 64, 16, 8, 8)
    assert all(p[k] == w[k] for k in ("BM", "BN", "WM", "WN", "TM", "TN", "BK"))
    assert SPEC_FINAL.threads(p) // 32 == 4 and p["STAGES"] == 2
    assert (p["EDGES"], p["PACK_A"], p["SPLITK"], p["STREAMK"], p["GROUP"], p["KU"]) == (0, 0, 1, 0, 0, 0)


def test_the_pipeline_step_is_five_stages_of_k_slices_of_16(rs):
    # "The stages share the SM's shared memory, `STAGES · BK · (BM + BN)` floats, so the ladder takes
    #  k-slices of 16 in five stages"
    p = next(p for s, p in ladder.plan() if s.name == "pipeline")
    assert (p["BK"], p["STAGES"]) == (16, 5)
    pad = final_spec.PAD
    assert final_spec.smem_bytes(p) == 4 * p["STAGES"] * p["BK"] * (p["BM"] + pad + p["BN"])   # A row-major: padded
    assert final_spec.smem_bytes(p) <= rs.device.smem_per_block


def test_the_packing_step_is_the_choice_at_4096(rs):
    # "At n = 4096 this step is the config the dispatcher chooses."
    p = next(p for s, p in ladder.plan() if s.name == "packing")
    assert p == final_spec.choose_config(4096, 4096, 4096, rs.device)


def test_the_long_k_shape_has_tiles_for_a_quarter_of_the_sms(rs):
    # "At 1024 × 1024 × 16384 the 128 × 256 tile makes 32 output tiles, for a quarter of the SMs of an H200"
    s, p = next((s, p) for s, p in ladder.plan() if s.name == "split-K")
    assert s.shape == (1024, 1024, 16384) and (p["BM"], p["BN"]) == (128, 256)
    tiles = final_spec.tiles_of(p, 1024, 1024)
    assert tiles == 32 and round(4 * tiles / rs.device.sm_count) == 1 and "H200" in rs.device.name


def test_the_ladder_runs_each_feature_where_the_summary_says():
    # "a 128 × 256 block, a deeper pipeline, short trips of the inner loop, grouped blocks and a packed A at
    #  n = 4096, moved edge tiles on an odd square, split-K and stream-K at a long K"
    at = {s.name: s.shape for s in ladder.STEPS}
    assert all(at[n] == (4096,) * 3 for n in ("block tile", "pipeline", "short trips", "grouping", "packing"))
    assert at["edges"][0] == at["edges"][1] == at["edges"][2] and at["edges"][0] % 2 == 1
    assert at["split-K"] == at["stream-K"] and at["split-K"][2] > 8 * max(at["split-K"][:2])


def test_every_ladder_row_was_checked_and_timed_with_cublas(ladder_rows):
    # "Every row of the ladder was checked against cuBLAS on fresh random data before it was timed, with
    #  cuBLAS timed in the same run"
    steps = F.ladder_steps(ladder_rows)
    assert len(steps) == len(ladder.STEPS)
    assert all(s["row"]["ok"] and s["row"]["rel_err"] is not None and s["row"]["cublas_tflops"] > 0 for s in steps)


def test_the_dispatch_sentence_states_the_files_fit():
    # (deep dive) "The shipped numbers: `python -m helpers refit` fitted `shared_us` to the timings of 55 shapes ...
    #  its choices run at 97.6% of the best measured option's speed ..., against 97.5% with the numbers before the fit."
    import json
    doc = json.loads(final_spec.DISPATCH_FILE.read_text())
    text = str(F.dispatch_fit_text())
    q = doc["quality"]
    assert f"{100 * q['fitted']['choice_quality']:.1f}%" in text and f"{q['shapes']} shapes" in text
    assert all(f"`{f}`" in text for f in doc["recipe"]["fitted"])


def test_the_two_runs_of_the_chosen_config_at_4096_are_compared_from_the_data(rs):
    # (chapter) "The feature ladder's run timed the same config at n = 4096 at 52.42 TFLOP/s, this run at
    #  52.46: two runs of one config lie 0.1% apart here, the same result, whatever the rounding shows."
    ladder = F.ladder_run()
    text = str(F.runs_text(rs, ladder))
    mine = F.square_row(rs, 4096)
    other = next(s["row"] for s in F.ladder_steps(ladder)[::-1] if s["shape"] == (4096,) * 3)
    assert final_spec.SPEC.resolve(other["params"]) == final_spec.SPEC.resolve(mine["params"])
    apart = 100 * abs(mine["tflops"] / other["tflops"] - 1)
    assert f"{mine['tflops']:.2f}" in text and f"{other['tflops']:.2f}" in text and f"{apart:.1f}% apart" in text
    assert ("the same result" in text) == (apart < 1)
