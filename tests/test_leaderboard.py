"""CPU tests of the leaderboard page's figures, tables and sentences (helpers/figures/leaderboard.py),
on hand-made rows in the format ``python -m helpers bench`` records."""
import math
from dataclasses import replace

import pytest

from helpers import hardware
from helpers.figures import leaderboard as L
from helpers.figures import style
from helpers.measure import bench
from helpers.measure.results import ResultSet
from helpers.runtime.specs import get
from helpers.shapes import flops, SUITE, broad_suite
from helpers.tables import Text

H200 = hardware.Device.from_datasheet("NVIDIA H200")
KERNELS = ("naive", "thread_tile_2d", "warptiling", "final")


def cell(kernel, shape, tflops, cublas, suite, status="measured", ok=True, reason=""):
    M, N, K = shape
    ms = 2 * M * N * K / (tflops * 1e12) * 1e3 if tflops else None
    params = {} if kernel == "cublas" else get(kernel).defaults()
    return {"kernel": kernel, "params": params, "M": M, "N": N, "K": K, "tflops": tflops, "cublas_tflops": cublas,
            "ms": ms, "ms_p20": ms and ms * 0.99, "ms_p80": ms and ms * 1.01, "rel_err": 1e-7, "ok": ok,
            "suite": suite, "status": status, "reason": reason}


def board():
    """Square sizes 1024..4096 and the suite; final at 150% on 512^3, 80-90% elsewhere."""
    rows = []
    speed = {"naive": 0.5, "thread_tile_2d": 30.0, "warptiling": 44.0, "final": 46.0}
    for n in (1024, 2048, 4096):
        rows.append(cell("cublas", (n, n, n), 50.0, 50.0, "sizes"))
        for k in KERNELS:
            if k == "naive" and n == 4096:
                rows.append(cell(k, (n, n, n), None, 50.0, "sizes", status="skipped", reason="too slow"))
            else:
                rows.append(cell(k, (n, n, n), speed[k] * (0.8 if n == 1024 else 1.0), 50.0, "sizes"))
    final_pct = dict(zip(SUITE, (100.0, 86.0, 82.0, 81.0, 87.0, 98.0, 150.0)))
    for s in SUITE:
        rows.append(cell("cublas", s, 40.0, 40.0, "suite"))
        for k in KERNELS:
            pct = final_pct[s] if k == "final" else 100 * speed[k] / 50.0
            rows.append(cell(k, s, 40.0 * pct / 100, 40.0, "suite"))
    return rows


def rs_of(rows, device=H200):
    return ResultSet("leaderboard", rows, device, "recorded on Test GPU, 2026-01-01", False)


# ------------------------------------------------------------------ tables and sentences
def test_table_cells_and_columns():
    t = L.table(rs_of(board()))
    by = {r["kernel"]: r for r in t.rows}
    assert list(by) == list(KERNELS) + ["cublas"]
    assert by["naive"]["n=4096"] == "skip"
    assert by["final"]["n=4096"] == "46.0 (92%)"
    assert by["cublas"]["max error"] == "reference"
    assert by["final"]["% of peak"] == f"{100 * 46.0 / H200.fp32_tflops:.0f}%"


def test_scores_table_leaves_out_the_final_kernels_outliers():
    rows = board()
    assert L.outlier_shapes(rows) == [(512, 512, 512)]
    by = {r["kernel"]: r for r in L.scores_table(rows).rows}
    pcts = (100.0, 86.0, 82.0, 81.0, 87.0, 98.0)
    assert by["final"]["without n=512"] == f"{math.exp(sum(map(math.log, pcts)) / 6):.1f}%"
    assert by["final"]["geometric mean"] == f"{math.exp(sum(map(math.log, pcts + (150.0,))) / 7):.1f}%"
    assert by["final"]["lowest"] == "81% at 128x8192x8192"


def test_plain_and_html_tables_name_the_same_lowest_shape_when_percents_round_alike():
    # 81.4% is listed first in the suite, 80.6% after it: both round to 81%, and both
    # tables must name the shape that is really lowest.
    rows = board()
    for r in rows:
        if r["kernel"] == "final" and r["suite"] == "suite":
            r["tflops"] = 40.0 * {(8192, 128, 8192): 0.814, (128, 8192, 8192): 0.806}.get((r["M"], r["N"], r["K"]), 0.95)
    assert bench.lowest(rows, "final")["M"] == 128
    by = {r["kernel"]: r for r in L.scores_table(rows).rows}
    assert by["final"]["lowest"] == "81% at 128x8192x8192"
    plain = bench.format_table(rows, H200.fp32_tflops)
    assert "final: geometric mean" in plain and "lowest 81% at 128x8192x8192" in plain


