"""The leaderboard's section "Called from Python" (book/13_leaderboard.md) against its data.

The section's numbers are computed from the recorded rows (helpers.figures.calls); its prose
states the method, checked here against the code that measures, and the computed text is
checked against the rows it summarises, recorded and synthetic.
"""
import math

import pytest

from helpers import settings
from helpers.figures import calls as fig_calls
from helpers.measure import calls, datafile
from helpers.measure.bench import geomean
from helpers.measure.results import ResultSet
from helpers.tables import Table, Text


def test_the_method_as_the_section_states_it():
    # "the host's time per call in a loop over eight operand sets, the GPU held so that only the
    #  host counts; and the loop's own time per call, synchronised once at the end"
    assert calls.SETS == 8 and calls.CALLS >= 100 and calls.ROUNDS >= 5
    # the deep dive: "its clock starts after the loop's first ten calls"
    assert calls.LEAD == 10 and "first ten calls" in (settings.BOOK_DIR / "13_leaderboard_deep_dive.md").read_text()
    # "Batches of products (3-D operands, one of them 2-D in some rows)"
    assert any(b for b, *_ in calls.SHAPES) and any(s[4] for s in calls.SHAPES)
    # the five small products whose host cost motivated the plans are all measured
    for shape in [(128, 128, 128), (1209, 86, 1898), (451, 434, 319), (64, 50000, 64), (33, 4096, 4096)]:
        assert (None, *shape, False) in calls.SHAPES


def row(shape, pct_loop, host, cublas_host, ok=True):
    return dict(suite="calls", kernel="final", shape=shape, status="measured", ok=ok, path="plain", launches=1,
                ms=0.01, cublas_ms=0.01, host_us=host, cublas_host_us=cublas_host, loop_us=100 / pct_loop,
                cublas_loop_us=1.0, pct_loop=pct_loop)


def test_the_text_states_what_the_rows_hold():
    rows = [row("a", 150.0, 8.0, 30.0), row("b", 90.0, 12.0, 25.0), row("c", 300.0, 5.0, 40.0),
            row("d", 10.0, 1.0, 1.0, ok=False)]
    rs = ResultSet("calls", rows, None, "recorded on a test", False)
    text = str(fig_calls.calls_text(rs))
    assert text.startswith("3 of 4 products measured and correct")
    assert f"{geomean([150, 90, 300]):.0f}% of cupy.matmul's calls per second" in text
    assert "from 90% (b) to 300% (c)" in text and "falls behind on 1: b (GPU 10.0 / 10.0 µs)" in text
    assert "wait on the GPU" not in text                # b's host (12 µs) is slower than its GPU (10 µs)
    assert "empty kernel" not in text and "first call" not in text    # neither recorded in these rows
    assert "5.0 to 12.0 µs per call of helpers.sgemm, 25.0 to 40.0 µs per call of cupy.matmul" in text
    table = fig_calls.calls_table(rs)
    assert isinstance(table, Table) and [r["product"] for r in table.rows] == ["a", "b", "c", "d"]
    assert table.rows[3]["helpers.sgemm runs"] == "WRONG" and table.rows[0]["throughput"] == "150%"


@pytest.fixture(scope="module")
def recorded():
    rs = fig_calls.calls_results()
    if isinstance(rs, Text):
        pytest.skip(str(rs))
    return rs


def test_the_recorded_text_is_its_rows(recorded):
    s = fig_calls.summary(recorded.rows)
    good = fig_calls.good_rows(recorded.rows)
    assert s["count"] == len(good) > 0
    assert math.isclose(s["geomean"], geomean(100 * r["cublas_loop_us"] / r["loop_us"] for r in good))
    assert all(r["pct_loop"] == pytest.approx(100 * r["cublas_loop_us"] / r["loop_us"]) for r in good)


def test_every_recorded_call_was_correct(recorded):
    assert all(r["ok"] for r in recorded.rows if r.get("status") == "measured")


