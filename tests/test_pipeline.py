"""Double buffering: the machine-code models (helpers.models.pipeline) and the chapter's figures,
tables and sentences (helpers.figures.pipeline), on the offline compile and on synthetic rows.

The kernels themselves run on the CPU in tests/test_kernels_on_cpu.py."""
import numpy as np
import pytest

from helpers.figures import pipeline as fig
from helpers.hardware import Device
from helpers.measure.results import ResultSet
from helpers.models import pipeline
from helpers.runtime import offline

H200 = Device.from_datasheet("NVIDIA H200")


@pytest.fixture(autouse=True)
def offline_tools():
    try:
        offline.resources("double_buffering", {"BK": 8}, H200)
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))


# ------------------------------------------------------------ machine code
def test_load_to_use_counts_the_arithmetic_that_hides_a_load():
    prev = pipeline.load_to_use("bank_conflicts", device=H200)
    two = pipeline.load_to_use("double_buffering", {"BK": 8}, H200)
    deep = pipeline.load_to_use("cp_async", {"BK": 16, "STAGES": 3}, H200)
    assert prev["max"] == 0
    assert two["per_iteration"] == 512 and 0.5 * 512 < two["min"] < 512
    assert deep["min"] == deep["max"] == 2 * deep["per_iteration"] == 2048


def test_shared_load_cover_of_the_two_kernels():
    two = pipeline.shared_load_cover("double_buffering", {"BK": 8}, H200)
    asy = pipeline.shared_load_cover("cp_async", {"BK": 16, "STAGES": 3}, H200)
    assert two["loads"] == 32 and asy["loads"] == 64           # LDS.128 per pass of the loop
    for c in (two, asy):
        assert len(c["covers"]) == c["loads"] and c["min"] == min(c["covers"]) <= c["median"]
        assert c["short"] == sum(n < pipeline.SHORT for n in c["covers"])
    assert asy["covers"] == sorted(asy["covers"])


def test_loop_mix_of_interior_tiles_drops_the_edge_paths():
    full = pipeline.executed_loop("double_buffering", {"BK": 8}, H200)
    mix = pipeline.loop_mix("double_buffering", {"BK": 8}, H200)
    assert mix["ffma"] == 512 and mix["lds128"] == 32 and mix["total"] < len(full)
    assert "rows_aligned16(A, K)" not in pipeline.interior_source("double_buffering")
    assert "bool rows_aligned16(const float* X, int cols)" in pipeline.interior_source("double_buffering")


def test_braces_change_no_instruction():
    b = pipeline.braces(device=H200)
    assert b["identical"] and b["differences"] == 0 and b["instructions"] > 1000
    assert "{   // the prologue in a scope of its own" in b["scoped_source"]


def test_data_registers_by_role():
    two = pipeline.data_registers("double_buffering", {"BK": 8})
    asy = pipeline.data_registers("cp_async", {"BK": 16, "STAGES": 3})
    assert two == {"accumulators": 64, "A values": 16, "B values": 16, "next tile (staging)": 8, "total": 104}
    assert asy == {"accumulators": 64, "A values": 32, "B values": 8, "next tile (staging)": 0, "total": 104}
    assert pipeline.data_registers("double_buffering", {"BK": 16})["next tile (staging)"] == 16
    with pytest.raises(ValueError):
        pipeline.data_registers("naive")


# ------------------------------------------------------------ the published epilogue
def test_published_schedule_misses_the_last_tile_when_tiles_are_odd():
    assert pipeline.published_schedule(1) == [{"step": "epilogue", "stage": 1, "tile": None}]
    assert [s["tile"] for s in pipeline.published_schedule(3)] == [0, 1, 1]
    assert [s["tile"] for s in pipeline.published_schedule(4)] == [0, 1, 2, 3]
    for tiles in range(1, 9):
        assert [s["tile"] for s in pipeline.published_schedule(tiles, fixed=True)] == list(range(tiles))


def test_published_product_is_wrong_exactly_for_odd_tile_counts():
    rng = np.random.default_rng(1)
    for K, wrong in ((8, True), (16, False), (24, True), (40, True), (64, False)):
        A, B = rng.uniform(-1, 1, (8, K)), rng.uniform(-1, 1, (K, 8))
        C = pipeline.published_product(A, B, 8)
        assert (not np.allclose(C, A @ B, equal_nan=False)) == wrong, K
        assert np.allclose(pipeline.published_product(A, B, 8, fixed=True), A @ B)


