"""CPU tests of the final chapter's figures, tables and computed sentences
(helpers/figures/final.py) and of the waves model (helpers/models/waves.py)."""
import math
from dataclasses import replace

import pytest

from helpers import hardware
from helpers.figures import final as F
from helpers.figures import style
from helpers.measure.results import ResultSet
from helpers.models import waves
from helpers.runtime.specs import final as final_spec

H200 = hardware.Device.from_datasheet("NVIDIA H200")
D = final_spec.SPEC.defaults()


def row(shape, tflops, cublas, params=None, kernel="final", ok=True, band=0.002):
    M, N, K = shape
    ms = 2 * M * N * K / (tflops * 1e12) * 1e3
    return {"kernel": kernel, "params": dict(params or D), "M": M, "N": N, "K": K, "tflops": tflops,
            "cublas_tflops": cublas, "ms": ms, "ms_p20": ms * (1 - band), "ms_p80": ms * (1 + band),
            "rel_err": 0.0, "ok": ok}


@pytest.fixture
def fixed_blocks(monkeypatch):
    """Resident blocks per SM without an offline compile: 1 for 256 threads, 2 for 128, 3 below."""
    def fake(params, device):
        t = final_spec.SPEC.threads(params)
        return (1 if t >= 256 else 2 if t >= 128 else 3), "test"
    monkeypatch.setattr(waves, "resident_blocks", fake)


# ------------------------------------------------------------------ waves
def test_waves_of_a_hand_computed_grid():
    w = waves.waves_of(dict(D, BM=128, BN=256, SPLITK=1), 4096, 4096, 4096, H200, per_sm=1)
    assert (w["tiles"], w["blocks"], w["slots"], w["waves"]) == (512, 512, 132, 4)
    assert w["last_wave"] == pytest.approx((512 - 3 * 132) / 132)
    assert w["utilisation"] == pytest.approx(512 / (4 * 132))


def test_waves_of_counts_split_blocks_and_resident_blocks():
    w = waves.waves_of(dict(D, BM=128, BN=128, SPLITK=4), 8192, 128, 8192, H200, per_sm=2)
    assert (w["tiles"], w["blocks"], w["slots"], w["waves"]) == (64, 256, 264, 1)
    assert w["last_wave"] == pytest.approx(256 / 264) == w["utilisation"]


def test_waves_of_a_stream_k_config_counts_the_plans_grid():
    p = dict(D, BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, STAGES=2, STREAMK=1)
    g, rounds = final_spec.stream_k_grid(p, 4096, 4096, 4096, H200)
    w = waves.waves_of(p, 4096, 4096, 4096, H200, per_sm=1)
    assert w["blocks"] == g * (1 + rounds) == final_spec.plan(p, 4096, 4096, 4096, H200)[0][0] * (1 + rounds)
    assert w["blocks"] != w["tiles"]          # 1024 tiles, but one row of g stream-K blocks plus whole rows


def test_candidate_estimates_mark_the_dispatchers_choice():
    choice = final_spec.choose_config(128, 8192, 8192, H200)
    est = waves.candidate_estimates(128, 8192, 8192, H200, choice)
    chosen = [e for e in est if e["chosen"]]
    assert len(chosen) == 1
    assert chosen[0]["config"] == choice
    considered = [e for e in est if e["considered"]]
    assert min(considered, key=lambda e: e["ms"]) is chosen[0]
    # a split into more parts than K has k-tiles is not considered; one of as many parts is
    short = waves.candidate_estimates(200, 300, 100, H200, final_spec.choose_config(200, 300, 100, H200))
    # 7 k-tiles of 16, 4 of 32
    over = [e for e in short if e["split"] > math.ceil(100 / e["config"]["BK"])]
    assert over and not any(e["considered"] for e in over)
    assert any(e["considered"] and e["split"] == 4 and e["config"]["BK"] == 32 for e in short)


# ------------------------------------------------------------------ pipeline and banks
def test_pipeline_figure_has_one_step_per_depth_and_the_right_bars():
    fig = F.pipeline_figure((2, 3, 4, 5), tiles=8)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["2 stages", "3 stages", "4 stages", "5 stages"]
    # 8 FFMA bars per depth, and one copy bar for every tile issued before its iteration (t >= 1)
    assert len(fig.data) == 4 * (8 + 7)
    assert buttons[2].args[1]["yaxis.range"] == [3.5, -0.5]
    ffma = [t for t in fig.data if t.text[0] == "FFMA<br>5"]
    assert ffma and all(t.base[0] == 5 and t.textangle == 0 for t in ffma)


