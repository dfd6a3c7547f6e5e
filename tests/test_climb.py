"""The main line (helpers.measure.mainline), the autotuning search's local moves and comparison,
and the pictures of chapters 10, 11 and 13, on synthetic rows and on the specs (CPU only)."""
import pytest

from helpers import hardware
from helpers.figures import autotuning as fig_tune
from helpers.figures import leaderboard as L
from helpers.figures import results as result_figures
from helpers.figures import style
from helpers.figures import warptiling as fig_wt
from helpers.measure import autotune as tuning
from helpers.measure import bench, mainline
from helpers.measure.results import ResultSet
from helpers.runtime.rules import warp_layout
from helpers.runtime.specs import get

def board(tflops: dict, n=(4096, 8192)) -> list[dict]:
    """Leaderboard rows: every main-line entry and cp_async at each n, cuBLAS 50."""
    rows = []
    for size in n:
        rows.append({"kernel": "cublas", "M": size, "N": size, "K": size, "tflops": 50.0, "cublas_tflops": 50.0,
                     "ok": True, "status": "measured", "suite": "sizes", "params": {}})
        for name in mainline.entries():
            tf = tflops.get(name, 1.0)
            rows.append({"kernel": mainline.kernel_of(name), "entry": name, "M": size, "N": size, "K": size,
                         "tflops": tf, "cublas_tflops": 50.0, "ok": True, "status": "measured", "suite": "sizes",
                         "params": {}, "ms": 1.0, "ms_p20": 0.99, "ms_p80": 1.01})
    return rows


RISING = {name: 1.0 + 5 * i for i, name in enumerate(mainline.names())} | {"cp_async": 2.0}


def test_a_rising_main_line_has_no_falls_and_a_fall_is_named():
    rows = board(RISING)
    assert mainline.falls(rows, 4096) == [] and mainline.falls(rows, 8192) == []
    bad = board(dict(RISING, warptiling=RISING["double_buffering"] - 1))
    assert [(a, b) for a, b, _ in mainline.falls(bad, 4096)] == [("double_buffering", "warptiling")]


def test_only_a_step_whose_chapter_explains_it_may_be_level_with_the_one_before():
    db = RISING["double_buffering"]
    # the warp tile may be level with the two-stage kernel (its chapter says why), within 1%
    level = board(dict(RISING, warptiling=db * 0.995))
    assert mainline.falls(level, 4096) == []
    assert [(a, b) for a, b, _ in mainline.level(level, 4096)] == [("double_buffering", "warptiling")]
    text = L.climb_text(ResultSet("leaderboard", level, hardware.default(), "synthetic", False)).text
    assert "no step falls below the one before" in text and "warp tiling (-0.5%) within 1% of the step before" in text
    assert "only where its chapter says why (Warp tiling: " in text
    assert [b for _, b, _ in mainline.falls(board(dict(RISING, warptiling=db * 0.985)), 4096)] == ["warptiling"]
    # a step with no such reason must rise: 0.5% below is a fall
    flat = board(dict(RISING, final=RISING["warptiling_tuned"] * 0.995))
    assert [b for _, b, _ in mainline.falls(flat, 4096)] == ["final"]
    assert not mainline.step("final").tie and mainline.step("warptiling").tie


def test_the_variants_do_not_count_in_the_climb():
    rows = board(dict(RISING, cp_async=1000.0))
    assert mainline.falls(rows, 4096) == [] and "cp_async" not in dict(mainline.climb(rows, 4096))


def test_rows_recorded_before_entries_are_named_by_their_kernel():
    rows = [{"kernel": "warptiling", "M": 4096, "N": 4096, "K": 4096, "tflops": 1.0, "ok": True,
             "status": "measured", "suite": "sizes"}]
    assert bench.kernels_in(rows) == ["warptiling"] and bench.cell(rows, "warptiling", (4096,) * 3) is rows[0]


def test_the_tuned_step_runs_the_warp_tiling_kernel():
    assert mainline.kernel_of(mainline.TUNED) == "warptiling"
    assert [s.chapter for s in mainline.STEPS][-3:] == ["warptiling", "autotuning", "final"]
    assert bench.main_kernels().count("warptiling") == 1 and "warptiling_tuned" not in bench.main_kernels()