def test_the_figure_shows_both_libraries_for_each_product_and_each_time():
    rows = [row("a", 150.0, 8.0, 30.0), row("b", 90.0, 12.0, 25.0), row("c", 10.0, 1.0, 1.0, ok=False)]
    fig = fig_calls.calls_figure(ResultSet("calls", rows, None, "recorded on a test", False))
    # per menu entry: the line joining each product's two times, ours, cupy.matmul, the products' names
    assert len(fig.data) == 4 * len(fig_calls.TIMES)
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == [t[0] for t in fig_calls.TIMES]
    link, loop, loop_cublas, names = fig.data[:4]
    assert list(loop.x) == [100 / 150, 100 / 90] and list(loop_cublas.x) == [1.0, 1.0]   # the wrong row left out
    assert list(link.x) == [100 / 150, 1.0, None, 100 / 90, 1.0, None]
    assert list(names.text) == ["a, one kernel", "b, one kernel"]
    assert [t.visible for t in fig.data] == [True] * 4 + [False] * 8
    gpu = fig.data[9]
    assert list(gpu.x) == [10.0, 10.0]                                 # ms shown as µs
    # times are dots on the log axis (a bar's length there would mean nothing), each with its value
    # written on the side away from the other library's
    assert {t.type for t in fig.data} == {"scatter"}
    assert list(loop.text) == ["0.7", "1.1"] and list(loop_cublas.text) == ["1.0", "1.0"]
    assert list(loop.textposition) == ["middle left", "middle right"]
    assert list(loop_cublas.textposition) == ["middle right", "middle left"]
    # every dot inside the axis's range (log), with room for its value: the names start at its left edge
    lo, hi = (10 ** v for v in fig.layout.xaxis.range)
    assert all(2 * lo <= x <= hi / 2 for t in fig.data if t.mode == "markers+text" for x in t.x)
    assert all(x == pytest.approx(lo, rel=0.02) and x > lo for x in names.x)
    assert isinstance(fig_calls.calls_figure(Text("missing")), Text)


def test_the_table_shows_the_first_call_where_it_was_recorded():
    rows = [row("a", 150.0, 8.0, 30.0), dict(row("b", 90.0, 12.0, 25.0), first_call_ms=41.25, launch_floor_us=4.25)]
    table = fig_calls.calls_table(ResultSet("calls", rows, None, "recorded on a test", False))
    assert "first call, ms" not in table.rows[0] and table.rows[1]["first call, ms"] == "41.2"
    assert "empty launch, µs" not in table.rows[0] and table.rows[1]["empty launch, µs"] == "4.2"


def test_the_text_says_why_a_loop_that_waits_on_the_gpu_falls_behind():
    # b: the host issues a call in 3 µs, the GPU runs it in 10 (cuBLAS's in 9.5): the loop is the GPU's
    gpu_bound = dict(row("b", 95.0, 3.0, 25.0), cublas_ms=0.0095, first_call_ms=2.5, launch_floor_us=2.0)
    rows = [dict(row("a", 150.0, 8.0, 30.0), first_call_ms=4.0, launch_floor_us=2.5), gpu_bound]
    text = str(fig_calls.calls_text(ResultSet("calls", rows, None, "recorded on a test", False)))
    assert "falls behind on 1: b (GPU 10.0 / 9.5 µs). Those loops wait on the GPU" in text
    assert "GPU times are within 5.3% of each other" in text
    details = str(fig_calls.calls_details_text(ResultSet("calls", rows, None, "recorded on a test", False)))
    assert "an empty kernel as helpers.sgemm launches cost the host 2.0 to 2.5 µs, measured beside each" in details
    assert "first call of a new shape took 2.5 to 4.0 ms" in details
    many = [dict(row(name, pct, 3.0, 25.0), cublas_ms=0.0095) for name, pct in zip("cdefg", (99, 95, 97, 98, 96))]
    text = str(fig_calls.calls_text(ResultSet("calls", rows + many, None, "recorded on a test", False)))
    assert "falls behind on 6: b (GPU 10.0 / 9.5 µs), d (GPU 10.0 / 9.5 µs), g (GPU" in text    # the furthest three
    assert "and 3 more (the deep dive lists them)" in text
    assert not any(f"{name} (GPU" in text for name in "cef")
    rows[1] = dict(gpu_bound, pct_loop=100.0)
    assert "keeps up with cupy.matmul or better on every one" in str(
        fig_calls.calls_text(ResultSet("calls", rows, None, "recorded on a test", False)))


