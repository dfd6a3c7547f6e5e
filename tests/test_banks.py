"""The bank model (helpers.models.banks), the chapter's figures and sentences (helpers.figures.banks)
and the Nsight Compute plumbing (helpers.measure.ncu), on hand-computed cases and synthetic rows."""
import json
import subprocess

import pytest

from helpers.figures import banks as fig
from helpers.hardware import Device
from helpers.measure import ncu
from helpers.measure.results import ResultSet
from helpers.models.banks import (Access, a_load_pieces, fragment_wavefronts, ideal_wavefronts, implied_a_loads,
                                  kernel_access, predicted, schedule, table, tile_totals, variant_name, warp_ffma,
                                  wavefronts)
from helpers.runtime.specs.bank_conflicts import VARIANTS
from helpers.figures import style

H200 = Device.from_datasheet("NVIDIA H200")


# ------------------------------------------------------------ textbook cases
def test_stride_one_32bit_is_one_wavefront():
    assert wavefronts([[i] for i in range(32)]) == 1


def test_stride_32_words_is_32_wavefronts():
    assert wavefronts([[32 * i] for i in range(32)]) == 32


def test_stride_two_is_two_way_and_odd_stride_conflict_free():
    assert wavefronts([[2 * i] for i in range(32)]) == 2
    assert wavefronts([[33 * i] for i in range(32)]) == 1


def test_broadcast_is_not_a_conflict():
    assert wavefronts([[7] for _ in range(32)]) == 1
    assert wavefronts([[0], [32]] + [[0]] * 30) == 2      # two words of one bank: a conflict


def test_lds128_takes_four_wavefronts_at_least_in_the_model():
    contiguous = [[4 * i + j for j in range(4)] for i in range(32)]
    assert wavefronts(contiguous, width=4) == ideal_wavefronts(contiguous, width=4) == 4
    assert wavefronts([[0, 1, 2, 3] for _ in range(32)], width=4) == 4      # a broadcast, still 4 in the model