def test_closeness_quotes_the_numbers_of_the_rows():
    text = str(L.closeness(rs_of(board())))
    assert "reaches **92%** of cuBLAS at n = 2048 and **92%** of cuBLAS at n = 4096" in text   # the largest two
    assert "1024" not in text and "thin" not in text          # the rest is the leaderboard's
    assert "without n=512 (at 150% it lifts the mean)" in text


def test_closeness_says_lowers_for_a_low_outlier():
    rows = [r for r in board() if not (r["kernel"] == "final" and r["M"] == 512)]
    rows.append(cell("final", (512, 512, 512), 8.0, 40.0, "suite"))      # 20%: far below the rest
    text = str(L.closeness(rs_of(rows)))
    assert "it lowers the mean" in text


def test_headline_names_the_fastest_and_the_factor():
    text = str(L.headline(rs_of(board())))
    assert "**final**" in text and "46.0 TFLOP/s" in text and "92 times slower" in text


def test_cap_text_lists_skipped_cells():
    text = str(L.cap_text(rs_of(board())))
    assert f"{bench.MAX_LAUNCH_MS:g} ms" in text and "naive at n=4096" in text


# ------------------------------------------------------------------ figures
def test_sizes_figure_menu_switches_metric_and_axis_title():
    fig = L.sizes_figure(board(), "src")
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["TFLOP/s", "% of cuBLAS"]
    assert buttons[1].args[1]["yaxis.title.text"] == "% of cuBLAS"
    first = [t for t, v in zip(fig.data, buttons[0].args[0]["visible"]) if v]
    assert [t.name for t in first] == list(KERNELS) + ["cublas"]
    colours = [t.line.color for t in first]
    assert colours == [style.colour(k) for k in list(KERNELS) + ["cublas"]]
    assert len(set(colours)) == len(colours)
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.type == "log"


def test_suite_figure_groups_and_missing_cells():
    rows = board()
    rows = [r for r in rows if not (r["kernel"] == "naive" and r["M"] == 4097)]
    rows.append(cell("naive", (4097,) * 3, None, 40.0, "suite", status="skipped", reason="too slow: 280 ms"))
    fig = L.suite_figure(rows, "src")
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["all kernels", "the main line's last four", "final and cuBLAS"]
    naive = next(t for t in fig.data if t.name == "naive")
    i = list(naive.y).index("n=4097")
    assert naive.x[i] is None and "too slow" in naive.hovertext[i]
    last = [t.name for t, v in zip(fig.data, buttons[2].args[0]["visible"]) if v]
    assert last == ["final", "cuBLAS = 100%"]
    final = next(t for t in fig.data if t.name == "final")
    assert final.marker.color == style.colour("final")
    # a variant after the final kernel in the rows is in "all kernels" only, never in the main line's views
    variant = [dict(r, kernel="cp_async", params=get("cp_async").defaults()) for r in rows if r["kernel"] == "final"]
    fig2 = L.suite_figure(rows + variant, "src")
    views = [[t.name for t, v in zip(fig2.data, b.args[0]["visible"]) if v] for b in fig2.layout.updatemenus[0].buttons]
    assert "cp_async" in views[0] and views[1] == ["naive", "thread_tile_2d", "warptiling", "final", "cuBLAS = 100%"]
    assert views[2] == ["final", "cuBLAS = 100%"]
    # a value just under 100% sits inside its bar's end, clear of the line at 100%; others past the bar
    span = L.result_figures.LABEL_SPAN * fig.layout.xaxis.range[1]
    assert all(where == ("inside" if 100 - span <= x <= 100 else "outside")
               for x, where in zip(final.x, final.textposition) if x is not None)
    assert {"inside", "outside"} <= set(final.textposition)


def test_roofline_uses_the_rows_device_and_every_kernel():
    slow = replace(H200, name="Slow GPU", bandwidth_gbs=900.0)
    fig = L.roofline_figure(rs_of(board(), slow))
    assert max(fig.data[0].y) == pytest.approx(slow.fp32_tflops)
    assert "900" not in fig.data[0].name or "0.90 TB/s" in fig.data[0].name
    names = [t.name for t in fig.data[1:]]
    assert [n.split(" ")[0] for n in names] == list(KERNELS) + ["cuBLAS"]
    assert names[0] == "naive (n=2048)"       # naive skipped 4096: its largest size that ran


