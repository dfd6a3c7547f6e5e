"""Layout rules that keep a figure readable on a 390 px phone (a 358 px wide figure): bar labels
never cut, long legend entries and x titles broken into lines, a slider clear of the x title."""
import math

import plotly.graph_objects as go
import pytest

from helpers.figures import autotuning as T
from helpers.figures import coalescing as C
from helpers.figures import results as R
from helpers.figures import style
from helpers.hardware import Device

H200 = Device.from_datasheet("NVIDIA H200")


def row(kernel, params, tflops, n=4096, cublas=51.0):
    ms = 2 * n**3 / tflops / 1e9
    return {"kernel": kernel, "params": params, "M": n, "N": n, "K": n, "tflops": tflops, "cublas_tflops": cublas,
            "ms": ms, "ms_p20": 0.99 * ms, "ms_p80": 1.01 * ms, "ok": True, "rel_err": 0.0}


def lines(text):
    return style.plain(text.replace("<br>", "\n")).split("\n")


def fits_after_bars(fig, trace, left_px):
    """Each of the trace's labels, written after its bar, ends inside the figure on a phone."""
    plot = style.PHONE_PX - 20 - left_px
    top = fig.layout.xaxis.range[1]
    return all(x / top * plot + style.text_px(t) <= plot for x, t in zip(trace.x, trace.text))


def test_step_bars_label_short_bars_outside_never_clipped():
    # a bar at 1% of cuBLAS is a few pixels long: its label goes after it, in dark ink, uncut
    fig = R.compare_steps({"Naive 32x32": row("naive", {"BX": 32, "BY": 32}, 0.5),
                           "Coalesced": row("coalescing", {"BX": 64, "BY": 4, "SWAP": 1}, 6.5)}, "src", "t")
    bars = fig.data[0]
    assert (bars.textposition, bars.cliponaxis, bars.textangle) == ("auto", False, 0)
    assert bars.outsidetextfont.color == "#222"
    assert list(bars.insidetextfont.color) == [style.ink(style.colour("naive")), style.ink(style.colour("coalescing"))]
    assert list(bars.text) == ["<b>0.5</b> (1%)", "<b>6.5</b> (13%)"]


def test_step_names_sit_above_their_bars_not_on_them():
    # a name drawn on a dark bar cannot be read: each sits on its bar's top edge, in the gap
    fig = R.compare_steps({"08 conflict-free": row("bank_conflicts", {}, 42.6),
                           "09 double-buffered": row("double_buffering", {}, 48.5)}, "src", "t")
    names = [a for a in fig.layout.annotations if a.text in ("08 conflict-free", "09 double-buffered")]
    assert [a.y for a in names] == [i - fig.data[0].width / 2 for i in range(2)]
    assert all(a.yanchor == "bottom" and a.yshift >= 0 for a in names) and fig.layout.yaxis.autorange == "reversed"


def test_block_shape_and_ceiling_labels_fit_after_their_bars_on_a_phone():
    rows = [row("naive", {"BX": bx, "BY": by}, t) for bx, by, t in ((4, 64, 3.31), (8, 8, 1.85), (32, 32, 0.5))]
    rows += [row("naive", {"BX": bx, "BY": by}, t, n=1024) for bx, by, t in ((4, 64, 3.0), (8, 8, 1.6))]
    fig = C.shapes_figure(rows, "src", "Naive by block shape")
    bars = fig.data[-1]                                               # n = 4096, the one shown
    assert list(bars.text) == ["3.31 (6.5%)", "1.85 (3.6%)", "0.50 (1.0%)"]
    assert (bars.textposition, bars.cliponaxis) == ("outside", False)
    assert fits_after_bars(fig, bars, style.text_px("32x32") + 30)
    assert style.plain(fig.layout.xaxis.title.text) == "TFLOP/s (% of cuBLAS)"

    rows = [row("coalescing", {"BX": bx, "BY": by, "SWAP": 1}, t) for bx, by, t in ((8, 8, 3.3), (64, 4, 6.45))]
    fig = C.ceiling_figure(rows, H200, "src", "coalescing", order=C.wide_key)
    ceiling, measured = fig.data
    # the label goes after the ceiling's (longer) bar, not over it; the measured bar has none
    assert list(ceiling.text) == [f"3.30 ({100 * 3.3 / ceiling.x[0]:.0f}%)", f"6.45 ({100 * 6.45 / ceiling.x[1]:.0f}%)"]
    assert (ceiling.textposition, ceiling.cliponaxis) == ("outside", False) and measured.text is None
    assert fits_after_bars(fig, ceiling, max(style.text_px(y) for y in ceiling.y))
    assert max(len(s) for t in fig.data for s in lines(t.name)) <= style.LEGEND_CHARS