def test_transpose_banks_pad_4_is_conflict_free_and_aligned():
    rows = {r["padding (floats)"]: r for r in F.transpose_banks((0, 1, 4), BM=128).rows}
    assert rows[0]["wavefronts"] == 8 and rows[0]["banks hit by 32 lanes"] == 4
    assert rows[4]["wavefronts"] == 1 and rows[4]["banks hit by 32 lanes"] == 32
    assert rows[4]["rows 16-byte aligned"] and not rows[1]["rows 16-byte aligned"]


def test_copy_mappings_sixteen_lanes_to_a_row_need_the_swizzle():
    rows = {r["copies"]: r for r in F.copy_mappings(BM=128).rows}
    eight, sixteen, swizzled = rows.values()
    assert (eight["rows of A read"], eight["store wavefronts (bank model)"]) == (4, 1)
    assert (sixteen["rows of A read"], sixteen["banks hit by 32 lanes"], sixteen["store wavefronts (bank model)"]) == (2, 16, 2)
    assert (swizzled["rows of A read"], swizzled["banks hit by 32 lanes"], swizzled["store wavefronts (bank model)"]) == (2, 32, 1)


# ------------------------------------------------------------------ rows
def rs_of(rows, device=H200, live=False):
    return ResultSet("final", rows, device, "recorded on Test GPU, 2026-01-01", live)


def test_chosen_row_prefers_the_dispatchers_config_then_the_fastest():
    want = final_spec.choose_config(4096, 4096, 4096, H200)
    other = dict(want, STAGES=4 if want["STAGES"] != 4 else 3)
    rs = rs_of([row((4096,) * 3, 47.0, 51.0, want), row((4096,) * 3, 48.0, 51.0, other)])
    assert F.chosen_row(rs, (4096,) * 3)["params"] == want
    rs = rs_of([row((4096,) * 3, 45.0, 51.0, other), row((4096,) * 3, 48.0, 51.0, dict(other, GROUP=0))])
    assert F.chosen_row(rs, (4096,) * 3)["tflops"] == 48.0
    assert F.chosen_row(rs, (2048,) * 3) is None
    with pytest.raises(KeyError, match="n=2048"):
        F.square_row(rs, 2048)


def test_knob_label_names_what_changed():
    assert F.knob_label(D, D) == "the choice"
    assert F.knob_label(dict(D, STAGES=3, GROUP=0), D) == "STAGES=3, GROUP=0"


def test_knobs_text_says_whether_bands_overlap():
    c = final_spec.choose_config(4096, 4096, 4096, H200)
    apart = rs_of([row((4096,) * 3, 47.0, 51.0, c), row((4096,) * 3, 45.0, 51.0, dict(c, STAGES=5))])
    assert "do not overlap" in str(F.knobs_text(apart)) and "4.4%" in str(F.knobs_text(apart))
    tied = rs_of([row((4096,) * 3, 47.0, 51.0, c, band=0.02),
                  row((4096,) * 3, 46.9, 51.0, dict(c, STAGES=5), band=0.02)])
    assert "a tie" in str(F.knobs_text(tied))


def test_grouping_text_keeps_the_groups_only_where_they_measured_faster():
    c = final_spec.choose_config(8192, 8192, 8192, H200)
    assert c["GROUP"]
    faster = rs_of([row((8192,) * 3, 52.5, 55.0, c), row((8192,) * 3, 50.0, 55.0, dict(c, GROUP=0))])
    text = str(F.grouping_text(faster))
    assert f"groups of {c['GROUP']} ran 5.0% faster than without them, which is why the default keeps them" in text
    slower = str(F.grouping_text(rs_of([row((8192,) * 3, 50.0, 55.0, c), row((8192,) * 3, 52.5, 55.0, dict(c, GROUP=0))])))
    assert "ran 4.8% slower than without them" in slower and "keeps them" not in slower
    assert "No run here" in str(F.grouping_text(rs_of([row((8192,) * 3, 52.5, 55.0, c)])))


