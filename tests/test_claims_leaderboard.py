"""The leaderboard chapter's prose against the recorded data (book/data).

Every sentence of book/13_leaderboard.md that states a measured fact and is not computed
in a cell is checked here; a test fails when the data says otherwise.
"""
import pytest

from helpers.figures import leaderboard as L
from helpers.measure import bench, datafile, mainline
from helpers.runtime.specs import ALL, get
from helpers.runtime.specs import final as final_spec
from helpers.shapes import BROAD_RANGE, SUITE, broad_suite

D = final_spec.SPEC.defaults()


@pytest.fixture(scope="module")
def rs():
    try:
        return L.recorded("leaderboard")
    except datafile.DataError as exc:
        pytest.skip(f"no recorded leaderboard: {exc}")


def test_one_kernel_per_chapter_plus_cp_async(rs):
    # "It runs the main line, one kernel per chapter in book order, ... plus the cp.async pipeline"
    if mainline.awaiting_record(rs.rows):
        pytest.skip(f"the main line awaits a record: {mainline.awaiting_record(rs.rows)}")
    assert bench.kernels_in(rs.rows) == bench.entries() == mainline.names() + ["cp_async"]


def test_the_main_line_rises_at_every_step(rs):
    # "each step of the main line is faster than the one before it at n = 4096 and 8192"
    awaiting = mainline.awaiting_record(rs.rows)
    if awaiting:
        pytest.skip(f"the main line awaits a record: {awaiting}")
    for n in (4096, 8192):
        assert not mainline.falls(rs.rows, n), n
        assert sum(tf is not None for _, tf in mainline.climb(rs.rows, n)) >= len(mainline.STEPS) - 1


def test_every_main_line_step_builds_on_the_fastest_before_it():
    # "one kernel per chapter, each building on the fastest kernel so far": the variants are not on it
    assert [s.chapter for s in mainline.STEPS] == list(dict.fromkeys(
        s.chapter for s in ALL if s.name not in mainline.VARIANTS)) [:9] + ["autotuning", "final"]
    assert not set(mainline.VARIANTS) & set(mainline.names())
    assert get("double_buffering").config_for(4096, 4096, 4096, None)["FAST_PATH"] == 1


def test_cublas_timed_at_every_shape(rs):
    # "cuBLAS ... is timed at every shape in the same run"
    shapes = {(r["M"], r["N"], r["K"]) for r in rs.rows}
    timed = {(r["M"], r["N"], r["K"]) for r in rs.rows if r["kernel"] == "cublas" and r["status"] == "measured"}
    assert shapes == timed


def test_square_sizes_run_from_1024_to_8192(rs):
    # "compare them over square sizes from 1024 to 8192"
    sizes = [s[0] for s in bench.shapes_in(rs.rows, "sizes")]
    assert min(sizes) == 1024 and max(sizes) == 8192


def test_first_chapters_multiplied_the_last_added_percents(rs):
    # "the first chapters multiplied the speed, the last ones added percents"
    def at(k, n):
        return bench.cell(rs.rows, k, (n, n, n))["tflops"]
    assert at("coalescing", 2048) / at("naive", 2048) > 2
    assert at("final", 4096) / at("double_buffering", 4096) < 1.25


def test_only_untiled_kernels_sit_above_the_memory_roof(rs):
    # "for the untiled kernels most of those loads are served by the L1 and L2 caches instead"
    above = [p["kernel"] for p in L.roofline_points(rs.rows) if p["kernel"] != "cublas"
             and p["tflops"] > p.get("true_intensity", p["intensity"]) * rs.device.bandwidth_tbs]
    assert set(above) <= {"naive", "coalescing"}


def test_thin_shapes_have_too_few_tiles(rs):
    # "too few blocks to fill a large GPU unless K is split"; exercise 1: "a 128 x 256 tile gives 32" at n = 1024
    assert final_spec.tiles_of(dict(D, BM=128, BN=128), 8192, 128) < rs.device.sm_count
    assert final_spec.tiles_of(dict(D, BM=128, BN=256), 1024, 1024) == 32 < rs.device.sm_count


def test_geometric_mean_example():
    # "a kernel at 50% on one shape and 200% on another averages to 100% ... the arithmetic mean would say 125%"
    assert bench.geomean([50, 200]) == pytest.approx(100)


def test_broad_suite_as_described():
    # "log-uniform between 64 and 16384 ... a third freely, a third skinny, a third with a long K,
    #  and most of them odd or not a multiple of 4"
    assert BROAD_RANGE == (64, 16384)
    shapes = broad_suite()
    assert all(64 <= x <= 16384 for s in shapes for x in s)
    assert all(min(s[0], s[1]) <= 260 for s in shapes[1::3])
    rough = sum(1 for s in shapes if any(x % 4 for x in s))
    assert rough > len(shapes) / 2


def test_suite_is_the_one_the_table_describes(rs):
    assert bench.shapes_in(rs.rows, "suite") == list(SUITE)


def test_the_devices_table_agrees_with_the_pages_own_figures(rs):
    # the reference GPU's row of "On every recorded GPU" is the broad-suite text's geometric mean and
    # the leaderboard's final kernel at 4096 and 8192
    ref = next(d for d in L.devices_rows() if d["reference"])
    broad = L.broad_results()
    if not isinstance(broad, L.Text):
        assert f"**{bench.geomean(ref['broad']):.1f}%**" in str(L.broad_text(broad))
    for n, pct in ref["squares"].items():
        row = next(r for r in rs.rows if r["kernel"] == "final" and (r["M"], r["N"], r["K"]) == (n, n, n))
        assert pct == pytest.approx(100 * row["tflops"] / row["cublas_tflops"])
    assert sorted(ref["squares"]) == [4096, 8192]