def test_long_legend_entries_are_wrapped_short_ones_kept():
    long = "Double buffering (2 shared stages, register prefetch) BK=8, fast path"
    fig = go.Figure([go.Scatter(x=[1], y=[1], name=long), go.Scatter(x=[1], y=[2], name="cuBLAS (cupy.matmul)"),
                     go.Scatter(x=[1], y=[3], name=long + " hidden", showlegend=False)])
    style.finish(fig, "t", "n", "TFLOP/s")
    assert lines(fig.data[0].name) == ["Double buffering (2 shared stages,", "register prefetch) BK=8, fast path"]
    assert fig.data[1].name == "cuBLAS (cupy.matmul)" and "<br>" not in fig.data[2].name


def test_x_title_is_narrowed_by_long_bar_labels():
    # centred on a plot that the category labels on its left leave narrow, it would leave the figure
    labels = ["09 two stages, 8x8 split", "10 warp tiles, 8x8 per thread"]
    fig = style.finish(go.Figure(go.Bar(y=labels, x=[1, 2], orientation="h")), "t", "wavefronts per 1000 FFMA")
    plot = style.PHONE_PX - 20 - max(style.text_px(s) for s in labels)
    title_px = max(style.text_px(s, round(1.2 * style.FONT)) for s in lines(fig.layout.xaxis.title.text))
    assert len(lines(fig.layout.xaxis.title.text)) == 2 and title_px <= plot + 20
    # without such labels the x title keeps its usual width
    fig = style.finish(go.Figure(go.Bar(x=[1, 2], y=[1, 2])), "t", "wavefronts per 1000 FFMA")
    assert fig.layout.xaxis.title.text == "wavefronts per 1000 FFMA"


@pytest.mark.parametrize("xtitle, pad", [("TFLOP/s", style.SLIDER_TOP),
                                         ("arithmetic intensity, FLOP/byte (model)", style.SLIDER_TOP + 20)])
def test_slider_hangs_below_an_x_title_of_two_lines(xtitle, pad):
    steps = [(f"config {i}", [go.Scatter(x=[i], y=[i])]) for i in range(style.MENU_MAX + 2)]
    fig = style.finish(style.steps_figure(steps), "t", xtitle)
    assert fig.layout.sliders[0].pad.t == pad


def test_parallel_coordinates_fit_a_phone():
    good = [{"kernel": "final", "params": {"BM": bm, "BN": 128}, "M": 4096, "N": 4096, "K": 4096, "tflops": tf,
             "cublas_tflops": 51.0, "ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0, "ok": True, "rel_err": 0.0,
             "status": "timed", "registers": regs, "active_warps": w}
            for bm, tf, regs, w in ((64, 25.603, 80, 4), (128, 49.598, 254, 22), (64, 40.1, 128, 8))]
    par = T.parallel_figure(good, "src").data[0]
    assert par.labelangle == -90                                       # upright: clear of the next axis's name
    assert [d.label for d in par.dimensions] == ["BM", "TFLOP/s"]      # the parameters that vary, then speed
    tf = par.dimensions[-1]
    assert tf.tickformat == ".1f" and list(tf.tickvals) == [25.603, 30, 40, 49.598]
    assert par.line.showscale and par.line.colorbar.title.text.startswith("TFLOP/s")   # a colour scale, named