# ------------------------------------------------------------------ the suite
def test_outliers_use_tukeys_fences():
    rows = [row((n, n, n), p / 2, 50.0) for n, p in zip(range(100, 700, 100), (80, 82, 85, 87, 90, 170))]
    out = F.outliers(rows)
    assert [r["M"] for r in out] == [600]
    assert F.outliers(rows[:3]) == []


def test_suite_summary_with_and_without_outliers():
    rows = [row((n, n, n), p / 2, 50.0) for n, p in zip(range(100, 700, 100), (80, 82, 85, 87, 90, 170))]
    s = F.suite_summary(rows)
    assert s["geomean"] == pytest.approx(math.exp(sum(math.log(p) for p in (80, 82, 85, 87, 90, 170)) / 6))
    assert s["geomean_without"] == pytest.approx(math.exp(sum(math.log(p) for p in (80, 82, 85, 87, 90)) / 5))
    assert s["outliers"] == ["n=600"] and s["above"] == ["n=600"]
    text = str(F.suite_text(rows))
    assert f"{s['geomean']:.1f}%" in text and f"{s['geomean_without']:.1f}%" in text and "n=600" in text


def test_suite_text_without_outliers_says_so():
    rows = [row((n, n, n), p / 2, 50.0) for n, p in zip(range(100, 600, 100), (88, 90, 91, 92, 94))]
    assert "No shape lies outside" in str(F.suite_text(rows))


def test_shortfall_lists_only_shapes_below_cublas_worst_first(fixed_blocks):
    rows = [row((512, 512, 512), 14.0, 10.0), row((4097,) * 3, 38.0, 44.0, dict(D, BN=64, WN=32, TM=8)),
            row((8192, 128, 8192), 41.0, 50.0, dict(D, BN=128, SPLITK=4)), row((1000, 3000, 777), 38.5, 38.2)]
    short = F.shortfall_rows(rows, H200)
    assert [s["shape"] for s in short] == ["8192x128x8192", "n=4097"]
    assert all(s["% of cuBLAS"] < 100 for s in short)
    text = str(F.shortfall_text(rows, H200))
    assert "2 of the 4 suite shapes are below cuBLAS" in text
    assert "n=512 (140%)" in text and "1000x3000x777 (101%)" in text
    assert "not shortfalls" in text


def test_shortfall_text_does_not_blame_a_full_last_wave(fixed_blocks):
    # 128x128 tiles, 2 per SM: 256 blocks in 264 slots, 97% busy, against an 18% gap
    rows = [row((8192, 128, 8192), 41.0, 50.0, dict(D, BN=128, SPLITK=4))]
    text = str(F.shortfall_text(rows, H200))
    assert "cannot be the main cause" in text and "partial tiles" in text
    # 64x64 tiles at 512^3 with 3 per SM: 64 blocks in 396 slots, mostly idle: the waves matter
    small = dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8)
    text = str(F.shortfall_text([row((512,) * 3, 5.0, 10.0, small)], H200))
    assert "could account for" in text and "cannot be" not in text
    # in one wave an idle slot is not an idle SM: 64 blocks leave 68 of the 132 SMs without one
    assert f"n=512 left {H200.sm_count - 64} of the {H200.sm_count} SMs without a block" in text


def test_suite_figure_bars_in_the_kernels_colours():
    rows = [row((512,) * 3, 14.0, 10.0), row((4097,) * 3, 38.0, 44.0, ok=False)]
    fig = F.suite_figure(rows, "src")
    assert [t.name for t in fig.data] == ["final (config chosen per shape)", "cuBLAS, same run"]
    assert list(fig.data[0].marker.color) == [style.colour("final"), style.WRONG]
    assert list(fig.data[0].text) == ["14.0 (140%)", "38.0 (86%)"]


