"""CPU tests for ``python -m helpers bench`` (helpers/leaderboard.py): planning, capping, maths, tables."""
import math
import subprocess
import sys

import pytest

from helpers import leaderboard as L
from helpers.bench import Result, Timing
from helpers.registry import ROOT, ConfigError, get


# ------------------------------------------------------------------ maths
def test_geomean():
    assert L.geomean([1, 100]) == pytest.approx(10)
    assert L.geomean([50, 50, 50]) == pytest.approx(50)
    assert L.geomean([2, 8]) == pytest.approx(4)
    assert math.isnan(L.geomean([]))
    with pytest.raises(ValueError, match="positive"):
        L.geomean([10, 0])


def _row(kernel, shape, tflops, cublas=50.0, ok=True, status="measured", suite="suite"):
    M, N, K = shape
    return {"kernel": kernel, "params": {}, "M": M, "N": N, "K": K, "tflops": tflops, "cublas_tflops": cublas,
            "ms": 1.0, "rel_err": 1e-7 if ok else 1e-2, "ok": ok, "status": status, "suite": suite, "reason": ""}


def test_suite_score_counts_only_correct_measurements():
    rows = [_row("k", L.SUITE[0], 25), _row("k", L.SUITE[1], 40),  # 50% and 80%
            _row("k", L.SUITE[2], 49, ok=False),                    # wrong: left out
            dict(_row("k", L.SUITE[3], 0), status="skipped"),       # not run: left out
            _row("k", (1024, 1024, 1024), 1, suite="sizes")]        # not in the suite
    score, counted, total = L.suite_score(rows, "k")
    assert score == pytest.approx(math.sqrt(50 * 80))
    assert (counted, total) == (2, 4)


# -------------------------------------------------------- plan and capping
def test_shapes_full_and_quick():
    full = L.shapes()
    assert [s for s, t in full if t == "sizes"] == [(n, n, n) for n in (1024, 2048, 4096, 8192)]
    assert [s for s, t in full if t == "suite"] == list(L.SUITE)
    quick = L.shapes(quick=True)
    assert [s for s, t in quick if t == "sizes"] == [(1024, 1024, 1024), (2048, 2048, 2048)]
    assert all(2 * M * N * K <= 2 * 2048 ** 3 for (M, N, K), _ in quick)
    assert (512, 512, 512) in [s for s, _ in quick] and (4097, 4097, 4097) not in [s for s, _ in quick]


def test_plan_orders_each_kernel_by_cost():
    todo = L.plan(["a", "b"], L.shapes())
    assert [k for k, _, _ in todo] == ["a"] * 11 + ["b"] * 11
    costs = [L.flops(*s) for k, s, _ in todo if k == "a"]
    assert costs == sorted(costs)


def test_estimate_ms():
    assert L.estimate_ms(4096, 4096, 4096, 0.5) == pytest.approx(2 * 4096 ** 3 / 0.5e12 * 1e3)
    assert L.estimate_ms(1000, 1000, 1000, 2.0) == pytest.approx(1.0)


def test_capper_skips_naive_above_2048_from_its_own_speed():
    cap = L.Capper(max_launch_ms=200)
    for kernel, shape, _ in L.plan(["naive"], L.shapes()):
        if not cap.skip_reason(kernel, shape):
            cap.observe(kernel, shape, 0.5)  # the H200's naive kernel: about 0.5 TFLOP/s
    run = {s for s in ((2048, 2048, 2048), (1024, 1024, 1024)) if not cap.skip_reason("naive", s)}
    assert run == {(1024, 1024, 1024), (2048, 2048, 2048)}
    why = cap.skip_reason("naive", (4096, 4096, 4096))
    assert why.startswith("too slow") and "0.5 TFLOP/s" in why and "200 ms" in why
    assert cap.skip_reason("naive", (8192, 8192, 8192))
    # a fast kernel runs everywhere
    fast = L.Capper(max_launch_ms=200)
    fast.observe("final", (512, 512, 512), 40.0)
    assert fast.skip_reason("final", (8192, 8192, 8192)) == ""


def test_capper_prior_and_bad_observations():
    cap = L.Capper(max_launch_ms=100, prior={"slow": 0.01})
    assert cap.rate("slow") == 0.01 and cap.rate("other") == L.DEFAULT_PRIOR_TFLOPS
    assert "first guess" in cap.skip_reason("slow", (1024, 1024, 1024))
    cap.observe("slow", (64, 64, 64), float("nan"))
    cap.observe("slow", (64, 64, 64), 0.0)
    assert cap.rate("slow") == 0.01  # nan and zero are ignored