def test_long_funnel_step_names_are_wrapped_and_left_aligned():
    name = "with SPLITK=1 GROUP=8 STREAMK=0 A_T=0 B_T=0 fixed"
    fig = T.funnel_figure([("all", 1000), (name, 100), ("timed", 10)], "src")
    a = fig.layout.annotations[1]
    assert lines(a.text) == ["with SPLITK=1 GROUP=8 STREAMK=0 A_T=0 B_T=0", "fixed"] and a.align == "left"
    assert fig.layout.height == 180 + 62 * 3 + 16 + style.MODEBAR_PX          # finish adds the mode bar's strip


def test_occupancy_bar_text_is_level_and_centred(nvrtc):
    from helpers.figures import occupancy as O

    fig = O.by_config("smem_tiling", [row("smem_tiling", {"TILE": 8, "SWAP": 1}, 5.1)], H200, "src", "TILE")
    bars = fig.data[0]
    assert (bars.textangle, bars.insidetextanchor) == (0, "middle") and bars.text[0].endswith("<br>warps")


def test_stall_values_fit_after_their_bars_beside_two_line_reasons():
    from helpers.figures import occupancy as O

    stalls = [{"kernel": "smem_tiling", "label": "TILE=32", "issue_active": 40.0, "mio_throttle": 19.27,
               "dispatch_stall": 0.4, "barrier": 3.0},
              {"kernel": "coalescing", "label": "64x4", "issue_active": 40.0, "mio_throttle": 0.04,
               "dispatch_stall": 4.45, "barrier": 0.0}]
    fig = O.stall_profile(stalls, ["coalescing", "smem_tiling"], "src")
    left = max(style.text_px(line) for y in fig.data[0].y for line in y.split("<br>"))   # the longest line
    assert all(fits_after_bars(fig, t, left) for t in fig.data)
    # the x title, centred on what the reasons leave of the width, is broken to fit it
    title_px = max(style.text_px(s, round(1.2 * style.FONT)) for s in lines(fig.layout.xaxis.title.text))
    assert title_px <= style.PHONE_PX - 20 - left + 20


def test_each_shape_of_a_sweep_sets_a_height_that_fits_its_own_bars():
    # a shape with one config of eight: the menu makes the figure short, not a tall one with one bar at the top
    rows = [row("coalescing", {"BX": 32, "BY": by, "SWAP": 1}, 6.0 - by / 10, n=1024) for by in range(1, 9)]
    rows += [row("coalescing", {"BX": 32, "BY": 4, "SWAP": 1}, 5.0, n=256)]
    rows += [row("coalescing", {"BX": 32, "BY": by, "SWAP": 1}, 6.0, n=4096) for by in (1, 2, 4, 8, 16)]
    fig = R.configs_by_size(rows, "src")
    layouts = [b.args[1] for b in fig.layout.updatemenus[0].buttons]          # n = 256, 1024, 4096
    assert [lay["height"] for lay in layouts] == [R.sweep_height(k) + style.MODEBAR_PX for k in (1, 8, 5)]
    assert [lay["yaxis.range"] for lay in layouts] == [[3.6, -0.6], [7.6, -0.6], [4.6, -0.6]]
    # a row (so a bar) is as tall in every shape: the height grows by SWEEP_ROW_PX a row the axis shows
    assert all(lay["height"] - style.MODEBAR_PX - 260 == R.SWEEP_ROW_PX * (lay["yaxis.range"][0] + 0.4)
               for lay in layouts)
    # it opens on the fullest shape with that shape's own height and range
    assert fig.layout.height == layouts[1]["height"] and list(fig.layout.yaxis.range) == layouts[1]["yaxis.range"]