# ------------------------------------------------------------------ steps and roofline
def test_waterfall_bars_start_where_the_previous_kernel_ended():
    from helpers.runtime.specs import get

    named = {k: row((4096,) * 3, tf, cub, get(k).defaults(), kernel=k)
             for k, tf, cub in (("naive", 0.5, 51.0), ("coalescing", 6.5, 51.2), ("final", 47.0, 51.4))}
    fig = F.waterfall_figure(named, "src")
    bars = fig.data[0]
    assert list(bars.y) == ["naive", "coalescing", "final"]
    assert list(bars.base) == [0.0, 0.5, 6.5]
    assert list(bars.x) == pytest.approx([0.5, 6.0, 40.5])
    assert list(bars.marker.color) == [style.colour(k) for k in named]
    assert len(set(bars.marker.color)) == 3
    assert [a.text for a in fig.layout.annotations] == ["0.5", "6.5 (+6.0)", "47.0 (+40.5)"]
    assert "51.0-51.4" in fig.data[1].name


def test_waterfall_names_a_kernel_that_ran_without_its_edge_checks():
    from helpers.runtime.specs import get

    named = {k: row((4096,) * 3, tf, 51.0, dict(get(k).defaults(), **extra), kernel=k)
             for k, tf, extra in (("double_buffering", 48.5, {"FAST_PATH": 1}), ("warptiling", 45.4, {}))}
    assert list(F.waterfall_figure(named, "src").data[0].y) == ["double_buffering<br>(fast path)", "warptiling"]


def test_waterfall_labels_sit_on_a_background_over_the_cublas_line():
    # the labels are annotations (drawn over every trace) on a light background, at the end of
    # each bar: right of a short gain, inside the end of a gain too long for the label to fit
    # right of it, left of a loss; so the dashed line never runs through their text
    from helpers.runtime.specs import get

    named = {k: row((4096,) * 3, tf, 51.0, get(k).defaults(), kernel=k)
             for k, tf in (("naive", 0.5), ("coalescing", 50.9), ("final", 48.0))}
    fig = F.waterfall_figure(named, "src")
    assert not fig.data[0].text
    notes = fig.layout.annotations
    assert [(a.x, a.y) for a in notes] == [(0.5, "naive"), (50.9, "coalescing"), (48.0, "final")]
    assert [a.xanchor for a in notes] == ["left", "right", "right"]
    assert all(a.bgcolor == F.LABEL_BACKGROUND and a.showarrow is False for a in notes)


def test_waterfall_axis_leaves_room_for_the_labels_on_a_phone():
    # on a 358 px figure every label right of its bar ends inside the plot, and a loss whose
    # label would run into the axis on the left has it on the right instead
    from helpers.runtime.specs import get

    named = {k: row((4096,) * 3, tf, 51.0, get(k).defaults(), kernel=k)
             for k, tf in (("naive", 0.5), ("coalescing", 6.5), ("double_buffering", 1.5), ("final", 51.2))}
    fig = F.waterfall_figure(named, "src")
    top = fig.layout.xaxis.range[1]
    plot = style.PHONE_PX - 20 - style.text_px("double_buffering") - 10
    for a in fig.layout.annotations:
        if a.xanchor == "left":
            assert a.x / top * plot + a.xshift + style.text_px(a.text) <= plot, a.text
    loss = fig.layout.annotations[2]
    assert loss.text.startswith("1.5 (-5.0)") and loss.xanchor == "left" and loss.x == 6.5


def test_waterfall_axis_ends_just_past_the_fastest_bar():
    # every chapter's kernel at n = 4096 as recorded (up to 52.5 TFLOP/s, cuBLAS 51.2): the axis
    # ends a tenth past the fastest bar, however long the labels; no label leaves the plot on a phone
    from helpers.runtime.specs import get

    tflops = {"naive": 0.5, "coalescing": 6.5, "smem_tiling": 8.9, "thread_tile_1d": 20.3, "thread_tile_2d": 35.9,
              "vectorized": 36.7, "bank_conflicts": 42.6, "double_buffering": 48.5, "cp_async": 40.3,
              "warptiling": 45.4, "final": 52.5}
    named = {k: row((4096,) * 3, tf, 51.2, dict(get(k).defaults(), **({"FAST_PATH": 1} if k == "double_buffering" else {})),
                    kernel=k) for k, tf in tflops.items()}
    fig = F.waterfall_figure(named, "src")
    top = fig.layout.xaxis.range[1]
    assert top == pytest.approx(1.1 * 52.5)
    plot = style.PHONE_PX - 20 - style.text_px("double_buffering") - 10   # the widest line of the names
    for a in fig.layout.annotations:
        start = a.x / top * plot + a.xshift
        end = start + style.text_px(a.text) if a.xanchor == "left" else start
        begin = start if a.xanchor == "left" else start - style.text_px(a.text)
        assert 0 <= begin and end <= plot, a.text


