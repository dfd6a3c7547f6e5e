"""The pictures of chapters 6-9 (helpers.figures.pictures_mid): what each control step draws."""
import pytest

from helpers.figures import pictures_mid as pm


def controls(fig):
    return [b for m in (fig.layout.updatemenus or ()) for b in m.buttons] + \
           [s for sl in (fig.layout.sliders or ()) for s in sl.steps]


def test_thread_tiles_one_step_per_config_and_the_right_grid():
    configs = [dict(BM=64, BN=64, TM=4, TN=4), dict(BM=128, BN=128, TM=8, TN=8), dict(BM=128, BN=64, TM=8, TN=4)]
    fig = pm.thread_tiles(configs)
    assert len(controls(fig)) == 3 and len(fig.data) == 3 * 3
    for i, p in enumerate(configs):
        c, a, b = fig.data[3 * i: 3 * i + 3]
        assert (len(c.z), len(c.z[0])) == (p["BM"] // p["TM"], p["BN"] // p["TN"])
        assert sum(v[0] == 1 for v in a.z) == p["TM"] and sum(v == 1 for v in b.z[0]) == p["TN"]
        assert sum(v == 1 for row in c.z for v in row) == 1                  # one thread's tile
    # square cells on both axes shrink the plot, never widen n's range past the tile (a wide screen)
    assert fig.layout.xaxis.constrain == fig.layout.yaxis.constrain == "domain"
    cell = pm.thread_tile_cells(128, 128, 8, 8, thread=17)
    assert cell["threads"] == 256 and (cell["trow"], cell["tcol"]) == (1, 1) and cell["fma"] == 64


@pytest.mark.parametrize("width, rows", [(8, 16), (16, 8), (32, 4), (64, 2), (128, 1)])
def test_float4_loads_cover_one_warp(width, rows):
    c = pm.float4_cells(width)
    assert c["rows"] == rows and len(set(c["lanes"])) == 32
    assert all(col % 4 == 0 and col < width for _, col in c["lanes"])
    fig = pm.float4_loads()
    step = [t for t in fig.data if t.type == "heatmap"][list((8, 16, 32, 64, 128)).index(width)]
    assert sum(v is not None for row in step.z for v in row) == 4 * 32     # 32 lanes x 4 floats
    # the even lanes numbered, each on its vector: no two numbers on neighbouring vectors
    numbered = sorted(int(t) for row in step.text for t in row if t)
    assert numbered == list(range(0, 32, 2))


def test_bank_layouts_titles_count_wavefronts_in_words():
    fig = pm.bank_layouts()
    titles = [b.args[1]["title.text"].replace("<br>", " ") for b in controls(fig)]
    assert len(titles) == len(pm.LAYOUTS) == len(fig.data)
    assert "1 wavefront (" in " ".join(titles) and "1 wavefronts" not in " ".join(titles)
    assert "4-way conflict" in titles[1] and "no conflict" in titles[3]


def test_stages_timeline_one_step_per_depth():
    fig = pm.stages_timeline(stages=(1, 2, 3), tiles=5)
    assert len(controls(fig)) == 3 and len(fig.data) == 3 * 2 * 5
    t2 = pm.timeline(2, 5, load=0.8)
    assert t2[1]["load_start"] == t2[0]["compute_start"]                  # issued under the tile before
    assert pm.timeline(1, 5, load=0.8)[-1]["compute_end"] == pytest.approx(5 * 1.8)


def test_plural():
    assert pm.plural(1, "wavefront") == "1 wavefront" and pm.plural(2, "stage") == "2 stages"