def test_the_figure_div_follows_the_height_a_menu_sets():
    # Plotly's HTML fixes the div's height: it follows each redraw, so a shorter step leaves no gap under it
    fig = style.finish(go.Figure(go.Bar(x=[1], y=[1])), "t")
    page = style.book_html(fig, style.CONFIG)
    div_id = page.split('id="', 1)[1].split('"', 1)[0]
    assert style.FIT_DIV.replace("{plot_id}", div_id) in page and "plotly_afterplot" in style.FIT_DIV
    assert page.index("newPlot") < page.index("plotly_afterplot")


def test_the_title_starts_under_the_mode_bar():
    # the mode bar (on hover, or a tap on a phone) takes the top MODEBAR_PX: the title hangs below it
    # (its first line's top is about 14 px above its baseline, which pad.t sets), the plot keeps its height
    assert style.CONFIG["displayModeBar"] == "hover"
    fig = style.finish(style.steps_figure([("a", [go.Bar(x=[1], y=[1])]), ("b", [go.Bar(x=[2], y=[1])])]),
                       "A title", "x", "y", height=400)
    assert fig.layout.title.pad.t - 14 >= style.MODEBAR_PX
    assert fig.layout.height == 400 + style.MODEBAR_PX and fig.layout.margin.t == 90 + style.MODEBAR_PX + 40


def test_wavefront_bars_are_tall_enough_for_their_labels():
    from helpers.figures import banks as B
    from helpers.models import banks

    fig = B.model_figure()
    bars = len(banks.ACCESSES) * len(set(fig.data[0].y))
    assert all(t.textfont.size == style.FONT - 1 for t in fig.data)
    # a label's box is about 1.15 x its font; a bar at least that and 2 px more
    assert B.MODEL_BAR_PX >= 1.15 * (style.FONT - 1) + 2
    plot = fig.layout.height - style.MODEBAR_PX - 280                # what the plot gets on a phone (a little under)
    assert fig.layout.bargap == B.MODEL_BARGAP and plot * (1 - B.MODEL_BARGAP) / bars >= B.MODEL_BAR_PX - 0.5


def test_the_prologue_label_stays_clear_of_iteration_0_on_a_phone():
    from helpers.figures import pipeline as P

    tiles = 8
    fig = P.pipeline_diagram(tiles=tiles)
    x = fig.layout.xaxis
    assert list(x.tickvals) == [i + 0.5 for i in range(-1, tiles)] and x.tickangle == 0
    assert list(x.ticktext[:2]) == ["pro-<br>logue", "0"] and list(x.range) == [-1, tiles]
    # one iteration's width on a phone, beside the "stage 0" labels, holds half of each label and a gap
    step = (style.PHONE_PX - 20 - style.text_px("stage 0")) / (tiles + 1)
    assert style.text_px("logue") / 2 + style.text_px("0") / 2 + 4 <= step
    assert list(x.minor.tickvals) == list(range(-1, tiles + 1)) and x.minor.showgrid and not x.showgrid
    # an FFMA bar (and a copy's in the prologue) is one iteration wide: its label, upright on two
    # small lines, fits there (on one line Plotly shrank it to a few pixels or turned it on its side)
    for word in ("FFMA", "copy"):
        bars = [t for t in fig.data if t.text.startswith(word)]
        assert bars and all(t.textangle == 0 and t.text.split("<br>")[0] == word for t in bars)
        size = bars[0].insidetextfont.size
        assert style.text_px(word, size) + 6 <= step < style.text_px(f"{word} 7")


def test_pipeline_bars_write_in_ink_that_reads_on_the_colour_drawn():
    # a copy's bar is its colour at a low opacity, pale whatever the colour: dark ink on it
    from helpers.figures import pipeline as P

    fig = P.pipeline_diagram(stages=(3,), tiles=6)
    for t in fig.data:
        if t.text and t.text.startswith("copy"):
            assert t.marker.opacity < 0.5 and t.insidetextfont.color == "#222222"
        elif t.text and t.text.startswith("FFMA"):
            assert t.insidetextfont.color == style.ink(t.marker.color)