def test_roofline_menu_spreads_out_the_fastest_kernels():
    fig = L.roofline_figure(rs_of(board(), H200))
    (menu,) = fig.layout.updatemenus
    whole, zoom = (b.args[0] for b in menu.buttons)
    assert whole["xaxis.range"] == list(fig.layout.xaxis.range) and whole["yaxis.range"] == list(fig.layout.yaxis.range)
    points = [(t.x[0], t.y[0]) for t in fig.data[1:] if t.mode and "markers" in t.mode]
    top = max(y for _, y in points)
    near = [(x, y) for x, y in points if y >= top / L.ZOOM_SHARE]
    assert menu.buttons[1].label == f"the {len(near)} fastest, spread out" and 1 < len(near) < len(points)
    (x0, x1), (y0, y1) = zoom["xaxis.range"], zoom["yaxis.range"]
    assert all(x0 < math.log10(x) < x1 and y0 < math.log10(y) < y1 for x, y in near)
    assert x1 - x0 < (whole["xaxis.range"][1] - whole["xaxis.range"][0]) / 2     # at least twice as spread


def test_declutter_keeps_the_faster_label():
    pts = [{"intensity": 10.0, "tflops": 40.0, "short": "a"}, {"intensity": 10.5, "tflops": 41.0, "short": "b"},
           {"intensity": 0.1, "tflops": 1.0, "short": "c"}]
    out = {p["short"] or "-" for p in L.declutter(pts)}
    assert out == {"b", "-", "c"}


# ------------------------------------------------------------------ the broad suite
def broad_rows(pcts):
    shapes = broad_suite()[:len(pcts)]
    rows = []
    for s, p in zip(shapes, pcts):
        rows.append(cell("cublas", s, 40.0, 40.0, "broad"))
        rows.append(cell("final", s, 40.0 * p / 100, 40.0, "broad"))
    return rows


def test_broad_kind_follows_the_suites_thirds():
    shapes = broad_suite()
    assert [L.broad_kind(s) for s in shapes[:3]] == list(L.BROAD_KINDS)
    assert L.broad_kind((100, 5000, 5000)) == L.BROAD_KINDS[1]
    assert L.broad_kind((500, 400, 8000)) == L.BROAD_KINDS[2]


def test_broad_figure_and_text():
    pcts = (90.0, 80.0, 100.0, 95.0, 70.0, 110.0)
    rs = ResultSet("broad_suite", broad_rows(pcts), H200, "recorded on Test GPU", False)
    fig = L.broad_figure(rs)
    kinds = [t.name for t in fig.data if t.mode == "markers"]
    assert kinds == list(L.BROAD_KINDS)
    assert sum(len(t.y) for t in fig.data if t.mode == "markers") == 6
    text = str(L.broad_text(rs))
    assert f"**{bench.geomean(pcts):.1f}%**" in text
    assert "2 shapes at or above cuBLAS, 2 below 90%" in text
    assert "6 of 6 shapes" in text


def test_broad_text_names_the_host_bound_shapes():
    rows = broad_rows((90.0, 80.0, 100.0, 95.0, 70.0, 110.0))
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows})
    for r in rows:                                      # cuBLAS at 20 us on the first two shapes
        if (r["M"], r["N"], r["K"]) in shapes[:2]:
            r["cublas_tflops"] = flops(r["M"], r["N"], r["K"]) / 20e-6 / 1e12
    rest = [r for r in rows if r["kernel"] == "final" and (r["M"], r["N"], r["K"]) not in shapes[:2]]
    rest = [r for r in rest if flops(r["M"], r["N"], r["K"]) / (r["cublas_tflops"] * 1e12) * 1e6 >= L.HOST_BOUND_US]
    text = str(L.broad_text(ResultSet("broad_suite", rows, H200, "recorded on Test GPU", False)))
    assert f"{6 - len(rest)} shapes take cuBLAS under 35 µs" in text
    assert f"geometric mean is {bench.geomean(L._pct(r) for r in rest):.1f}% over {len(rest)} shapes" in text


def test_broad_text_of_queued_rows_says_they_are_the_gpus_time():
    rows = broad_rows((90.0, 80.0, 100.0, 95.0, 70.0, 110.0))
    for r in rows:                                      # every shape under 35 us, every launch queued
        r["cublas_tflops"] = flops(r["M"], r["N"], r["K"]) / 20e-6 / 1e12
        r["queued"] = True
    text = str(L.broad_text(ResultSet("broad_suite", rows, H200, "recorded on Test GPU", False)))
    assert "6 shapes take cuBLAS under 35 µs; their launches were timed queued" in text
    assert "Without them" not in text
    rows[1]["queued"] = False                           # one final row timed with host gaps: the old sentence
    text = str(L.broad_text(ResultSet("broad_suite", rows, H200, "recorded on Test GPU", False)))
    assert "timed queued" not in text