def test_the_climb_table_keeps_the_variants_apart_and_gains_on_the_main_line():
    rows = board(RISING)
    rs = ResultSet("leaderboard", rows, hardware.default(), "synthetic", False)
    table = L.climb_rows(rs)
    lines = [d["line"] for d in table]
    assert lines == ["main"] * len(mainline.STEPS) + ["variant"]
    first, second = table[0], table[1]
    assert first["gain at 4096"] == "" and second["gain at 4096"] == f"{100 * (6 / 1 - 1):+.1f}%"
    fig = L.climb_figure(rs)
    main_bars = [t for t in fig.data if t.type == "bar" and t.name == "main line" and t.visible]
    assert len(main_bars) == 1 and list(main_bars[0].x) == mainline.names()


def test_points_at_one_intensity_are_drawn_apart_and_keep_their_own():
    pts = [{"name": k, "kernel": k, "short": k, "intensity": 31.5, "tflops": tf} for k, tf in
           (("a", 40.0), ("b", 45.0), ("c", 50.0))] + [{"name": "d", "kernel": "d", "short": "d", "intensity": 2.0,
                                                       "tflops": 5.0}]
    out = L.spread(pts)
    xs = sorted(p["intensity"] for p in out[:3])
    assert len(set(xs)) == 3 and all(p["true_intensity"] == 31.5 for p in out[:3])
    assert out[3]["intensity"] == 2.0 and "note" not in out[3]
    assert out[0]["note"] == "drawn beside 2 others of this intensity" and out[0]["name"] == "a"   # legend: short
    pair = L.spread([{"name": k, "kernel": k, "short": k, "intensity": 31.5, "tflops": tf} for k, tf in
                     (("a", 40.0), ("b", 45.0))])
    assert pair[0]["note"] == "drawn beside 1 other of this intensity"
    # the hover gives the point's own intensity, not where it is drawn
    fig = result_figures.roofline(out, hardware.default(), "src")
    a = next(t for t in fig.data if t.name == "a")
    assert a.x[0] != 31.5 and "31.50 FLOP/byte" in a.hovertext and "drawn beside 2 others" in a.hovertext
    assert xs[0] < 31.5 < xs[2]