def test_a_bar_value_goes_inside_its_bar_only_where_the_cublas_tick_would_cover_it():
    fill = "#1f77b4"                                      # a dark blue: white ink inside it
    assert R.value_label(50.0, 51.0, 60.0, fill) == dict(x=50.0, text="50.0  ", position="middle left",
                                                         ink="#ffffff")      # the tick just past the bar's end
    assert R.value_label(9.0, 51.0, 60.0, fill)["x"] == 9.0              # far from it: just past the bar
    assert R.value_label(52.0, 51.0, 60.0, fill)["position"] == "middle right"   # the tick inside the bar
    short = R.value_label(3.0, 5.0, 60.0, fill)                           # too short to hold it: past the tick
    assert (short["x"], short["position"]) == (5.0, "middle right")
    rows = [row("coalescing", {"BX": 32, "BY": by, "SWAP": 1}, t, n=1024) for by, t in ((1, 5.0), (2, 50.0))]
    fig = R.configs_by_size(rows, "src")
    values = next(t for t in fig.data if t.name == "values")
    top = fig.layout.xaxis.range[1]
    expected = [R.value_label(r["tflops"], r["cublas_tflops"], top, style.colour(r["kernel"]))
                for r in sorted(rows, key=lambda r: -r["tflops"])]
    assert list(values.x) == [v["x"] for v in expected] and list(values.textposition) == [v["position"] for v in expected]


def test_the_top_margin_holds_the_longest_title_any_step_sets_with_its_subtitle():
    # the title hangs from the figure's top with Plotly's automargin off (it moved titles of several
    # lines with a subtitle above the figure in the built book): the margin itself must fit them
    short = "one line"
    long = "a title long enough to take three lines of a phone's width, and then some more words to wrap"
    steps = [("a", [go.Bar(x=[1], y=[1])], short), ("b", [go.Bar(x=[2], y=[1])], long)]
    fig = style.finish(style.steps_figure(steps, active=0), short, source="recorded on a GPU, with a long note "
                       "that takes two lines")
    assert fig.layout.title.automargin is False
    tallest = style.wrap(long, style.TITLE_LINE)
    assert tallest.count("<br>") >= 2
    assert fig.layout.margin.t == style.title_margin(tallest, fig.layout.title.subtitle.text) + 40
    assert style.title_margin(tallest, "x") > style.title_margin(short, "x") == style.TITLE_MARGIN
    # the figure grows by what the title takes beyond a short one's margin: the plot keeps its room
    extra = fig.layout.margin.t - 40 - style.TITLE_MARGIN
    assert extra > 0 and fig.layout.height == 460 + style.MODEBAR_PX + extra


def test_bar_labels_fit_inside_their_bar_or_after_it_on_a_phone():
    xs, labels = [53.0, 51.0, 127.0, 357.0], ["53 TFLOP/s<br>error 2e-06", "51 TFLOP/s<br>error 5e-06",
                                             "127 TFLOP/s<br>error 2e-04", "357 TFLOP/s<br>error 3e-04"]
    left = 150
    top = style.inside_or_after(xs, labels, left)
    plot = style.PHONE_PX - 20 - left
    for x, t in zip(xs, labels):
        w = max(style.text_px(line) for line in t.split("<br>")) + 12
        assert x / top * plot >= w or x / top * plot + w <= plot, (x, t, top)
    assert top < 2 * max(xs)                    # the bars keep most of the width


def test_a_step_that_sets_a_height_keeps_the_figure_sizing_to_its_div():
    # Plotly fixes a figure's width when a relayout sets its height: the page, narrowed after the
    # menu was used, would cut the figure; with autosize in the same step it follows its div
    rows = [row("coalescing", {"BX": 32, "BY": by, "SWAP": 1}, 6.0 - by / 10, n=1024) for by in range(1, 9)]
    rows += [row("coalescing", {"BX": 32, "BY": 4, "SWAP": 1}, 5.0, n=256)]
    fig = R.configs_by_size(rows, "src")
    layouts = [b.args[1] for b in fig.layout.updatemenus[0].buttons]
    assert all("height" in lay and lay["autosize"] is True for lay in layouts)