def test_roofline_uses_the_rows_device():
    slow = replace(H200, name="Slow GPU", bandwidth_gbs=1000.0, sm_count=66)
    rows = [row((4096,) * 3, 20.0, 25.0), row((1024,) * 3, 10.0, 15.0)]
    fig = F.roofline_figure(rows, rs_of(rows, slow), 4096)
    roof = fig.data[0]
    assert max(roof.y) == pytest.approx(slow.fp32_tflops)
    assert "Slow GPU" in fig.layout.title.subtitle.text
    # one legend entry for the other shapes, one for the point at n^3
    # (a long entry broken into lines that fit a phone: Plotly cuts it at the edge)
    names = [t.name for t in fig.data if t.showlegend is not False and t.name.startswith("final")]
    assert [style.plain(n.replace("<br>", " ")) for n in names] == [
        "final, the dispatcher's choice at each recorded shape (hover for each)", "final at n=4096"]
    assert all(len(line) <= style.LEGEND_CHARS for n in names for line in n.split("<br>"))
    cublas = [t for t in fig.data if t.name.startswith("cuBLAS")]
    assert cublas and all(t.textposition == "middle right" for t in cublas)


def test_roofline_marks_the_square_point_without_a_label_on_the_others():
    # several shapes share the intensity of n = 4096: no text beside any final point (it would
    # fall on them); that point is a diamond named in the legend, drawn over the other final points,
    # and cuBLAS over it (it shares its intensity); every other final point is a circle
    rows = [row((4096,) * 3, 48.0, 51.0), row((4096, 4096, 2048), 47.0, 51.0), row((1024,) * 3, 30.0, 40.0)]
    fig = F.roofline_figure(rows, rs_of(rows), 4096)
    finals = [t for t in fig.data if t.name.startswith("final")]
    assert all(not t.text or not any(t.text) for t in finals)
    assert all(t.mode == "markers" for t in finals)
    assert fig.data[-2].name == "final at n=4096" and fig.data[-2].marker.symbol == "diamond"
    assert fig.data[-1].name.startswith("cuBLAS")
    assert {t.marker.symbol for t in finals if t is not fig.data[-2]} == {"circle"}
    assert list(fig.data[-2].y) == [48.0] and list(fig.data[-1].y) == [51.0]


def test_knobs_axis_reaches_past_the_longest_whisker():
    c = final_spec.choose_config(4096, 4096, 4096, H200)
    c8 = final_spec.choose_config(8192, 8192, 8192, H200)
    rows = [row((4096,) * 3, 51.2, 51.4, c, band=0.01),
            row((4096,) * 3, 50.3, 51.4, dict(c, STAGES=3 if c["STAGES"] != 3 else 4)),
            row((8192,) * 3, 49.0, 51.0, c8, band=0.03),
            row((8192,) * 3, 48.0, 51.0, dict(c8, GROUP=0 if c8["GROUP"] else 8))]
    fig = F.knobs_figure(rs_of(rows))
    buttons = fig.layout.updatemenus[0].buttons
    assert len(buttons) == len(fig.data) == 2          # one trace per size, in the menu's order
    for trace, button in zip(fig.data, buttons):
        assert len(trace.x) == 2
        ex = trace.error_x
        lo = min(x - d for x, d in zip(trace.x, ex.arrayminus))
        hi = max(x + u for x, u in zip(trace.x, ex.array))
        a, b = button.args[1]["xaxis.range"]
        margin = 0.05 * (hi - lo)             # room for the marker and its label past the whisker's end
        assert a <= lo - margin and b >= hi + margin, ((a, b), (lo, hi))
    assert list(fig.layout.xaxis.range) == buttons[0].args[1]["xaxis.range"]