def test_published_table():
    rows = {r["K"]: r for r in fig.published_table().rows}
    assert rows[8]["epilogue reads"] == "a stage nobody wrote" and not rows[8]["correct"]
    assert rows[24]["tiles multiplied, in order"] == "0, 1, 1" and not rows[24]["correct"]
    assert rows[4096]["correct"] and rows[16]["correct"]
    assert all(r["correct"] for r in fig.published_table(fixed=True).rows)


def test_fix_diff_is_one_added_barrier():
    diff = str(fig.fix_diff())
    added = [l for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    removed = [l for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    assert removed == [] and len(added) == 1 and "__syncthreads();" in added[0]


# ------------------------------------------------------------ synthetic rows
def row(kernel, params, n, tflops, ok=True, rel_err=0.0):
    ms = 2 * n ** 3 / (tflops * 1e12) * 1e3
    return {"kernel": kernel, "params": params, "M": n, "N": n, "K": n, "tflops": tflops, "ms": ms,
            "ms_p20": ms * 0.998, "ms_p80": ms * 1.002, "cublas_tflops": 50.0, "ok": ok, "rel_err": rel_err}


def timing():
    rows = []
    for n, t in ((1024, 18.0), (2048, 43.0), (4096, 44.0)):
        rows.append(row("double_buffering", {"BK": 8, "FIXED": 1, "FAST_PATH": 0}, n, t))
        rows.append(row("double_buffering_racy", {"BK": 8, "FIXED": 0, "FAST_PATH": 0}, n, t + 0.05, ok=False, rel_err=None))
        for s in (2, 3, 4):
            rows.append(row("cp_async", {"BK": 16, "STAGES": s}, n, t - 3 + s / 10))
    rows.append(row("cp_async", {"BK": 32, "STAGES": 3}, 4096, 45.0))
    return ResultSet("double_buffering", rows, H200, "synthetic", False)


def sanitize(hash_ok: bool):
    from helpers.runtime.specs import get

    h = get("double_buffering").source_hash() if hash_ok else "old"
    excerpt = ("========= Error: Race reported between Write access at f in 09_double_buffering.cu:158\n"
               "=========     and Read access at g in 09_double_buffering.cu:136 [256 hazards]\n")
    rows = [{"kernel": "double_buffering_racy", "params": {"BK": 8, "FIXED": 0, "FAST_PATH": 0}, "M": 67, "N": 45, "K": 33,
             "tool": "racecheck", "errors": 5, "hazards": 256, "kinds": {"Write/Read": 256}, "returncode": 1,
             "expected_broken": True, "ok": True, "lines": [158, 136], "excerpt": excerpt, "source_hash": h},
            {"kernel": "double_buffering_racy", "params": {"BK": 8, "FIXED": 0, "FAST_PATH": 0}, "M": 67, "N": 45, "K": 33,
             "tool": "memcheck", "errors": 0, "hazards": 0, "kinds": {}, "returncode": 0, "expected_broken": True,
             "ok": True, "lines": [], "excerpt": "", "source_hash": h}]
    rows += [{"kernel": k, "params": {}, "M": 67, "N": 45, "K": 33, "tool": t, "errors": 0, "hazards": 0, "kinds": {},
              "returncode": 0, "expected_broken": False, "ok": True, "lines": [], "excerpt": "", "source_hash": h}
             for k in ("double_buffering", "cp_async", "naive") for t in ("memcheck", "racecheck")]
    return ResultSet("sanitize", rows, H200, "synthetic", False)


def test_race_tables_and_report():
    t = fig.race_runs(timing())
    assert [r["result"] for r in t.rows][:2] == ["NaN in C", "correct"]
    text = str(fig.race_report(sanitize(True)))
    assert "256 hazards" in text and "3 of them over 3 kernels" in text and "**no hazard**" in text
    lines = fig.race_lines(sanitize(True))
    src = {r["line"]: r for r in lines.rows}
    assert src[158]["access"] == "write" and src[136]["access"] == "read"
    assert "earlier version" in str(fig.race_lines(sanitize(False)))
    assert [r["kernel"] for r in fig.sanitizer_table(sanitize(True)).rows].count(
        "Double buffering, racy (one barrier missing)") == 2


def test_enclosing_lambda():
    lines = ["template <int X>", "__global__ void f() {", "    auto store_tile = [&](int s) {", "        x = 1;"]
    assert fig.enclosing(lines, 4) == "store_tile" and fig.enclosing(lines, 2) is None


def test_fix_cost_and_correctness_sentences():
    db = timing()
    assert "the barrier costs nothing this measurement can see" in str(fig.fix_cost(db))
    slower = ResultSet(db.chapter, [dict(r, tflops=r["tflops"] * 0.95) if r["kernel"] == fig.TWO_STAGE else r
                                    for r in db.rows], db.device, db.source, db.live)
    text = str(fig.fix_cost(slower))
    assert "is outside it" in text and "only repeated, interleaved runs would separate" in text
    assert "3 of 3 runs of the racy kernel do not" in str(fig.correctness(db))
    assert "n = 1024: 64 blocks" in str(fig.small_grid(db, H200)) and "fewer blocks than" in str(fig.small_grid(db, H200))


def test_versus_compares_size_by_size():
    text = str(fig.versus(timing(), H200))
    assert "at n = 1024 the best of 3 cp.async configs" in text and "behind the two-stage kernel" in text
    assert "at n = 4096 the best of 4 cp.async configs (BK=32, 3 stages) runs 45.0 TFLOP/s, 2.3% ahead" in text
    assert "**same occupancy**" in text


def test_figures():
    db = timing()
    s = fig.stages_figure(db)
    assert [b.label for b in s.layout.updatemenus[0].buttons] == ["2 stages", "3 stages", "4 stages"]
    assert len(s.data) == 9 and sum(bool(t.visible) for t in s.data) == 3
    d = fig.pipeline_diagram(stages=(2, 3), tiles=6)
    assert len(d.data) == 2 * 2 * 6 and d.layout.xaxis.ticktext[0].startswith("pro")
    f = fig.load_to_use_figure([("a", "bank_conflicts", {}), ("b", "double_buffering", {"BK": 8})], H200)
    assert list(f.data[0].x) == [0, pipeline.load_to_use("double_buffering", {"BK": 8}, H200)["min"]]
    # no arithmetic in between: said in words, off the axis where the bar's name ends
    assert f.data[0].text[0] == "\u00a0\u00a0none: used at once" and f.data[0].textposition[0] == "outside"


def test_occupancy_and_shared_memory_tables():
    regs = {r["kernel"]: r for r in fig.registers([("two", "double_buffering", {"BK": 8}),
                                                   ("spill", "double_buffering", {"BK": 16})], H200).rows}
    assert regs["two"]["spills (bytes)"] == 0 and regs["spill"]["spills (bytes)"] > 0
    sm = {(r["BK"], r["stages"]): r for r in fig.smem(H200).rows}
    assert sm[(16, 3)]["shared memory (KB)"] == 48 and sm[(32, 4)]["blocks per SM (shared memory alone)"] == 1
    assert "**1 blocks" not in fig.smem_exercise(H200).text and fig.smem_exercise(H200).text.startswith("1:")
    assert "**16 KB per SM**" in fig.in_flight(H200).text and "**64 KB per SM**" in fig.in_flight(H200).text


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_89"])
def test_the_shared_memory_exercise_on_gpus_where_the_config_does_not_fit(arch):
    text = fig.smem_exercise(Device.emulating(arch)).text     # 128 KB per block: more than these allow
    assert text.startswith("None: 128 KB is more than the") and "BK=16" in text


# ------------------------------------------------------------ what the chapter's figures rely on
def test_racy_and_fixed_are_one_template_differing_in_fixed():
    from helpers.runtime.specs import get

    fixed, racy = get("double_buffering"), get("double_buffering_racy")
    assert fixed.function == racy.function and fixed.file == racy.file == "09_double_buffering.cu"
    assert racy.broken and not fixed.broken
    assert racy.name_expression(racy.defaults()) == "sgemm_double_buffering<8, 0, 0>"


def test_the_sweep_has_every_depth_at_every_size():
    from helpers.runtime.specs import cp_async, double_buffering

    have = {(s.name, tuple(sorted(p.items())), shape[0]) for s, p, shape in cp_async.SWEEP + double_buffering.SWEEP}
    for n in (1024, 2048, 4096):
        assert ("double_buffering", (("BK", 8),), n) in have
        for s in (2, 3, 4):
            assert ("cp_async", (("BK", 16), ("STAGES", s)), n) in have


def test_machine_code_tables():
    pair = [("two", "double_buffering", {"BK": 8}), ("async", "cp_async", {"BK": 16, "STAGES": 3})]
    roles = {r["kernel"]: r for r in fig.register_roles(pair).rows}
    assert roles["async"]["A values"] == 32 and roles["two"]["next tile (staging)"] == 8
    cover = {r["kernel"]: r for r in fig.cover(pair, H200).rows}
    text = str(fig.cover_text(pair, H200))
    for name, r in cover.items():
        short = r[f"loads with fewer than {pipeline.SHORT} FFMA"]
        assert f"{name}: {short} of its {r['LDS.128 in the loop']} LDS.128" in text
    shares = {name: r[f"loads with fewer than {pipeline.SHORT} FFMA"] / r["LDS.128 in the loop"] for name, r in cover.items()}
    if shares["two"] != shares["async"]:
        assert f"The larger share of short covers: {max(shares, key=shares.get)}." in text
    mix = {r["kernel"]: r for r in fig.mix(pair, H200).rows}
    assert mix["two"]["FFMA"] == 512 and mix["async"]["FFMA"] == 1024 and mix["two"]["FFMA share"].endswith("%")
    assert "The larger FFMA share:" in str(fig.mix_text(pair, H200))
    bars = {r["kernel"]: r["BAR instructions"] for r in fig.barriers(H200).rows}
    assert sorted(bars.values())[1] == sorted(bars.values())[0] + 1
    checked, fast = fig.fast_path_loops(H200).rows
    assert checked["FFMA"] == fast["FFMA"] == 512 and checked["instructions"] > fast["instructions"]
    assert checked["branches (BRA)"] > fast["branches (BRA)"]
    extra = 100 * (checked["instructions"] / fast["instructions"] - 1)
    text = str(fig.fast_path_loops_text(timing(), H200))
    assert f"{checked['instructions'] - fast['instructions']} more instructions" in text and f", {extra:.0f}% more" in text
    l2u = fig.load_to_use_table([("prev", "bank_conflicts", {})], H200).rows[0]
    assert l2u["most"] == 0 and l2u["FFMA per loop iteration"] == 1024


def test_fast_path_loops_text_weighs_the_count_against_the_gain(monkeypatch):
    from helpers.tables import Table

    loops = Table([{"instructions": 660, "FFMA": 512, "branches (BRA)": 9, "compares (ISETP)": 13},
                   {"instructions": 600, "FFMA": 512, "branches (BRA)": 1, "compares (ISETP)": 0}])
    monkeypatch.setattr(fig, "fast_path_loops", lambda device=None: loops)
    for gain, words in ((1.20, "the measured gain is larger still"), (1.05, "the measured gain is within it")):
        table = Table([{"n": 4096, "checked loads (TFLOP/s)": 40.0, "fast path (TFLOP/s)": 40.0 * gain,
                        "gain": f"{100 * (gain - 1):+.1f}%", "cuBLAS (TFLOP/s)": 50.0}])
        monkeypatch.setattr(fig, "fast_path_table", lambda rs, t=table: t)
        text = str(fig.fast_path_loops_text(None, H200))
        assert "60 more instructions" in text and "cost about 10% more time" in text and words in text


def test_step_text_names_both_configs_and_their_bands():
    prev = (row("bank_conflicts", {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}, 4096, 42.0), "synthetic")
    this = (row("double_buffering", {"BK": 8, "FIXED": 1, "FAST_PATH": 0}, 4096, 44.1), "synthetic")
    text = str(fig.step_text(prev, this, "the previous kernel", "two stages"))
    assert "two stages (BK=8) **44.1 TFLOP/s**" in text and "(BK=16 split, swizzle) 42.0" in text
    assert "**+5.0%**" in text and "0.4% and 0.4% wide" in text


def test_fast_path_table_pairs_the_two_loops_by_size():
    rows = timing().rows + [row("double_buffering", {"BK": 8, "FIXED": 1, "FAST_PATH": 1}, n, t)
                            for n, t in ((1024, 19.8), (4096, 48.4))]
    rs = ResultSet("double_buffering", rows, H200, "synthetic", False)
    t = fig.fast_path_table(rs)
    assert [r["n"] for r in t.rows] == [1024, 4096] and t.rows[1]["gain"] == "+10.0%"
    text = str(fig.fast_path_text(rs))
    assert "At n = 4096 the loop without checks runs **48.4 TFLOP/s** against 44.0" in text and "97% of cuBLAS" in text
    assert "not recorded" in str(fig.fast_path_text(timing()))
    prev = row("bank_conflicts", {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}, 4096, 44.5)
    text = str(fig.fast_path_text(rs, prev))
    assert "changed it by -1.1% and the loop without checks by +8.8%: at this size the gain" in text
    assert "(and BK = 8 where the previous kernel has 16)" in text
    prev["tflops"] = 38.0                               # two stages alone gained most: no such conclusion
    assert "did not gain on its own" not in str(fig.fast_path_text(rs, prev))
