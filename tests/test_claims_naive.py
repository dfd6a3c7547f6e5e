"""Claims of the chapter "The naive kernel" that its prose states, checked against the
recorded data (each test fails if a re-recording says otherwise), and its computed
sentences checked against cases where the data would say something else."""
from dataclasses import replace

import pytest

import helpers
from helpers.figures import coalescing as figures
from helpers.figures.results import percent_of_cublas
from helpers.hardware import Device
from helpers.measure.results import ResultSet
from helpers.models import coalescing as co


@pytest.fixture(autouse=True)
def recorded(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")


@pytest.fixture
def naive():
    return helpers.results("naive")


def largest(rs):
    n = max(r["M"] for r in rs.rows if sum(1 for x in rs.rows if x["M"] == r["M"]) > 1)
    return n, [r for r in rs.rows if r["M"] == n and r["N"] == n and r["K"] == n]


def test_all_recorded_rows_are_correct(naive):
    assert naive.all_correct


def test_block_shapes_differ_several_fold_at_one_intensity(naive):
    """'the block shapes all have the same intensity, yet their speeds differ several-fold'."""
    _, rows = largest(naive)
    assert max(r["tflops"] for r in rows) / min(r["tflops"] for r in rows) >= 2


def test_the_l1_model_predicts_every_block_shape(naive):
    """'it predicts the naive kernel's speed for every block shape' (within a few percent, never above)."""
    _, rows = largest(naive)
    for f in co.ceiling_fit(rows, naive.device, "naive"):
        assert 0.9 <= f["ratio"] <= 1.02, f


def test_fewer_lines_run_faster(naive):
    """'Narrow blocks ... touch fewer lines per step, and run faster in proportion'."""
    _, rows = largest(naive)
    fit = sorted(co.ceiling_fit(rows, naive.device, "naive"), key=lambda f: f["lines"])
    speeds = [f["tflops"] for f in fit]
    assert speeds == sorted(speeds, reverse=True) or all(
        a["lines"] == b["lines"] or a["tflops"] > b["tflops"] for a, b in zip(fit, fit[1:]))


def test_a_small_fraction_of_cublas(naive):
    """Summary: 'runs at a small fraction of its speed at the large sizes' (n >= 1024)."""
    rows = [r for r in naive.where(**helpers.kernel("naive").defaults()) if r["M"] >= 1024]
    assert rows and all(percent_of_cublas(r) < 10 for r in rows)


def test_roofline_uses_the_rows_device(naive):
    fig = figures.naive_roofline(naive)
    assert f"{naive.device.bandwidth_tbs:.2f} TB/s" in fig.data[0].name
    other = replace(naive, device=Device.from_datasheet("NVIDIA H100 80GB HBM3"))
    assert f"{other.device.bandwidth_tbs:.2f} TB/s" in figures.naive_roofline(other).data[0].name
    assert figures.naive_roofline(other).data[0].name != fig.data[0].name
    # the default and the fastest block shape share the kernel's colour: their symbols differ
    shapes = [t for t in fig.data if t.name.startswith("naive ")]
    assert len({t.marker.symbol for t in shapes}) == len(shapes) == 2


def test_model_text_follows_the_rows(naive):
    """The sentence says what the rows say, also when the model would be far off."""
    n, rows = largest(naive)
    text = str(figures.naive_model_text(naive))
    d = helpers.kernel("naive").defaults()
    default = next(f for f in co.ceiling_fit(rows, naive.device, "naive") if (f["BX"], f["BY"]) == (d["BX"], d["BY"]))
    assert f"**{100 * default['ratio']:.0f}% of the ceiling**" in text
    halved = [dict(r, tflops=r["tflops"] / 2) for r in naive.rows]
    slow = ResultSet("naive", halved, naive.device, naive.source, False)
    assert f"**{50 * default['ratio']:.0f}% of the ceiling**" in str(figures.naive_model_text(slow))


def test_roofline_text_names_the_shapes_above_the_memory_roof(naive):
    n, rows = largest(naive)
    roof = naive.device.attainable(0.25)
    above = [r for r in rows if r["tflops"] > roof]
    text = str(figures.naive_roofline_text(naive))
    assert ("run *above* it" in text) == bool(above)
    if above:
        best = max(above, key=lambda r: r["tflops"])
        assert f"{len(above)} of the {len(rows)} block shapes" in text
        assert f"({best['params']['BX']}x{best['params']['BY']}) at {best['tflops']:.2f}" in text
        slowest = min(rows, key=lambda r: r["tflops"])
        assert f"{best['tflops'] / slowest['tflops']:.1f}× the slowest" in text


def test_shapes_text(naive):
    n, rows = largest(naive)
    hi = max(rows, key=lambda r: r["tflops"])
    assert f"{hi['params']['BX']}x{hi['params']['BY']}, runs at {hi['tflops']:.3g} TFLOP/s" in str(
        figures.shapes_text(naive))