# ---------------------------------------------------------------- kernels
def test_main_kernels_one_per_chapter_in_book_order():
    names = L.main_kernels()
    specs = [get(n) for n in names]
    assert names[0] == "naive"
    assert not any(s.broken for s in specs)
    primary = [s for s in specs if s.name not in L.EXTRA_KERNELS]
    assert len({s.chapter for s in primary}) == len(primary)
    files = [s.file for s in specs]
    assert files == sorted(files)
    assert "double_buffering" in names and "double_buffering_racy" not in names


def test_params_for_final_uses_choose_config(monkeypatch):
    try:
        spec = get("final")
    except KeyError:
        pytest.skip("the final kernel is not registered")
    import helpers.final

    other = dict(spec.defaults(), STAGES=4 if spec.defaults()["STAGES"] != 4 else 3)
    monkeypatch.setattr(helpers.final, "choose_config", lambda M, N, K: other)
    params, origin = L.params_for("final", 4096, 4096, 4096)
    assert params == other and origin == "choose_config"
    assert L.params_for("naive", 10, 10, 10) == (get("naive").defaults(), "default")


def test_check_kernels_rejects_unknown_names():
    assert L.check_kernels(["naive"]) == ["naive"]
    with pytest.raises(SystemExit, match="registered"):
        L.check_kernels(["naive", "no_such_kernel"])


# --------------------------------------------------------------------- CLI
def test_parse_args(monkeypatch):
    monkeypatch.delenv("SGEMM_BOOK_QUICK", raising=False)
    a = L.parse_args([])
    assert not a.quick and a.kernels is None and a.json is None and a.max_ms == L.MAX_LAUNCH_MS
    a = L.parse_args(["--quick", "--kernels", "naive", "final", "--json", "x.json", "--max-ms", "50"])
    assert a.quick and a.kernels == ["naive", "final"] and a.json == "x.json" and a.max_ms == 50
    monkeypatch.setenv("SGEMM_BOOK_QUICK", "1")
    assert L.parse_args([]).quick
    with pytest.raises(SystemExit):
        L.parse_args(["--max-ms", "-1"])
    with pytest.raises(SystemExit):
        L.parse_args(["--bogus"])


def test_record_flag_only_for_the_full_run(monkeypatch):
    monkeypatch.delenv("SGEMM_BOOK_QUICK", raising=False)
    assert L.parse_args(["--record", "--json", "x.json"]).record
    assert not L.parse_args([]).record
    for extra in (["--quick"], ["--kernels", "naive"], ["--max-ms", "50"]):
        with pytest.raises(SystemExit):
            L.parse_args(["--record", *extra])
    monkeypatch.setenv("SGEMM_BOOK_QUICK", "1")
    with pytest.raises(SystemExit):
        L.parse_args(["--record"])