# ------------------------------------------------------------------ autotuning
def test_local_moves_change_one_parameter_or_a_pair_that_keeps_32_lanes():
    spec, device = get("warptiling"), hardware.default()
    pool = list(spec.space(device))
    d = spec.defaults()
    near = tuning.neighbours(spec, d, pool)
    assert near and d not in near
    for c in near:
        changed = {k for k in d if c[k] != d[k]}
        assert len(changed) == 1 or changed in tuning.PAIRED
        assert (c["WM"] // c["TM"]) * (c["WN"] // c["TN"]) == 32
    assert any(c["BN"] == 256 and c["BM"] == 128 for c in near)      # the wider block tile is one move away


def row(params, tf, status="timed", **kw):
    spec = get("warptiling")
    p = spec.resolve(params)
    return dict({"kernel": "warptiling", "params": p, "M": 4096, "N": 4096, "K": 4096, "tflops": tf, "ms": 1.0,
                 "ms_p20": 0.99, "ms_p80": 1.01, "cublas_tflops": 50.0, "ok": True, "status": status,
                 "default": p == spec.defaults(), "threads": 128, "registers": 200, "active_warps": 8}, **kw)


def test_the_comparison_uses_the_side_by_side_rows():
    rows = [row({}, 44.0, phase="sample"), row(dict(BN=256), 47.0, phase="local"),
            row({}, 45.0, "compared", compare="default"), row(dict(BN=256), 48.6, "compared", compare="tuned")]
    default, tuned = fig_tune.comparison_rows(rows)
    assert (default["tflops"], tuned["tflops"]) == (45.0, 48.6)
    assert "**8.0% faster than** the default" in str(fig_tune.comparison_text(rows))
    assert "back to back" in str(fig_tune.comparison_table(rows))
    assert tuning.tuned_row(rows) is rows[-1] and tuning.best_row(rows) is rows[1]   # compared rows are apart
    assert "the best came from the local phase" in str(fig_tune.phase_text(rows))


def test_the_parallel_coordinates_have_a_titled_colour_bar_and_few_axes():
    rows = [row(dict(BN=bn, BK=bk), 40.0 + bn / 64 + bk) for bn in (64, 128, 256) for bk in (8, 16)]
    f = fig_tune.parallel_figure(rows, "synthetic")
    line = f.data[0].line
    assert line.showscale and "TFLOP/s" in line.colorbar.title.text
    assert [d.label for d in f.data[0].dimensions] == ["BN", "BK", "TFLOP/s"]


def test_a_search_of_another_kernel_says_so():
    rows = [dict(row({}, 44.0), kernel="final")]
    assert "recorded on the `final` kernel" in str(fig_tune.awaiting_text(rows))
    assert fig_tune.awaiting_text([row({}, 44.0)]) is None


# ------------------------------------------------------------------ the warp-tile picture
def test_the_hierarchy_picture_draws_every_lane_of_warp_0_at_every_step():
    f = fig_wt.hierarchy_figure()
    steps = f.layout.sliders[0].steps
    assert len(steps) == len(fig_wt.HIERARCHY)
    numbered = 0
    for step, p in zip(steps, fig_wt.HIERARCHY):
        shown = [t for t, v in zip(f.data, step.args[0]["visible"]) if v]
        lanes = [t for t in shown if t.hovertext and str(t.hovertext).startswith("lane ")]
        g = warp_layout(get("warptiling").resolve(p))
        assert len(lanes) == 32
        numbers = [t for t in shown if t.mode == "text" and t.text and t.text[0] == "0"]
        if numbers:                                 # the lane grid's corners numbered, no more
            assert sorted(map(int, numbers[0].text)) == sorted({0, g["lanes_n"] - 1, 32 - g["lanes_n"], 31})
            numbered += 1
        # each lane: WMITER x WNITER pieces of 4 x 4, each a closed path of 5 points and a gap
        assert all(len(t.x) == 6 * g["wmiter"] * g["wniter"] for t in lanes)
        cells = {(x, y) for t in lanes for x, y in zip(t.x, t.y) if x is not None}
        assert max(x for x, _ in cells) <= p["WN"] and max(y for _, y in cells) <= p["WM"]
        assert step.label.startswith(f"{p['BM']}x{p['BN']} w{p['WM']}x{p['WN']} t{p['TM']}x{p['TN']}")
    assert len({fig_wt.lane_colour(i) for i in range(32)}) == 32
    assert numbered


def test_chapter_10_explains_a_level_step_with_its_reads_and_its_warps():
    prev = ({"kernel": "double_buffering", "params": {"BK": 8, "FIXED": 1, "FAST_PATH": 1}, "tflops": 48.4}, "")
    level = ({"kernel": "warptiling", "params": get("warptiling").defaults(), "tflops": 48.6}, "")
    text = fig_wt.level_text(prev, level, hardware.default()).text
    assert "feeds 21 FFMA instead of 16" in text and "holds 8 warps instead of 16" in text
    assert fig_wt.level_text(prev, (dict(level[0], tflops=50.0), ""), hardware.default()).text == ""


def test_a_quick_live_run_without_the_big_sizes_says_so_instead_of_failing():
    from helpers.figures import banks as fig_banks, pipeline as fig_pipe
    rs = ResultSet("leaderboard", board(RISING, n=(1024,)), hardware.default(), "synthetic", True)
    assert L.climb_text(rs).text.count("this run has no measurement at n =") == 2
    assert fig_pipe.main_line_params(rs, 4096)["FAST_PATH"] == 1
    assert "no timing of both layouts" in fig_banks.store_fix_line(rs).text


def test_a_kernel_run_at_neither_size_is_left_out_and_named():
    # the naive kernel is not run where one launch would take too long: no empty place for it
    names = mainline.names()
    rows = [dict(r, status="skipped", tflops=None) if r.get("entry") == names[0] else r for r in board(RISING)]
    fig = L.climb_figure(ResultSet("leaderboard", rows, hardware.default(), "synthetic", False))
    main = next(t for t in fig.data if t.type == "bar" and t.name == "main line" and t.visible)
    assert list(main.x) == names[1:]
    assert f"not run at these sizes: {names[0]}" in style.plain(fig.layout.title.subtitle.text).replace("\n", " ")


def test_a_value_just_under_cublas_sits_inside_its_bar_clear_of_cublas_line():
    # cuBLAS at 50: a bar at 48 would carry its label across the dashed line; 20 and 55 keep theirs above
    names = mainline.names()
    rows = board(dict(RISING, **{names[-1]: 55.0, names[-2]: 48.0, names[-3]: 20.0}))
    fig = L.climb_figure(ResultSet("leaderboard", rows, hardware.default(), "synthetic", False))
    main = next(t for t in fig.data if t.type == "bar" and t.name == "main line" and t.visible)
    where = dict(zip(main.x, main.textposition))
    assert (where[names[-1]], where[names[-2]], where[names[-3]]) == ("outside", "inside", "outside")
    assert main.insidetextanchor == "end"
    # upright inside as above: on a phone's narrow bars Plotly would otherwise turn it on its side
    assert all(t.textangle == 0 and t.constraintext == "none" for t in fig.data if t.type == "bar")
