"""CPU tests for the autotuner (helpers/autotune.py): rule funnel, sampling, offline pruning, tuning logic."""
import json
import math

import pytest

from helpers import autotune as A
from helpers.bench import Result
from helpers.registry import ConfigError, get


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path / "cache"))


# ------------------------------------------------------------- rule funnel
def test_reason_groups_messages_without_numbers():
    assert A._reason("TM=8 must divide BM=4") == "TM must divide BM"
    assert A._reason("2048 threads per block exceeds the limit of 1024.") == "N threads per block exceeds the limit of N"
    assert "float4" in A._reason("the 64 float4 of a tile")


def test_rule_funnel_counts_add_up():
    spec = get("naive")
    valid, pruned = A.rule_funnel(spec)
    assert A.space_size(spec) == 11 * 11
    assert len(valid) == len(list(spec.space()))
    assert len(valid) + sum(pruned.values()) == 121
    assert all(spec.is_valid(c) for c in valid)
    assert {A._reason(r) for r in pruned} == {"N threads per block exceeds the limit of N",
                                             "N threads per block is not a whole number of warps"}
    assert all(any(ch.isdigit() for ch in r) for r in pruned)  # keyed by a concrete first example


def test_first_problem_reports_the_real_rule_before_a_crashing_one():
    try:
        spec = get("final")
    except KeyError:
        pytest.skip("the final kernel is not registered")
    cfg = dict(spec.defaults(), BM=64, WM=128)  # a warp tile bigger than the block tile
    msg = A.first_problem(spec, cfg)
    assert "WM=128 must divide BM=64" in msg
    assert A.first_problem(spec, spec.defaults()) is None


def test_sample_configs_reproducible_keeps_and_order():
    configs = [{"A": i} for i in range(50)]
    s1 = A.sample_configs(configs, 10, seed=3, keep=[{"A": 42}, {"A": 42}, {"A": 999}])
    assert s1 == A.sample_configs(configs, 10, seed=3, keep=[{"A": 42}])
    assert len(s1) == 10 and {"A": 42} in s1 and {"A": 999} not in s1
    assert [c["A"] for c in s1] == sorted(c["A"] for c in s1)
    assert len({json.dumps(c) for c in s1}) == 10
    assert A.sample_configs(configs, None) == configs and A.sample_configs(configs[:3], 10) == configs[:3]
    assert A.sample_configs(configs, 10, seed=4) != A.sample_configs(configs, 10, seed=3)


def test_pinned():
    spec = get("thread_tile_2d")
    assert A.pinned(spec, ("BK", "SPLITK")) == {"BK": spec.defaults()["BK"]}


# ---------------------------------------------------------- offline pruning
def test_analyse_prunes_on_occupancy_and_registers(monkeypatch):
    spec = get("thread_tile_2d")
    d = spec.defaults()
    fake = {"registers": 128, "static_smem": 16384, "spill_bytes": 0, "stack_bytes": 0, "error": ""}
    monkeypatch.setattr(A, "compile_report", lambda *a, **k: dict(fake))
    c = A.analyse(spec, d)
    assert c["reason"] == "" and c["threads"] == 256 and c["smem"] == 16384
    assert c["active_warps"] == 16 and c["limiter"] == "registers"  # 65536 / (128 * 256) = 2 blocks
    assert A.analyse(spec, d, min_occupancy_warps=32)["reason"] == "fewer than 32 resident warps per SM"
    assert A.analyse(spec, d, max_regs=96)["reason"] == "more than 96 registers per thread"
    monkeypatch.setattr(A, "compile_report", lambda *a, **k: dict(fake, spill_bytes=8))
    assert A.analyse(spec, d)["reason"] == "spills registers to local memory"
    assert A.analyse(spec, d, require_no_spills=False)["reason"] == ""
    monkeypatch.setattr(A, "compile_report", lambda *a, **k: dict(fake, registers=None, error="boom"))
    c = A.analyse(spec, d)
    assert c["reason"] == "does not compile" and c["error"] == "boom"