def test_broad_cover_text_compares_the_lowest_and_highest_thirds():
    # default final tiles are 128 x 256: 129 x 129 takes 2 tiles (3.94 times its area), 1024 x 1024 exactly 32
    def rows_of(pcts_and_sides):
        rows = []
        for i, (p, side) in enumerate(pcts_and_sides):
            shape = (side, side, 1000 + i)
            rows += [cell("cublas", shape, 40.0, 40.0, "broad"), cell("final", shape, 40.0 * p / 100, 40.0, "broad")]
        return ResultSet("broad_suite", rows, H200, "recorded on Test GPU", False)

    text = str(L.broad_cover_text(rows_of([(60.0, 129), (65.0, 129), (80.0, 1024), (85.0, 1024),
                                           (95.0, 1024), (99.0, 1024)])))
    assert text.startswith("Part of the gap is the tiles")
    assert f"lowest third of the shapes (2, at {bench.geomean((60.0, 65.0)):.0f}% of cuBLAS)" in text
    assert f"cover {2 * 128 * 256 / 129 ** 2:.2f} times the output's area, against 1.00 times" in text
    even = str(L.broad_cover_text(rows_of([(60.0, 1024), (65.0, 1024), (95.0, 129), (99.0, 129),
                                           (80.0, 1024), (85.0, 1024)])))
    assert even.startswith("The tiles do not explain the gap") and "against 3.94 times" in even
    assert "Too few" in str(L.broad_cover_text(rows_of([(60.0, 129), (90.0, 1024)])))


def test_broad_without_data_is_a_sentence():
    missing = Text("*The broad suite has not been recorded here yet*")
    assert L.broad_figure(missing) is missing and L.broad_text(missing) is missing
    assert L.broad_cover_text(missing) is missing
    assert L.broad_view(missing) is missing


def test_devices_table_has_a_row_per_recorded_gpu_computed_from_its_own_rows(tmp_path, monkeypatch):
    from helpers.measure import datafile

    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SGEMM_BOOK_DEVICE", "Ref GPU")

    def save(name, **chapters):
        dev = {"name": name, "compute_capability": "9.0", "sm_count": 132, "clock_mhz": 1980, "l2_bytes": 2**20,
               "bandwidth_gbs": 1000.0, "driver": "1", "cuda_runtime": "13.0", "cupy": "14.0"}
        def stored(r):                                   # what record adds to a measured row
            return dict(r, source_hash="x", cublas_ms=flops(r["M"], r["N"], r["K"]) / r["cublas_tflops"] / 1e9)
        doc = {"schema": datafile.SCHEMA, "chapters": {
            c: {"device": dev, "recorded": "2026-11-25T00:00:00+00:00", "git_commit": "abc", "kind": "timing",
                "command": "python -m helpers record", "rows": [stored(r) for r in rows]}
            for c, rows in chapters.items()}}
        (tmp_path / f"{datafile.slug(name)}.json").write_text(datafile.dumps(doc))

    squares = [cell(k, (n, n, n), t, 50.0, "sizes") for n, t in ((4096, 45.0), (8192, 51.0))
               for k in ("final", "cublas")]
    save("A Other GPU", broad_suite=broad_rows((60.0, 90.0)))          # sorts first, shown after the reference
    save("Ref GPU", leaderboard=squares, broad_suite=broad_rows((70.0, 80.0, 100.0)))
    save("Naive Only GPU", naive=[cell("naive", (1024,) * 3, 1.0, 50.0, "sizes")])
    rows = L.devices_table().rows
    assert [r["GPU"] for r in rows] == ["Ref GPU (reference)", "A Other GPU"]
    ref, other = rows
    assert (ref["4096³"], ref["8192³"]) == ("90.0%", "102.0%")
    assert ref["broad suite"] == f"{bench.geomean((70.0, 80.0, 100.0)):.1f}% over 3"
    assert (ref["lowest"], ref["under 80%"]) == ("70%", "1")
    assert (other["4096³"], other["broad suite"], other["under 80%"]) == ("–", "73.5% over 2", "1")


def test_devices_table_without_any_data_is_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))
    assert "No GPU" in str(L.devices_table())