def test_main_refuses_without_gpu(monkeypatch, capsys):
    import helpers.mode

    monkeypatch.setattr(helpers.mode, "gpu_available", lambda: False)
    assert L.main(["--quick"]) != 0
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(__import__("helpers.mode").mode.gpu_available(), reason="a GPU is present")
def test_cli_exit_code_without_gpu():
    proc = subprocess.run([sys.executable, "-m", "helpers", "bench", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs a CUDA GPU" in proc.stderr


# ------------------------------------------------- a run with fake timings
RATES = {"naive": 0.5, "coalesced": 6.0}


def _fake_cublas(M, N, K, target_s=0.4):
    ms = 2 * M * N * K / 50e12 * 1e3
    return Timing(ms, ms, ms, 10, 1)


def _fake_measure(name, M, N, K, params=None, cublas_cache=None, target_s=0.4, **kw):
    spec = get(name)
    full = spec.validate(params)
    spec.check_shape(full, M, N, K)
    if name == "smem_tiling" and M == 512:
        raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure\nmore")
    if name == "coalesced" and K == 777:
        raise ConfigError("coalesced: K=777 must be a multiple of 4 (test)")
    tf = RATES.get(name, 20.0)
    ms = 2 * M * N * K / (tf * 1e12) * 1e3
    c = cublas_cache[(M, N, K)]
    wrong = name == "coalesced" and M == 1024
    return Result(name, full, M, N, K, ms, ms, ms, tf, c.ms, 2 * M * N * K / c.ms / 1e9,
                  float("inf") if wrong else 1e-7, not wrong, 10, 1)


@pytest.fixture
def fake_rows(monkeypatch):
    import helpers.bench

    monkeypatch.setattr(helpers.bench, "measure", _fake_measure)
    monkeypatch.setattr(helpers.bench, "measure_cublas", _fake_cublas)
    lines = []
    rows = L.run(["naive", "coalesced", "smem_tiling"], log=lines.append)
    return rows, lines


def test_run_rows_statuses(fake_rows):
    rows, lines = fake_rows
    assert len(rows) == 11 + 3 * 11  # cuBLAS per shape, then every (kernel, shape)
    by = {(r["kernel"], (r["M"], r["N"], r["K"])): r for r in rows}
    assert by[("naive", (2048, 2048, 2048))]["status"] == "measured"
    assert by[("naive", (4096, 4096, 4096))]["status"] == "skipped"
    assert by[("naive", (8192, 8192, 8192))]["status"] == "skipped"
    assert by[("coalesced", (8192, 8192, 8192))]["status"] == "measured"  # 183 ms < 200 ms
    assert by[("coalesced", (1000, 3000, 777))]["status"] == "refused"
    assert "multiple of 4" in by[("coalesced", (1000, 3000, 777))]["reason"]
    failed = by[("smem_tiling", (512, 512, 512))]
    assert failed["status"] == "failed" and "launch failure" in failed["reason"] and "more" not in failed["reason"]
    wrong = by[("coalesced", (1024, 1024, 1024))]
    assert wrong["ok"] is False and wrong["rel_err"] is None  # inf is stored as null (valid JSON)
    assert by[("cublas", (4096, 4096, 4096))]["tflops"] == pytest.approx(50)
    assert all(r["suite"] in ("sizes", "suite") for r in rows)
    assert by[("naive", (512, 512, 512))]["suite"] == "suite"
    assert by[("naive", (1024, 1024, 1024))]["pct_cublas"] == pytest.approx(1.0)
    assert any("skipped, too slow" in l for l in lines)
    import json

    json.dumps(rows, allow_nan=False)  # the recorder can store them


def test_format_table(fake_rows):
    rows, _ = fake_rows
    text = L.format_table(rows, peak_tflops=66.9)
    assert "TFLOP/s (% of cuBLAS) at n x n x n" in text
    assert "geomean" in text and "FP32 peak 66.9" in text
    naive_line = next(l for l in text.splitlines() if l.startswith("naive") and "n=" not in l and "skip" in l)
    assert naive_line.split()[1:3] == ["0.5", "(1%)"]
    suite_line = [l for l in text.splitlines() if l.startswith("naive")][1]
    assert suite_line.rstrip().endswith("(6/7)")  # 4097^3 skipped (275 ms > 200 ms)
    assert "WRONG" in text and "refused" in text and "failed" in text
    assert "not run:" in text and "naive n=4096: skipped, too slow" in text
    summ = {s["kernel"]: s for s in L.summary(rows, 66.9)}
    assert summ["naive"]["best_tflops"] == pytest.approx(0.5)
    assert summ["naive"]["pct_peak"] == pytest.approx(100 * 0.5 / 66.9)
    assert summ["coalesced"]["wrong"] == 1 and not summ["coalesced"]["all_correct"]
    assert summ["cublas"]["pct_cublas"] == pytest.approx(100)


def test_html_and_figures(fake_rows):
    rows, _ = fake_rows
    html = L.html_table(rows, 66.9)
    assert "<table" in html and "naive" in html and "cuBLAS" in html and "skip" in html and "too slow" in html
    fig = L.sizes_figure(rows, "fake rows")
    assert fig.layout.updatemenus[0].buttons[1].label == "% of cuBLAS"
    assert sum(1 for t in fig.data if t.visible) == 4  # three kernels and cuBLAS
    fig = L.suite_figure(rows, "fake rows")
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels[:2] == ["all kernels", "the last four steps"] and "naive" in labels
    pts = L.roofline_points(rows)
    assert {p["short"] for p in pts} == {"naive", "coalesced", "smem_tiling", "cuBLAS"}
    assert next(p for p in pts if p["short"] == "naive")["name"] == "naive (n=2048)"


def test_recorder_registered():
    from helpers.record import TABLE_RECORDERS

    assert TABLE_RECORDERS["leaderboard"] is L.record_rows


def test_declutter_keeps_labels_apart():
    pts = [{"name": "a", "short": "a", "intensity": 30.0, "tflops": 45.0},
           {"name": "b", "short": "b", "intensity": 31.0, "tflops": 44.0},
           {"name": "c", "short": "c", "intensity": 0.25, "tflops": 0.5}]
    out = L.declutter(pts)
    assert [p["short"] for p in out] == ["a", "", "c"]