def test_splitk_text_counts_the_workspace():
    p = final_spec.choose_config(128, 8192, 8192, H200)
    text = str(F.splitk_text(128, 8192, 8192, H200))
    if p["SPLITK"] == 1:
        assert "no split" in text
    else:
        floats, counters = final_spec.workspace(p, 128, 8192, 8192, H200)
        floats -= sum(final_spec.packed_floats(p, 128, 8192, 8192))   # the text counts the split's share
        assert f"{floats * 4 / 2**20:.1f} MiB" in text
        assert ("no counters" if p["REDUCE"] else f"{counters} counters") in text


def test_check_here_without_a_gpu_is_a_sentence(monkeypatch):
    monkeypatch.setattr(hardware, "is_live", lambda: False)
    assert "No GPU here" in str(F.check_here())


def test_empty_inputs_give_a_figure_that_says_why():
    rs = rs_of([])
    figs = (F.knobs_figure(rs), F.waterfall_figure({}, "src"), F.roofline_figure([], rs), F.suite_figure([], "src"))
    for fig in figs:
        assert not fig.data and fig.layout.annotations[0].text.startswith("no ")


def test_smem_counters_pivot_measured_and_model(monkeypatch):
    from helpers.measure import ncu

    values = {"smsp__inst_executed_op_shared_ld.sum": 1000,
              "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 2500,
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0, "smsp__inst_executed_op_shared_st.sum": 0}
    rows = [{"kernel": "final", "params": D, "label": final_spec.SPEC.label(D), "M": 1024, "N": 1024, "K": 1024,
             "metric": m, "value": v} for m, v in values.items()]
    monkeypatch.setattr(F, "results", lambda chapter: ResultSet(chapter, rows, H200, "recorded on Test GPU", False))
    t = F.smem_counters()
    (r,) = t.rows
    assert r["kernel"] == "final" and r["load wavefronts per instruction (measured)"] == 2.5
    assert r["load bank conflicts (measured)"] == 0 and r["LDS.128 wavefronts per instruction (model)"] > 0
    assert str(ncu.SIZE) in t.caption


def test_smem_counters_missing_is_a_sentence(monkeypatch):
    from helpers.measure import datafile

    def missing(chapter):
        raise datafile.DataError("no recorded chapter 'warptiling_ncu'")
    monkeypatch.setattr(F, "results", missing)
    assert "No Nsight Compute counters" in str(F.smem_counters())


def test_notes_and_axis_titles_are_wrapped_to_fit_a_phone():
    # Plotly never wraps text: finish breaks the source note and the axis titles into lines
    # that fit a 358 px wide figure, and a figure's sources name each device's dates once
    import plotly.graph_objects as go

    from helpers.figures.results import join_sources

    note = join_sources(["recorded on NVIDIA H200, 2026-11-25", "recorded on NVIDIA H200, 2026-11-24",
                         "recorded on NVIDIA H200, 2026-11-25", "measured live on NVIDIA L4"])
    assert note == "recorded on NVIDIA H200, 2026-11-24 and 2026-11-25; measured live on NVIDIA L4"
    fig = style.finish(go.Figure(), "t", "TFLOP/s (bar label: % of cuBLAS, same run)", "y", note + "; " + note)
    lines = lambda text: text.replace("<b>", "").replace("</b>", "").split("<br>")  # noqa: E731
    assert len(lines(fig.layout.title.subtitle.text)) >= 2
    assert max(map(len, lines(fig.layout.title.subtitle.text))) <= style.NOTE_CHARS
    assert max(map(len, lines(fig.layout.xaxis.title.text))) <= style.AXIS_CHARS
    # a long title takes two lines, hung from the top of the figure so that neither leaves it
    fig = style.finish(go.Figure(), "The shape suite: final kernel and cuBLAS, same run", source=note)
    assert len(lines(fig.layout.title.text)) == 2 and max(map(len, lines(fig.layout.title.text))) <= style.TITLE_LINE
    assert (fig.layout.title.yref, fig.layout.title.y, fig.layout.title.yanchor) == ("container", 1, "top")


def test_waterfall_labels_add_up_after_rounding():
    # 8.86 -> 20.34 is +11.48, but the labels read 8.9 and 20.3: the change shown is theirs, +11.4
    from helpers.runtime.specs import get

    named = {k: row((4096,) * 3, tf, 51.0, get(k).defaults(), kernel=k)
             for k, tf in (("naive", 8.86), ("coalescing", 20.34))}
    assert F.waterfall_labels([8.86, 20.34]) == ["8.9", "20.3 (+11.4)"]
    assert [a.text for a in F.waterfall_figure(named, "src").layout.annotations] == ["8.9", "20.3 (+11.4)"]