# ------------------------------------------------------------------ the four layouts
def layout_rows(pcts: dict, cublas: dict | None = None):
    """Rows of ``bench --suite layouts``: pcts[(n, layout)] = % of cuBLAS; cuBLAS at 50 TFLOP/s
    unless ``cublas`` says otherwise."""
    rows = []
    for (n, lay), pct in pcts.items():
        cub = (cublas or {}).get((n, lay), 50.0)
        r = cell("final", (n, n, n), cub * pct / 100, cub, "layouts")
        r["layout"] = lay
        rows.append(r)
    return rows


def test_layouts_table_and_text_from_the_rows():
    pcts = {(4096, "NN"): 97.0, (4096, "NT"): 95.0, (4096, "TN"): 99.5, (4096, "TT"): 101.0,
            (8192, "NN"): 99.0, (8192, "NT"): 96.0, (8192, "TN"): 93.0, (8192, "TT"): 98.0}
    rows = layout_rows(pcts, cublas={(8192, "TN"): 53.0, (8192, "TT"): 49.0})
    rows.append(dict(cell("final", (2048,) * 3, None, 50.0, "layouts", status="failed", reason="x"), layout="NN"))
    rs = ResultSet("layouts", rows, H200, "recorded on Test GPU", False)
    t = L.layouts_table(rs)
    assert [r["layout"] for r in t.rows] == list(bench.LAYOUTS)
    by = {r["layout"]: r for r in t.rows}
    assert by["TT"]["n = 4096"] == "50.5 (101%)" and by["NN"]["n = 2048"] == "failed"
    text = str(L.layouts_text(rs))
    assert "8 of 9 calls measured and correct" in text
    assert "n = 4096: 95.0% (NT) to 101.0% (TT)" in text and "n = 8192: 93.0% (TN) to 99.0% (NN)" in text
    assert "The lowest of all is TN at n = 8192, 93.0%" in text
    assert "at n = 8192 it ran at 49.0 TFLOP/s (TT) to 53.0 (TN)" in text
    lines = bench.format_layouts(rows).splitlines()          # a row per layout, a column per size
    assert lines[1].split() == ["layout", "n=2048", "n=4096", "n=8192"]
    assert lines[2].split() == ["NN", "failed", "48.5", "(97%)", "49.5", "(99%)"]
    assert lines[4].split()[0] == "TN" and lines[4].endswith("49.3 (93%)")


def test_layouts_without_data_is_a_sentence():
    missing = Text("*The four layouts have not been recorded here yet*")
    assert L.layouts_table(missing) is missing and L.layouts_text(missing) is missing


def test_layouts_are_a_recorded_chapter_of_bench():
    from helpers.__main__ import BENCH_CHAPTERS
    from helpers.measure import sources

    assert BENCH_CHAPTERS["layouts"] == "layouts" and sources.get("layouts").run == bench.record_layouts


# ------------------------------------------------------------------ the status page (helpers/figures/status.py)
def test_status_short_command():
    from helpers.figures.status import short_command

    many = "python -m helpers record --chapter naive --chapter coalescing --chapter final"
    assert short_command(many, "final") == "python -m helpers record --chapter final (and 2 more in the same run)"
    assert short_command("python -m helpers bench --record --json /root/x.json", "leaderboard") == \
        "python -m helpers bench --record"
    assert short_command("python -m helpers record --chapter sanitize", "sanitize") == \
        "python -m helpers record --chapter sanitize"


def test_status_sanitize_verdict_for_a_run_that_never_reported(monkeypatch):
    from helpers.figures import status
    from helpers.measure import datafile

    rows = [{"kernel": "k", "tool": "memcheck", "errors": 0, "hazards": 0, "ok": False, "expected_broken": False},
            {"kernel": "j", "tool": "memcheck", "errors": 2, "hazards": 0, "ok": False, "expected_broken": False}]

    class Rec:
        def chapter(self, name):
            return {"rows": rows}
    monkeypatch.setattr(datafile, "load", lambda: Rec())
    by = {r["kernel"]: r["verdict"] for r in status.sanitize_table().rows}
    assert by == {"k": "did not run to completion (nothing reported)", "j": "ERRORS"}


def test_every_kernel_and_main_line_step_has_its_own_colour_and_none_is_grey():
    from helpers.measure import mainline
    names = [s.name for s in style.ALL] + mainline.entries()
    colours = {n: style.colour(n) for n in dict.fromkeys(names)}
    assert len(set(colours.values())) == len(colours), colours
    greys = {c for c in colours.values() if len({c[1:3], c[3:5], c[5:7]}) == 1}
    assert greys <= {style.CUBLAS}                      # grey marks the leaderboard's variants
