"""The pictures of chapters 2 to 5 (helpers.figures.pictures): what each step of a slider or menu
draws, checked against the kernels' index math and the device model."""
import math
import re

import pytest

from helpers.figures import pictures
from helpers.hardware import Device
from helpers.runtime.specs import get

H200 = Device.from_datasheet("NVIDIA H200")


def test_memory_levels_come_from_the_device_model():
    levels = {lv["level"]: lv for lv in pictures.hierarchy_levels(H200, 139.8)}
    assert levels["registers"]["per_sm"] == 65536 * 4 and levels["registers"]["bytes"] == 65536 * 4 * 132
    assert levels["shared memory / L1"]["per_sm"] == 256 * 1024 == H200.l1_smem_per_sm
    assert levels["L2 cache"]["bytes"] == 60 * 2**20 and levels["L2 cache"]["bandwidth"] is None
    assert levels["device memory (HBM)"]["bandwidth"] == 4800e9
    # shared memory: 32 banks x 4 bytes per clock per SM
    assert levels["shared memory / L1"]["bandwidth"] == pytest.approx(128 * 132 * 1980e6)
    sizes = [lv["bytes"] for lv in pictures.hierarchy_levels(H200, 139.8)]
    assert sizes[2] < sizes[3] and levels["registers"]["bandwidth"] > levels["shared memory / L1"]["bandwidth"]


def test_memory_figure_has_a_menu_of_sizes_and_bandwidths():
    fig = pictures.memory_hierarchy(H200, 139.8, "recorded on NVIDIA H200")
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["how much it holds", "how fast it is read"]
    sizes, speeds = fig.data
    assert list(sizes.y) == ["registers", "shared memory / L1", "L2 cache", "device memory (HBM)"]
    assert list(speeds.y) == ["registers", "shared memory / L1", "device memory (HBM)"]   # L2: not in the model
    assert "4.8 TB/s" in speeds.text[-1] and "60 MB" in sizes.text[2]
    note = fig.layout.title.subtitle.text.replace("<br>", " ")
    assert "L2 cache: bandwidth not in the device model, no bar in how fast it is read" in note
    # each view labels its log axis in units, ticks inside its range
    for button, unit in zip(menu.buttons, (r"\d+ [KMGT]B", r"\d+ [GTP]B/s")):
        lay = button.args[1]
        lo, hi = lay["xaxis.range"]
        ticks = lay["xaxis.tickvals"]
        assert len(ticks) >= 3 and all(lo <= math.log10(t) <= hi for t in ticks)
        assert all(re.fullmatch(unit, text) for text in lay["xaxis.ticktext"])
    assert list(fig.layout.xaxis.ticktext) == menu.buttons[0].args[1]["xaxis.ticktext"]


def test_memory_figure_without_a_memory_size_draws_three_sizes():
    fig = pictures.memory_hierarchy(H200)
    assert len(fig.data[0].y) == 3


@pytest.mark.parametrize("tile, steps", [(8, 12), (16, 6), (32, 3)])
def test_block_tile_slider_walks_k_in_steps_of_tile(tile, steps):
    fig = pictures.block_tile(K=96)
    menu = fig.layout.updatemenus[0]
    button = next(b for b in menu.buttons if b.label == f"TILE = {tile}")
    slider = button.args[1]["sliders"][0]
    assert len(slider["steps"]) == steps
    # each k-step shows one group of traces: the tile of A moves right by TILE, the tile of B down
    firsts = []
    for s in slider["steps"]:
        shown = [t for t, v in zip(fig.data, s["args"][0]["visible"]) if v]
        a_tile = next(t for t in shown if t.name and t.name.startswith("As:"))
        b_tile = next(t for t in shown if t.name and t.name.startswith("Bs:"))
        xs = [x for x in a_tile.x if x is not None]
        ys = [y for y in b_tile.y if y is not None]
        assert max(xs) - min(xs) == tile and max(ys) - min(ys) == tile
        firsts.append((min(xs), min(ys)))
    assert [a for a, _ in firsts] == [i * tile for i in range(steps)]
    assert [b for _, b in firsts] == [i * tile for i in range(steps)]