def test_a_roofline_label_goes_below_a_point_near_its_roof():
    from helpers.hardware import Device
    h200 = Device.from_datasheet("NVIDIA H200")
    points = [{"name": "near", "kernel": "naive", "short": "near", "intensity": 500.0, "tflops": 50.0},
              {"name": "far", "kernel": "coalescing", "short": "far", "intensity": 500.0, "tflops": 5.0}]
    fig = R.roofline(points, h200, "src")
    where = {t.name: t.textposition for t in fig.data if t.name in ("near", "far")}
    assert where == {"near": "bottom center", "far": "top center"}


@pytest.mark.parametrize("ticks", [[64, 256, 1024, 2048, 4096, 8192, 16384, 32768], [1, 64, 65, 256, 300, 777, 1024],
                                   [1024, 2048, 4096, 4097, 8192]])
def test_dense_exact_ticks_keep_their_labels_apart(ticks):
    # a label per tick on a phone-wide axis: Plotly tilts them and drops the last one
    labels = style.spaced_labels(ticks)
    shown = [math.log10(t) for t, s in zip(ticks, labels) if s]
    assert labels[0] == style.tick_text(ticks[0]) and labels[-1] == style.tick_text(ticks[-1])
    gap = (math.log10(ticks[-1]) - math.log10(ticks[0])) * style.LABEL_SHARE
    assert all(b - a >= gap - 1e-12 for a, b in zip(shown, shown[1:]))
    assert "" in labels


def test_a_covering_log_axis_labels_a_tick_beyond_each_end_of_the_points():
    # chapter 2: the naive kernel at n = 256 (0.3 TFLOP/s) lay below the lowest label, 0.5
    fig = style.log_axis(go.Figure(), "y", [0.31, 0.9, 48.0, 52.3], cover=True)
    ticks, (lo, hi) = list(fig.layout.yaxis.tickvals), fig.layout.yaxis.range
    assert ticks[0] == 0.2 and ticks[-1] == 100
    assert lo < math.log10(0.2) and hi > math.log10(100)
    fig = style.log_axis(go.Figure(), "y", [0.5, 50], cover=True)         # ends on ticks: no extra ones
    assert list(fig.layout.yaxis.tickvals) == [0.5, 1, 2, 5, 10, 20, 50]


def test_sparse_exact_ticks_are_all_labelled():
    assert style.spaced_labels([1024, 2048, 4096, 8192]) == ["1024", "2048", "4096", "8192"]
    fig = style.log_axis(go.Figure(), "x", [64, 256, 1024, 2048, 4096, 8192, 16384, 32768], exact=True)
    assert list(fig.layout.xaxis.tickvals) == [64, 256, 1024, 2048, 4096, 8192, 16384, 32768]
    assert fig.layout.xaxis.ticktext[-1] == "32768"


@pytest.mark.parametrize("recorded_figure", [True, False])
def test_a_recorded_panel_shows_its_figure_unless_the_page_has_it(monkeypatch, recorded_figure):
    # without a GPU the panel stands in with the recorded sweep; where the page shows that sweep
    # already, a second copy of it would only repeat it
    import IPython.display

    from helpers import hardware
    from helpers.figures import widgets

    monkeypatch.setattr(hardware, "is_live", lambda: False)
    shown, said = [], []
    monkeypatch.setattr(style, "show", shown.append)
    monkeypatch.setattr(IPython.display, "display", said.append)
    out = widgets.panel("warptiling", recorded_figure=recorded_figure)
    assert len(shown) == (1 if recorded_figure else 0) and len(said) == 1
    assert ("earlier on this page" in str(said[0])) != recorded_figure
    assert "<details" in out.data