def test_lds128_conflicts_are_counted_per_quarter_warp():
    assert wavefronts([[8 * i + j for j in range(4)] for i in range(32)], width=4) == 8
    wrap = [[4 * (i % 8) + j + 32 * (i // 8) for j in range(4)] for i in range(32)]
    assert wavefronts(wrap, width=4) == 4


def test_lds64_half_warps_and_inactive_lanes():
    assert wavefronts([[2 * i, 2 * i + 1] for i in range(32)], width=2) == 2
    words = [[i] if i < 8 else [] for i in range(32)]
    assert wavefronts(words) == 1 and ideal_wavefronts(words) == 1
    with pytest.raises(ValueError):
        wavefronts([[0]] * 32, width=3)


def test_schedule_numbers_the_serialised_words():
    s = schedule([[32 * (i % 2)] for i in range(32)])
    assert {s[0][0], s[1][32]} == {1, 2}
    assert Access("x", [[32 * i] for i in range(32)], 1, "store").conflicts() == 31


# ------------------------------------------------------------ kernel 08
def test_alignment_decides_the_compiled_reads():
    assert a_load_pieces(0) == [4] and a_load_pieces(130) == [2, 2] and a_load_pieces(129) == [1, 2, 1]


@pytest.mark.parametrize("BK,PAD,ways", [(8, 0, 2), (8, 4, 1), (8, 1, 2), (8, 2, 2), (16, 0, 4), (16, 2, 1),
                                         (16, 4, 2), (16, 1, 2)])
def test_padding_fixes_the_store_only_for_the_right_pad(BK, PAD, ways):
    assert kernel_access("A store", BK=BK, PAD=PAD, SWIZZLE=0).wavefronts() == ways


@pytest.mark.parametrize("BK", [8, 16])
def test_swizzle_fixes_the_store_and_keeps_float4_contiguous(BK):
    for j in range(4):
        assert kernel_access("A store", BK=BK, SWIZZLE=1, j=j).wavefronts() == 1
    for k in range(BK):
        acc = kernel_access("A load", BK=BK, SWIZZLE=1, k=k)
        assert acc.width == 4 and all(ws == list(range(ws[0], ws[0] + 4)) and ws[0] % 4 == 0 for ws in acc.words)


def test_split_tile_fixes_the_b_reads_and_b_store_is_clean():
    assert kernel_access("B load", SPLIT=0).wavefronts() == 8
    assert kernel_access("B load", SPLIT=1).wavefronts() == 4
    assert kernel_access("B store", BK=16).wavefronts() == 4


def test_tile_totals_count_every_instruction():
    tot = tile_totals(BK=16, SPLIT=0, PAD=0, SWIZZLE=0)
    assert tot["A store"]["instructions"] == 8 * 8 and tot["B store"]["instructions"] == 8 * 2
    assert tot["A load"]["instructions"] == tot["B load"]["instructions"] == 8 * 32
    assert tot["B load"]["per_instruction"] == 8.0 and tot["A store"]["per_instruction"] == 4.0
    assert len(table(16)) == 6 * 4


def test_variant_names_and_prediction():
    assert variant_name({"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}) == "split + swizzle"
    assert variant_name({"SPLIT": 0, "PAD": 2, "SWIZZLE": 1}) is None
    assert predicted("bank_conflicts", {"BK": 16, "SPLIT": 0, "SWIZZLE": 0}) == {
        "load wavefronts per instruction": 6.0, "store wavefronts per instruction": 4.0}
    assert predicted("thread_tile_2d", {}) is None


def test_implied_a_loads_solves_for_the_broadcast_reads():
    params = {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}
    per_tile = tile_totals(**{k: params[k] for k in ("BK", "SPLIT", "PAD", "SWIZZLE")})
    tiles = 64 * 64                                 # n = 1024: 64 blocks, 64 k-tiles
    inst = per_tile["load"]["instructions"] * tiles
    waves = tiles * (per_tile["B load"]["wavefronts"] + 2 * per_tile["A load"]["instructions"])   # A reads: 2 each
    a = implied_a_loads("bank_conflicts", params, {"load instructions": inst, "load wavefronts": waves})
    assert a["A wavefronts per instruction"] == 2.0 and a["A model per instruction"] == 4.0 and a["tiles"] == tiles
    assert implied_a_loads("bank_conflicts", params, {"load instructions": inst + 1, "load wavefronts": waves}) is None
    assert implied_a_loads("thread_tile_2d", {}, {"load instructions": 1, "load wavefronts": 1}) is None
    assert warp_ffma(1024, 1024, 1024) == 1024 ** 3 // 32


def test_fragment_models_of_the_warp_tile_and_the_split_tile():
    w = fragment_wavefronts("warptiling")                       # 128x128, w64x64, t16x8: lanes 4 x 8
    assert (w["lds_per_thread"], w["ffma_per_thread"], w["wavefronts"], w["quarter_warp_wavefronts"]) == (6, 128, 6, 24)
    assert w["waves_per_1k_warp_ffma"] == pytest.approx(1000 * 6 / 128)
    d = fragment_wavefronts("double_buffering")                 # B reads: 16 chunks, two wavefronts each
    assert (d["lds_per_thread"], d["wavefronts"], d["quarter_warp_wavefronts"]) == (4, 6, 16)


# ------------------------------------------------------------ synthetic recorded rows
def counter_rows(a_waves: float = 2.0, n: int = 1024) -> list[dict]:
    """ncu rows for every kernel-08 layout: the model's counts, with the A reads costing ``a_waves``."""
    rows = []
    for BK in (8, 16):
        for v in VARIANTS.values():
            p = dict(v, BK=BK)
            tot = tile_totals(**p)
            tiles = (n // 128) ** 2 * (n // BK)
            vals = {"load instructions": tot["load"]["instructions"] * tiles,
                    "load wavefronts": tiles * (tot["B load"]["wavefronts"]
                                                + round(tot["A load"]["wavefronts"] * a_waves / 4)),
                    "load bank conflicts": tiles * tot["load"]["conflicts"],
                    "store instructions": tot["store"]["instructions"] * tiles,
                    "store wavefronts": tot["store"]["wavefronts"] * tiles,
                    "store bank conflicts": tot["store"]["conflicts"] * tiles}
            metric = {v_: k for k, v_ in ncu.SHORT.items()}
            rows += [{"kernel": "bank_conflicts", "params": p, "label": "x", "M": n, "N": n, "K": n,
                      "metric": metric[k], "value": v_} for k, v_ in vals.items()]
    return rows


def timing_rows(n: int = 4096) -> list[dict]:
    out = []
    speeds = {"contiguous (as 07)": 35.0, "split": 39.0, "split + pad 1": 37.0, "split + pad 2": 38.4,
              "split + pad 4": 39.4, "split + swizzle": 38.3}
    for BK in (8, 16):
        for name, v in VARIANTS.items():
            t = speeds[name] + (4.0 if BK == 16 and name != "contiguous (as 07)" else 0.0)
            ms = 2 * n ** 3 / (t * 1e12) * 1e3
            out.append({"kernel": "bank_conflicts", "params": dict(v, BK=BK), "M": n, "N": n, "K": n, "tflops": t,
                        "ms": ms, "ms_p20": ms * 0.999, "ms_p80": ms * 1.001, "cublas_tflops": 51.0,
                        "ok": True, "rel_err": 0.0})
    return out


def rs(chapter, rows):
    return ResultSet(chapter, rows, H200, "synthetic", False)


# ------------------------------------------------------------ figures and sentences
def test_cases_table_matches_the_model():
    t = fig.cases()
    by = {r["access"]: r for r in t.rows}
    assert by["32-bit, stride 32 words (a column of a 32-wide array)"]["wavefronts (model)"] == 32
    assert by["128-bit, float4 8 words apart"]["wavefronts (model)"] == 8
    assert by["128-bit, 16 lanes share each float4 (broadcast)"]["wavefronts (model)"] == 4


def test_lanes_table_shows_the_collision():
    t = fig.lanes("B load", "contiguous (as 07)")
    assert [r["wavefront"] for r in t.rows] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert "8 wavefronts" in t.caption


def test_heatmap_menu_per_layout_with_a_short_title_stating_the_result():
    f = fig.heatmap("A store")
    assert len(f.data) == len(VARIANTS) and len(f.layout.updatemenus[0].buttons) == len(VARIANTS)
    assert all(len(style.plain(t).replace("<b>", "").replace("</b>", "")) <= fig.TITLE_CHARS for t in fig.titles(f))
    assert "4 wavefronts" in fig.titles(f)[1] and "4-way" in fig.titles(f)[1]       # split, BK 16
    assert sum(bool(t.visible) for t in f.data) == 1
    assert f.layout.legend.yref == "container"


def test_model_figure_has_a_menu_over_bk_and_every_access():
    f = fig.model_figure()
    assert len(f.data) == 2 * 4 and [b.label for b in f.layout.updatemenus[0].buttons] == ["BK = 8", "BK = 16"]


def test_tables_of_the_fixes():
    pad = {(r["BK"], r["PAD"]): r for r in fig.padding().rows}
    assert pad[(8, 4)]["A store wavefronts (minimum 1)"] == 1 and pad[(16, 2)]["A store wavefronts (minimum 1)"] == 1
    assert not pad[(16, 2)]["rows 16-byte aligned"] and pad[(16, 4)]["rows 16-byte aligned"]
    sw = fig.swizzle(16).rows
    assert [r["XOR mask x(k)"] for r in sw] == [0, 8, 16, 24]
    assert [r["its banks"] for r in sw] == ["20-23", "28-31", "4-7", "12-15"]


def test_counters_figure_table_and_broadcast_sentence():
    c = rs("bank_conflicts_ncu", counter_rows(a_waves=2.0))
    f = fig.counters_figure(c)
    assert [b.label for b in f.layout.updatemenus[0].buttons] == ["loads", "stores"] and len(f.data) == 4
    table = fig.counters_table(c)
    assert len(table.rows) == 12
    text = str(fig.broadcast(c))
    assert "**3 wavefronts per load instruction**" in text and "**2 wavefronts each**" in text
    same = str(fig.broadcast(rs("bank_conflicts_ncu", counter_rows(a_waves=4.0))))
    assert "what the model charges" in same


def test_missing_counters_are_said_not_drawn():
    empty = rs("bank_conflicts_ncu", [{"kernel": "bank_conflicts", "params": {}, "metric": "error", "value": None,
                                        "error": "ncu is not installed"}])
    assert "ncu is not installed" in str(fig.counters_table(empty))
    f = fig.counters_figure(empty)
    assert len(f.data) == 0 and "ncu is not installed" in f.layout.annotations[0].text


def test_split_exercise_is_computed_from_the_counters():
    s = fig.split_exercise(rs("bank_conflicts_ncu", counter_rows(a_waves=2.0)))
    assert "**4 wavefronts per B read**" in s.text and "to **5**" in s.text
    assert "<details" in s._repr_html_() and "<code>" in s._repr_html_()


def test_ranking_follows_the_rows():
    text = str(fig.ranking(rs("bank_conflicts", timing_rows())))
    assert "fastest store fix here is **split + pad 4**" in text
    assert "slower than no store fix at all: split + pad 2, split + swizzle, split + pad 1" in text
    rows = timing_rows()
    for r in rows:      # now the swizzle wins at both BK
        if r["params"]["SWIZZLE"]:
            r["tflops"] += 3
    assert str(fig.ranking(rs("bank_conflicts", rows))).count("fastest store fix here is **split + swizzle**") == 2


def test_why_points_and_text_use_the_measured_wavefronts():
    t, c = rs("bank_conflicts", timing_rows()), rs("bank_conflicts_ncu", counter_rows())
    pts = fig.why_points(t, c)
    assert len(pts) == 12
    f = fig.why_figure(t, c)
    assert len(f.data) == len(VARIANTS) + 2
    assert "splitting the thread tile removes" in str(fig.why(t, c))


def test_roofline_configs_slider_and_one_intensity():
    t = rs("bank_conflicts", timing_rows())
    f = fig.roofline_configs(t.rows, H200, "synthetic", title="Layouts on the roofline")
    assert len(f.layout.sliders[0].steps) == 12 and len(f.data) == 12 * 4
    # the caller's title stays, each step adds its config's numbers, units included
    titles = [style.plain(f.layout.title.text)] + [style.plain(s.args[1]["title.text"]) for s in f.layout.sliders[0].steps]
    assert all(t.startswith("Layouts on the roofline: ") and t.endswith(" TFLOP/s)") for t in titles), titles[:2]
    assert "31.5 FLOP/byte" in str(fig.same_roof(t.rows, H200))


def test_wrap_and_fit():
    assert fig.wrap("a b c d", 3) == "a b<br>c d"
    assert fig.wrap("<b>aaa</b> bbb", 7) == "<b>aaa</b> bbb"
    assert fig.wrap("at n = 1024 now", 6) == "at<br>n\u00a0=\u00a01024<br>now"
    f = fig.layouts_figure(rs("bank_conflicts", timing_rows()))
    assert f.layout.legend.yref == "container" and len(f.data) == 3
    bars = [t for t in f.data if t.type == "bar"]
    assert all(t.error_x.array is not None and all(v.endswith("\u00a0\u00a0") for v in t.text) for t in bars)


def test_ncu_command_is_one_shell_command():
    text = str(fig.ncu_command("bank_conflicts"))
    assert text.startswith("```bash\nncu --csv") and "--launch-count 1" in text
    body = text.split("\n", 1)[1].rsplit("\n```", 1)[0]
    argv = subprocess.run(["bash", "-c", 'printf "%s\\n" ' + body.replace("ncu --csv", "ncu --csv", 1)],
                          capture_output=True, text=True).stdout
    assert ",".join(ncu.METRICS) in argv


# ------------------------------------------------------------ Nsight Compute output
DETAILS = '''==PROF== Connected to process 48213 (/usr/bin/python3.12)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","p","h","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","m","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","6,291,456"
"0","1","p","h","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","m","smsp__inst_executed_op_shared_ld.sum","inst","1,048,576"
'''


def test_parse_csv_and_pivot():
    rows = ncu.parse_csv(DETAILS)
    assert [(r["metric"], r["value"]) for r in rows] == [
        ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 6291456),
        ("smsp__inst_executed_op_shared_ld.sum", 1048576)]
    assert ncu.parse_csv("==PROF== Disconnected\n") == []
    table = ncu.pivot([dict(r, kernel="bank_conflicts", params={"BK": 16}, label="x") for r in rows])
    assert table[0]["load wavefronts per instruction"] == 6.0


def test_command_names_the_kernel_and_one_launch():
    cmd = ncu.command("bank_conflicts", {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}, 1024, ncu="ncu")
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:sgemm_bank_conflicts"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert json.loads(cmd[-4]) == {"BK": 16, "PAD": 0, "SPLIT": 1, "SWIZZLE": 1} and cmd[-3:] == ["1024"] * 3


def test_profiled_configs_cover_every_layout():
    cfgs = ncu.bank_conflict_configs()
    assert ("vectorized", {}) in cfgs and len([c for c in cfgs if c[0] == "bank_conflicts"]) == 12


def test_cublas_command_profiles_cupy_matmul_at_the_size():
    cmd = ncu.command(ncu.CUBLAS, {}, 4096, ncu.PIPE_METRICS, ncu="ncu")
    assert cmd[cmd.index("--profile-from-start") + 1] == "off" and "--kernel-name" not in cmd
    assert cmd[-4] == ncu.LAUNCH_CUBLAS and "profilerStart()" in ncu.LAUNCH_CUBLAS
    assert cmd[-3:] == ["4096"] * 3 and ",".join(ncu.PIPE_METRICS) in cmd


def test_a_shape_is_profiled_as_m_n_k_and_the_launch_script_reads_it(tmp_path):
    # --shape M N K: both launch scripts take (M, N, K) and make A (M, K), B (K, N), C (M, N)
    cmd = ncu.command("final", {"BM": 64}, (8174, 407, 180), ncu.STALL_METRICS, ncu="ncu")
    assert cmd[-3:] == ["8174", "407", "180"] and cmd[-6] == ncu.LAUNCH
    assert ncu.shape_of(512) == (512, 512, 512) and ncu.shape_of((3, 4, 5)) == (3, 4, 5)
    for script in (ncu.LAUNCH, ncu.LAUNCH_CUBLAS):
        assert "(M, K)" in script and "(K, N)" in script
    rows = [dict(kernel="final", params={}, label="x", metric=f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio",
                 value=v) for r, v in (("barrier", 0.5), ("long_scoreboard", 1.25))]
    (d,) = ncu.stalls(rows)
    assert d["barrier"] == 0.5 and d["long_scoreboard"] == 1.25


def test_pipes_pivot_counts_the_integer_instructions_on_the_fma_pipe():
    # 1000 FFMA (32 threads each) and 30 IMAD or VIADD on the FMA pipe: 0.03 per FFMA
    rows = [dict(kernel="final", params={}, label="x", metric=m, value=v) for m, v in (
        ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", 32_000), ("smsp__inst_executed_pipe_fma.sum", 1030),
        ("smsp__inst_executed_pipe_alu.sum", 12))]
    (d,) = ncu.pivot(rows)
    assert d["other fma-pipe instructions per FFMA"] == 0.03 and d["alu pipe"] == 12
    assert "load wavefronts per instruction" not in d


def test_cublas_kernels_groups_ncu_launches_per_product_after_each_marker(script):
    mod = script("cublas_kernels")
    launches = [(0, mod.MARKER), (1, "sm80_xmma_gemm_tilesize64x64"), (2, mod.MARKER),
                (3, "Kernel2<cutlass_80_simt_sgemm_256x128_8x4>"), (4, "splitKreduce_kernel"), (5, mod.MARKER),
                (6, "a"), (7, mod.MARKER), (8, "b"), (9, mod.MARKER), (10, "c")]
    rows = [dict(id=str(i), kernel_name=name, metric=m, value=v)
            for i, name in launches for m, v in (("launch__grid_dim_z", str(i)), ("gpu__time_duration.sum", "1000"))]
    groups = mod.launches_per_shape(rows)
    assert [[k["name"] for k in g] for g in groups] == [
        ["sm80_xmma_gemm_tilesize64x64"], ["Kernel2<cutlass_80_simt_sgemm_256x128_8x4>", "splitKreduce_kernel"],
        ["a"], ["b"], ["c"]]                       # launch 10 comes after 9, not after 1
    assert groups[1][1]["launch__grid_dim_z"] == "4"


def test_the_launch_script_makes_operands_in_the_configs_layouts(monkeypatch):
    # a config that reads A or B as a transposed view gets one (a row-major A is refused by it)
    import json
    import sys
    import types

    import numpy as np

    seen = {}
    class Rng:                          # numpy's uniform has no dtype
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def uniform(self, lo, hi, shape, dtype):
            return self.rng.uniform(lo, hi, shape).astype(dtype)

    fake_cupy = types.SimpleNamespace(float32=np.float32, empty=np.empty, random=types.SimpleNamespace(default_rng=Rng),
                                      cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None)))
    fake_launch = types.ModuleType("helpers.runtime.launch")
    fake_launch.prepare = lambda name, M, N, K, params: lambda A, B, C: seen.update(A=A, B=B, C=C)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "helpers.runtime.launch", fake_launch)
    for a_t, b_t in ((0, 0), (1, 0), (0, 1), (1, 1)):
        monkeypatch.setattr(sys, "argv", ["-c", "final", json.dumps({"A_T": a_t, "B_T": b_t}), "5", "6", "7"])
        exec(ncu.LAUNCH, {})
        A, B = seen["A"], seen["B"]
        assert A.shape == (5, 7) and B.shape == (7, 6) and seen["C"].shape == (5, 6)
        assert A.flags.c_contiguous == (not a_t) and A.T.flags.c_contiguous == bool(a_t)
        assert B.flags.c_contiguous == (not b_t) and B.T.flags.c_contiguous == bool(b_t)