def test_the_page_says_how_a_call_launched_its_kernels():
    # a row of a run whose calls launched graphs says so, and the floor's sentence no longer charges
    # a second kernel a second launch
    assert fig_calls.launch_words(dict(launches=2, graph=True)) == "2 kernels, one graph"
    assert fig_calls.launch_words(dict(launches=1, graph=True)) == "1 kernel, in a graph"
    assert fig_calls.launch_words(dict(launches=2)) == "2 launches"
    assert fig_calls.launch_words(dict(launches=1, graph=False)) == "1 launch"
    rows = [dict(row(name, 120.0, 8.0, 30.0), graph=True, launch_floor_us=2.0) for name in "ab"]
    rs = ResultSet("calls", rows, None, "recorded on a test", False)
    details = str(fig_calls.calls_details_text(rs))
    assert "(a graph of one kernel, its parameters set, launched) cost the host 2.0 to 2.0 µs, measured beside" in details
    rows[0]["direct_launch_us"], rows[1]["direct_launch_us"] = 3.5, 4.25
    details = str(fig_calls.calls_details_text(rs))
    assert "cost the host 2.0 to 2.0 µs, against 3.5 to 4.2 µs for a cuLaunchKernel of it alone, measured" in details
    assert "every call pays it once" in details and "twice" not in details
    assert fig_calls.calls_table(rs).rows[0]["helpers.sgemm runs"].endswith("(1 kernel, in a graph)")
    rows[1]["graph"] = False
    assert "pays twice" in str(fig_calls.calls_details_text(ResultSet("calls", rows, None, "a test", False)))


def test_every_path_a_call_takes_is_named_in_words():
    # calls.path_of's names ("slabs", "packed") are the code's; the page says what each launches
    paths = ["plain", "split-K", "stream-K", "slabs", "packed", "batched", "batched split-K"]
    assert set(fig_calls.PATH_WORDS) == set(paths)
    assert fig_calls.path_words(dict(path="slabs")) == "split-K, parts added by a 2nd kernel"


def test_a_loop_can_run_under_the_gpu_time_between_events(recorded):
    # the table's caption: "the events' own cost can make it more than the loop's time per call, even
    # where the loop waits on the GPU"
    assert "can make it more than the loop's time per call" in fig_calls.CAPTION
    waits = [r for r in fig_calls.good_rows(recorded.rows) if fig_calls.gpu_bound(r)]
    assert any(r["loop_us"] < 1e3 * r["ms"] for r in waits)


def test_a_held_loop_starts_its_clock_after_its_first_calls(monkeypatch):
    # the first calls after a synchronisation cost more: the held loops (host time) leave LEAD of
    # them out of the clock; the free-running loop (what a program gets) counts every call
    import sys
    import types

    from helpers.runtime import timing

    clock, state = [0.0], {"since_sync": 0, "calls": 0, "holds": 0}

    def synchronize():
        state["since_sync"] = 0

    def call(i):                                 # 10 s each for the first LEAD calls after a sync, then 1 s
        clock[0] += 10.0 if state["since_sync"] < calls.LEAD else 1.0
        state["since_sync"] += 1
        state["calls"] += 1

    stream = types.SimpleNamespace(synchronize=synchronize)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_current_stream=lambda: stream)))
    monkeypatch.setattr(timing, "hold_gpu", lambda seconds: state.update(holds=state["holds"] + 1))
    monkeypatch.setattr(calls.time, "perf_counter", lambda: clock[0])
    sets = [(i,) for i in range(8)]
    assert calls.loop_us((call,), sets, calls=20, rounds=3, hold=True) == [pytest.approx(1e6)]   # µs per call
    assert state["holds"] == 4 and state["calls"] == 4 * (calls.LEAD + 20)
    free = calls.loop_us((call,), sets, calls=20, rounds=3)
    assert free == [pytest.approx((10 * calls.LEAD + 20 - calls.LEAD) / 20 * 1e6)]