def test_candidates_with_fake_compiles(monkeypatch):
    spec = get("thread_tile_2d")

    def report(spec_, params, arch="sm_90", use_cache=True):
        regs = 40 + 4 * params["TM"] * params["TN"]
        return {"registers": min(regs, 255), "static_smem": 4 * (params["BM"] + params["BN"]) * params["BK"],
                "spill_bytes": 16 if regs > 255 else 0, "stack_bytes": 0,
                "error": "error: nope" if params["BK"] == 4 and params["TM"] == 1 else ""}

    monkeypatch.setattr(A, "compile_report", report)
    f = A.candidates(spec, sample=200, seed=1, workers=2)
    counts = [n for _, n in f.stages]
    assert counts[0] == 2500 and counts == sorted(counts, reverse=True)
    assert counts[2] == 200 and f.sampled
    assert len(f.survivors) + len(f.rejected) == 200 == counts[2]
    assert counts[-1] == len(f.survivors)
    assert spec.defaults() in [c["params"] for c in f.survivors + f.rejected]  # always kept in the sample
    assert sum(f.pruned.values()) == 2500 - len(f.survivors) - (len(A.rule_funnel(spec)[0]) - 200)
    assert "does not compile" in f.pruned or "spills registers to local memory" in f.pruned
    assert "→" in str(f) and "<table" in f._repr_html_()
    fixed = A.candidates(spec, fixed={"BK": 8}, sample=20, workers=2)
    assert any(s.startswith("with BK=8 fixed") for s, _ in fixed.stages)
    assert all(c["params"]["BK"] == 8 for c in fixed.survivors if c["params"] != spec.defaults())
    with pytest.raises(ConfigError):
        A.candidates(spec, fixed={"BK": 5}, sample=5)


def test_offline_compile_and_disk_cache(monkeypatch):
    """The real NVRTC path on two tiny kernels, then the cache answers without compiling."""
    pytest.importorskip("cuda.bindings")
    spec = get("smem_tiling")
    f = A.candidates(spec, workers=2)
    assert len(f.survivors) + len(f.rejected) == len(list(spec.space()))
    assert f.survivors and all(c["registers"] and c["active_warps"] for c in f.survivors)
    files = list(A.cache_dir().glob("*.json"))
    assert len(files) == len(list(spec.space()))
    import helpers.resources

    def no_compile(*a, **k):
        raise AssertionError("should have come from the cache")

    monkeypatch.setattr(helpers.resources, "resources", no_compile)
    again = A.candidates(spec, workers=2)
    assert [c["registers"] for c in again.survivors] == [c["registers"] for c in f.survivors]


def test_cache_key_follows_source_and_params(monkeypatch):
    spec = get("naive")
    k1 = A.cache_key(spec, {"BX": 32, "BY": 32})
    assert k1 == A.cache_key(spec, {"BX": 32, "BY": 32})
    assert k1 != A.cache_key(spec, {"BX": 16, "BY": 32})
    monkeypatch.setattr(type(spec), "source", lambda self: "// changed\n")
    assert k1 != A.cache_key(spec, {"BX": 32, "BY": 32})