def test_a_sliders_end_labels_stay_inside_the_figure():
    # the panel's sweep (configs_by_size) over more shapes than a menu holds: a slider whose rail
    # is inset so that each end label (centred on its end tick) stays inside the figure at any width
    from helpers.figures import results as R

    shapes = [(128, 8192, 8192), (512, 512, 512), (1000, 3000, 777), (2048,) * 3, (3000,) * 3, (4096,) * 3,
              (4097,) * 3, (8192,) * 3]
    fig = R.configs_by_size([row(s, 40.0, 50.0) for s in shapes], "src")
    slider = fig.layout.sliders[0]
    first, last = slider.steps[0].label, slider.steps[-1].label
    assert (first, last) == ("128x8192x8192", "n=8192")
    # the room left of the first tick (right of the last) holds half the label
    assert slider.pad.l + style.SLIDER_ROOM >= style.text_px(first) / 2 > 0.5 * len(first) * style.FONT / 2
    assert slider.pad.r + style.SLIDER_ROOM >= style.text_px(last) / 2
    assert slider.pad.l > slider.pad.r          # each side as wide as its own label needs


def test_config_cells_take_two_lines_at_most_in_a_smaller_font():
    # a config squeezed to its longest token takes a line per token: it breaks at one space
    # at most, the one nearest its middle, and the table's box scrolls sideways instead
    from helpers.tables import COMPACT_STYLE, Table, two_lines

    config = "64x256x16 w64x64 t8x16 s5 u2 k/3 g8 TN packA"
    assert two_lines(config) == ("<span style='white-space:nowrap'>64x256x16 w64x64 t8x16</span> "
                                 "<span style='white-space:nowrap'>s5 u2 k/3 g8 TN packA</span>")
    assert two_lines("2321820ce357-dirty") == "<span style='white-space:nowrap'>2321820ce357-dirty</span>"
    t = Table([{"shape": "n=4096", "config": config, "note": "a <b>"}])
    html = t._repr_html_()
    assert f"<td style='{COMPACT_STYLE}'>{two_lines(config)}</td>" in html
    assert "<td>n=4096</td>" in html and "<td>a &lt;b&gt;</td>" in html and "overflow-x:auto" in html
    assert "nowrap" not in Table(t.rows, compact=())._repr_html_()


def test_the_roofline_rows_are_the_dispatchers_choices_only():
    # a shape the run measured only with another config (the chapter's default at 1024) is left out
    want = final_spec.choose_config(4096, 4096, 4096, H200)
    other = dict(final_spec.choose_config(1024, 1024, 1024, H200), STAGES=2, KU=0)
    rs = rs_of([row((4096,) * 3, 47.0, 51.0, want), row((1024,) * 3, 11.0, 30.0, other)])
    assert [(r["M"], r["params"]) for r in F.chosen_rows(rs)] == [(4096, want)]


def test_waterfall_puts_a_long_gains_label_left_of_its_bar_where_it_fits_there():
    # near the axis's end a gain's label has no room on the right: it goes left of the bar, where
    # its row is empty, rather than over the bar; only where neither side has room does it sit
    # inside the bar's end
    from helpers.runtime.specs import get

    tflops = {"naive": 0.5, "coalescing": 6.5, "thread_tile_2d": 35.9, "bank_conflicts": 42.6, "warptiling": 49.0,
              "final": 52.5}
    named = {k: row((4096,) * 3, tf, 51.2, get(k).defaults(), kernel=k) for k, tf in tflops.items()}
    notes = {a.y: a for a in F.waterfall_figure(named, "src").layout.annotations}
    for k, start in (("bank_conflicts", 35.9), ("warptiling", 42.6), ("final", 49.0)):
        assert (notes[k].x, notes[k].xanchor) == (start, "right"), k
    top, sides = F.waterfall_layout(list(tflops), list(tflops.values()), F.waterfall_labels(list(tflops.values())))
    assert sides[:2] == ["right", "right"] and sides[3:] == ["left"] * 3