def test_block_tile_opens_at_the_kernel_default():
    fig = pictures.block_tile()
    default = get("smem_tiling").defaults()["TILE"]
    assert fig.layout.updatemenus[0].buttons[fig.layout.updatemenus[0].active].label == f"TILE = {default}"
    assert sum(t.visible for t in fig.data) == len(pictures.block_tile_step(default, 0))


def test_block_tile_names_its_matrices_off_their_grids():
    # a name drawn inside a matrix is crossed by the grid lines of its tiles
    M, N, K, gap = 64, 64, 96, 8
    fig = pictures.block_tile(M=M, N=N, K=K, gap=gap)
    at = pictures.block_tile_layout(32, M, N, K, gap)
    boxes = {"A": (*at["A"], K, M), "B": (*at["B"], N, K), "C": (*at["C"], N, M)}
    names = {a.text: a for a in fig.layout.annotations if a.text in ("<b>A</b>", "<b>B</b>", "<b>C</b>")}
    assert len(names) == 3
    xr, yr = fig.layout.xaxis.range, sorted(fig.layout.yaxis.range)
    for name, (x0, y0, w, h) in boxes.items():
        a = names[f"<b>{name}</b>"]
        # its anchor outside every matrix, the text on the side away from it, and inside the plot
        assert all(not (bx <= a.x <= bx + bw and by <= a.y <= by + bh) for bx, by, bw, bh in boxes.values())
        assert xr[0] <= a.x <= xr[1] and yr[0] <= a.y <= yr[1]
        away = {"A": a.yanchor == "bottom" and a.y < y0, "B": a.xanchor == "right" and a.x < x0,
                "C": a.xanchor == "left" and a.x > x0 + w}
        assert away[name], name


def cells(trace):
    """The rectangles of a boxes trace, as (x0, y0, x1, y1)."""
    xs, ys, out = list(trace.x), list(trace.y), []
    for i in range(0, len(xs), 6):
        out.append((min(xs[i:i + 5]), min(ys[i:i + 5]), max(xs[i:i + 5]), max(ys[i:i + 5])))
    return out


@pytest.mark.parametrize("params", [{"BM": 64, "BN": 64, "BK": 8, "TM": 8}, {"BM": 128, "BN": 64, "BK": 16, "TM": 16},
                                    {"BM": 32, "BN": 16, "BK": 4, "TM": 4}])
def test_thread_tiles_draw_tm_results_per_thread_and_a_warp(params):
    traces = pictures.thread_tile_traces(params, gap=4)
    by = {t.name: t for t in traces if t.name}
    (thread0,) = cells(by[f"thread 0: {params['TM']} results of column 0"])
    assert thread0[3] - thread0[1] == params["TM"] and thread0[2] - thread0[0] == 1
    warp = cells(by["warp 0: threads 1 to 31"])
    assert len(warp) == 31 and all(c[3] - c[1] == params["TM"] for c in warp)
    # the kernel's mapping: thread t owns column t % BN and rows (t // BN) * TM ...
    origin_x, origin_y = params["BK"] + 4, params["BK"] + 4
    for t, c in enumerate(warp, start=1):
        assert (c[0] - origin_x, c[1] - origin_y) == (t % params["BN"], (t // params["BN"]) * params["TM"])


def test_thread_tiles_slider_covers_the_sweep_and_opens_at_the_default():
    fig = pictures.thread_tiles()
    configs = pictures.thread_tile_configs()
    (slider,) = fig.layout.sliders
    assert len(slider.steps) == len(configs) > 6
    d = get("thread_tile_1d").defaults()
    assert configs[slider.active] == d
    assert fig.layout.title.text.replace("<br>", " ").startswith(f"{d['BM']} x {d['BN']} tile")


def test_thread_tiles_name_their_tiles_at_every_step():
    fig = pictures.thread_tiles()
    for step in fig.layout.sliders[0].steps:
        names = {a["text"]: a for a in step.args[1]["annotations"]}
        assert set(names) == {"<b>As</b>", "<b>Bs</b>", "<b>C</b>"}
    assert {a.text for a in fig.layout.annotations} == {"<b>As</b>", "<b>Bs</b>", "<b>C</b>"}
    # every legend entry a whole sentence of its own
    assert all(not t.name.startswith("...") and not t.name.endswith("...") for t in fig.data if t.name)