# ------------------------------------------------------------ live tuning
def test_tune_refuses_without_gpu(monkeypatch):
    import helpers.mode

    monkeypatch.setattr(helpers.mode, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        A.tune("naive", 1024, [{"BX": 32, "BY": 32}])


def _fake_measure(spec, M, N, K, params=None, cublas_cache=None, target_s=0.4, **kw):
    full = spec.validate(params)
    if full["BX"] == 4:
        raise RuntimeError("NVRTC could not compile sgemm_naive<4, 8>\nkernel.cu(3): error: expected a ';'")
    tf = {(8, 8): 2.0, (16, 16): 1.0, (32, 8): 9.0}.get((full["BX"], full["BY"]), 0.5)
    wrong = (full["BX"], full["BY"]) == (32, 8)  # the fastest one is wrong: never picked
    return Result(spec.name, full, M, N, K, 1.0, 1.0, 1.0, tf, 0.1, 50.0,
                  math.inf if wrong else 1e-7, not wrong, 5, 1)


def test_tune_picks_fastest_correct(monkeypatch, capsys):
    import helpers.bench
    import helpers.mode

    monkeypatch.setattr(helpers.mode, "gpu_available", lambda: True)
    monkeypatch.setattr(helpers.bench, "measure", _fake_measure)
    configs = [{"BX": 16, "BY": 16}, {"BX": 32, "BY": 8}, {"BX": 8, "BY": 8}, {"BX": 4, "BY": 8}]
    res = A.tune("naive", 1024, configs, parallel_compile=False)
    assert res.best["params"] == {"BX": 8, "BY": 8}
    status = {json.dumps(r["params"]): r["status"] for r in res.rows}
    assert status[json.dumps({"BX": 4, "BY": 8})] == "failed"
    failed = next(r for r in res.rows if r["status"] == "failed")
    assert "expected a ';'" in failed["reason"]
    wrong = next(r for r in res.rows if r["params"] == {"BX": 32, "BY": 8})
    assert wrong["ok"] is False and wrong["rel_err"] is None
    out = capsys.readouterr().out
    assert "[4/4]" in out and "best: BX=8 BY=8: 2.0 TFLOP/s, 4% of cuBLAS" in out and "WRONG" in out
    assert "1 wrong, 1 failed" in res.summary()
    assert "<table" in res._repr_html_()
    json.dumps(res.rows, allow_nan=False)


def test_tune_budget_stops_early(monkeypatch):
    import helpers.bench
    import helpers.mode

    monkeypatch.setattr(helpers.mode, "gpu_available", lambda: True)
    monkeypatch.setattr(helpers.bench, "measure", _fake_measure)
    configs = [{"BX": 16, "BY": 16}, {"BX": 8, "BY": 8}]
    res = A.tune("naive", (100, 200, 300), configs, progress=False, budget_s=0.0, parallel_compile=False)
    assert len(res.rows) == 1 and res.skipped == configs[1:]
    assert res.rows[0]["M"] == 100 and res.rows[0]["K"] == 300


# ---------------------------------------------------------- recorded sweep
def _sweep_rows():
    rows = []
    for i, (bm, bn, stages) in enumerate([(64, 64, 2), (64, 128, 3), (128, 128, 3), (128, 64, 2), (128, 128, 2)]):
        tf = 10.0 + 5 * i
        rows.append({"kernel": "k", "params": {"BM": bm, "BN": bn, "STAGES": stages}, "M": 4096, "N": 4096,
                     "K": 4096, "ms": 1.0, "ms_p20": 0.9, "ms_p80": 1.1, "tflops": tf, "cublas_ms": 1.0,
                     "cublas_tflops": 50.0, "rel_err": 1e-7, "ok": i != 4, "status": "timed", "reason": "",
                     "registers": 100 + i, "active_warps": 8, "default": i == 2})
    rows.append(dict(rows[0], params={"BM": 256, "BN": 256, "STAGES": 4}, status="pruned",
                     reason="spills registers to local memory", tflops=None, ok=None))
    rows.append(dict(rows[0], params={"BM": 256, "BN": 64, "STAGES": 4}, status="not timed", tflops=None, ok=None))
    return rows


def test_best_row_ignores_wrong_and_untimed():
    assert A.best_row(_sweep_rows())["params"] == {"BM": 128, "BN": 64, "STAGES": 2}
    assert A.best_row([]) is None


def test_funnel_from_rows():
    spec = get("naive")
    stages = dict(A.funnel_from_rows(spec, _sweep_rows()))
    assert stages["combinations of the allowed values"] == 121
    assert stages["sampled for the offline compile"] == 7
    assert stages["no register spills"] == 6
    assert stages["timed at n=4096"] == 5 and stages["correct"] == 4


def test_figures_build():
    rows = _sweep_rows()
    fig = A.parallel_figure(rows, "fake")
    labels = [d.label for d in fig.data[0].dimensions]
    assert labels[:3] == ["BM", "BN", "STAGES"] and labels[-2:] == ["TFLOP/s", "% of cuBLAS"]
    assert len(fig.data[0].dimensions[0].values) == 4  # the wrong config is not drawn
    fig = A.heatmap_figure(rows, "BM", "BN", "fake")
    buttons = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert buttons == ["best over the others", "STAGES=2", "STAGES=3"]
    z = fig.data[0].z
    assert max(v for row in z for v in row if v is not None) == 25.0
    A.funnel_figure(A.funnel_from_rows(get("naive"), rows), "fake")
    fig = A.ranked_figure(rows, "fake")
    assert list(fig.data[0].y) == [10.0, 15.0, 20.0, 25.0, 30.0]


def test_recorder_and_tuned_kernel():
    from helpers.record import TABLE_RECORDERS
    from helpers.registry import REGISTRY

    assert TABLE_RECORDERS["autotuning"] is A.record_rows
    name = A.tuned_kernel()
    assert name in A.TUNED_KERNELS and name in REGISTRY


def test_candidates_budget_keeps_the_default_first(monkeypatch):
    import time as _time

    spec = get("thread_tile_2d")
    seen = []

    def slow(spec_, params, arch="sm_90", use_cache=True):
        seen.append(dict(params))
        _time.sleep(0.05)
        return {"registers": 64, "static_smem": 1024, "spill_bytes": 0, "stack_bytes": 0, "error": ""}

    monkeypatch.setattr(A, "compile_report", slow)
    f = A.candidates(spec, sample=60, workers=1, budget_s=0.2)
    assert seen[0] == spec.defaults()
    assert 1 <= len(f.survivors) < 60
    assert f.stages[-2][0].startswith("compiled within") or any(s.startswith("compiled within") for s, _ in f.stages)
