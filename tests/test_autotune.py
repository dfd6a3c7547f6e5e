"""CPU tests of the autotuning chapter's figures, tables and sentences (helpers/figures/autotuning.py),
on hand-made rows in the format of a recorded search (helpers/measure/autotune.py)."""
import math

import pytest

from helpers import hardware
from helpers.figures import autotuning as T
from helpers.figures import style
from helpers.measure import autotune as tuning
from helpers.runtime.specs import get
from helpers.tables import Text

H200 = hardware.Device.from_datasheet("NVIDIA H200")
FINAL = get("final")
D = FINAL.defaults()


def timed(params, tflops, cublas=51.0, ok=True, warps=8, regs=200, band=0.002, **flags):
    ms = 2 * 4096 ** 3 / (tflops * 1e12) * 1e3
    return {"kernel": "final", "params": dict(D, **params), "M": 4096, "N": 4096, "K": 4096, "tflops": tflops,
            "cublas_tflops": cublas, "ms": ms, "ms_p20": ms * (1 - band), "ms_p80": ms * (1 + band), "ok": ok,
            "rel_err": 0.0 if ok else 0.5, "status": "timed", "reason": "", "registers": regs, "active_warps": warps,
            "threads": 256, "default": flags.get("default", False), "chosen": flags.get("chosen", False)}


def search():
    return [timed({}, 47.0, default=True, chosen=True, warps=8),
            timed({"BN": 128}, 45.0, warps=16),
            timed({"BN": 128, "STAGES": 3}, 46.9, warps=12, band=0.01),
            timed({"BM": 64, "WM": 32, "TM": 8}, 40.0, warps=16),
            timed({"BK": 16}, 44.0, ok=False),
            {"kernel": "final", "params": dict(D, BK=8), "M": 4096, "N": 4096, "K": 4096, "status": "pruned",
             "reason": "spills registers to local memory", "threads": 512, "registers": 128, "spill_bytes": 104,
             "active_warps": 16}]


# ------------------------------------------------------------------ the space
def test_space_table_and_count():
    t = T.space_table(FINAL)
    assert [r["parameter"] for r in t.rows] == FINAL.param_names
    assert t.rows[0]["default"] == D["BM"]
    total = math.prod(len(p.allowed) for p in FINAL.params)
    assert f"**{total:,}**" in str(T.space_text(FINAL))


def test_rules_table_accounts_for_every_combination():
    naive = get("naive")
    t = T.rules_table(naive, H200)
    counts = [r["configs"] for r in t.rows]
    assert sum(counts) == tuning.space_size(naive)
    assert t.rows[-1]["removed because"] == "(obey every rule)"
    assert t.rows[-1]["configs"] == len(tuning.rule_funnel(naive, H200)[0])


@pytest.mark.parametrize("name", ["thread_tile_2d", "vectorized", "warptiling"])
def test_the_rule_funnel_is_a_plain_loop_over_the_space(name):
    # the decision tree decides whole subtrees at once; it must give what checking every
    # combination in allowed-value order gives: the same valid configs in the same order, and
    # every invalid one counted under the first rule it breaks
    import itertools

    spec = get(name)
    names = spec.param_names
    valid, broken = tuning.rule_funnel(spec, H200)
    plain, counted = [], 0
    for values in itertools.product(*(p.allowed for p in spec.params)):
        c = dict(zip(names, values))
        if tuning.first_problem(spec, c, H200, resolved=True) is None:
            plain.append(c)
        else:
            counted += 1
    assert valid == plain and sum(broken.values()) == counted == tuning.space_size(spec) - len(plain)


def test_a_config_under_the_rules_records_what_they_read():
    # the decision tree branches on what a rule read: a read must be recorded however it is made
    cfg = tuning._Reads({"BM": 64, "BN": 32, "BK": 8})
    assert cfg["BN"] == 32 and cfg.get("BK") == 8 and cfg.get("XX", 5) == 5 and "BM" in cfg
    assert set(cfg.read) == {"BN", "BK"} and len(cfg) == 3
    assert {**cfg} == {"BM": 64, "BN": 32, "BK": 8} == cfg          # walking all of it reads all of it
    with pytest.raises(KeyError):
        tuning._Reads({"BM": 64})["BN"]


@pytest.mark.parametrize("name", ["vectorized", "warptiling"])
def test_valid_counts_count_the_funnels_configs(name):
    # the funnel keeps its valid configs as positions in the allowed values; the counts must be
    # those of the dicts rule_funnel gives
    spec = get(name)
    valid, _ = tuning.rule_funnel(spec, H200)
    first = spec.params[0]
    for fixed in ({}, tuning.pinned(spec, spec.param_names[:2]), {first.name: first.allowed[-1]},
                  {first.name: -1}):                                  # a value not allowed: none
        held = [c for c in valid if all(c[k] == v for k, v in fixed.items())]
        assert tuning.valid_counts(spec, H200, fixed) == (len(valid), len(held))
        values = tuning.held_values(spec, H200, fixed)
        assert all(set(values[p.name]) == {c[p.name] for c in held} for p in spec.params)
    assert 0 < tuning.valid_counts(spec, H200, tuning.pinned(spec, spec.param_names[:2]))[1] < len(valid)


def test_the_stored_counts_are_those_of_todays_rules():
    # the chapter reads the tuned kernel's counts (and the final kernel's, for a search recorded on it) from helpers/measure/funnel_counts.json; after a
    # change to the rules, the limits or the funnel, `python -m helpers funnels` stores them again
    from helpers.measure import datafile

    devices = [hardware.Device.from_record(datafile.load(d).chapter("autotuning")["device"])
               for d in datafile.device_files() if datafile.load(d).has("autotuning")]
    assert devices
    for device in devices:
        for spec in (get(k) for k in tuning.COUNTED_KERNELS):
            entry = tuning._stored_counts(spec, device)
            assert entry, f"stale counts of {spec.name} for {device.name}: run `python -m helpers funnels`"
            asked = [h["fixed"] for h in entry["holding"]]
            assert {} in asked and tuning.pinned(spec, tuning.SWEEP_PINNED) in asked
            valid, held, values = entry["holding"][asked.index({})]["counts"]
            assert valid == held > 0 and sum(n for _, n in entry["broken"]) + valid == tuning.space_size(spec)


def test_stored_counts_are_the_walks_and_only_used_while_fresh(tmp_path, monkeypatch):
    spec = get("warptiling")
    fixed = tuning.pinned(spec, spec.param_names[:2])
    walked = (tuning.rules_broken(spec, H200), tuning.valid_counts(spec, H200, fixed),
              tuning.held_values(spec, H200, fixed))
    monkeypatch.setattr(tuning, "STORED_COUNTS", tmp_path / "counts.json")
    tuning.store_counts(spec, H200, ({}, fixed))
    monkeypatch.setattr(tuning, "_RULE_FUNNELS", {})             # forget the walk
    monkeypatch.setattr(tuning, "_HOLDING", {})
    monkeypatch.setattr(tuning, "_rule_funnel", lambda *a: pytest.fail("walked the space though counts were stored"))
    stored = (tuning.rules_broken(spec, H200), tuning.valid_counts(spec, H200, fixed),
              tuning.held_values(spec, H200, fixed))
    assert stored == walked and list(stored[0]) == list(walked[0])        # the same rules, in the same order
    # a reader's GPU of the same model at another clock reads them; another model walks its own space
    import dataclasses
    assert tuning._stored_counts(spec, dataclasses.replace(H200, clock_mhz=1500, source="this GPU"))
    assert tuning._stored_counts(spec, hardware.Device.from_datasheet("NVIDIA A100-SXM4-40GB")) is None
    # code that changed since: the stored counts are not used
    monkeypatch.setattr(tuning, "_HOLDING", {})
    monkeypatch.setattr(tuning, "funnel_fingerprint", lambda spec, device: "another")
    assert tuning._stored_counts(spec, H200) is None
    with pytest.raises(pytest.fail.Exception, match="walked the space"):
        tuning.rules_broken(spec, H200)


def test_compile_text_without_a_compiler(monkeypatch):
    monkeypatch.setattr(tuning, "analyse", lambda spec, p, device: {"note": "not compiled offline: no NVRTC"})
    assert "no NVRTC" in str(T.compile_text(FINAL, None, H200))


# ------------------------------------------------------------------ figures
def test_funnel_figure_bars_and_shares():
    stages = [("all", 1000), ("rules", 100), ("timed", 10)]
    fig = T.funnel_figure(stages, "src")
    assert list(fig.data[0].x) == [1000, 100, 10]
    assert list(fig.data[0].text) == ["1,000", "100 (10%)", "10 (10%)"]
    assert list(fig.layout.xaxis.tickvals) == [1, 10, 100, 1000]
    names = [a for a in fig.layout.annotations if a.text in ("all", "rules", "timed")]
    # each name on its bar's top edge (rows run down), where no bar can hide it
    assert [(a.y, a.yanchor) for a in names] == [(i - fig.data[0].width / 2, "bottom") for i in range(3)]
    assert list(fig.layout.xaxis.ticktext) == ["1", "10", "100", "1,000"]
    assert fig.layout.yaxis.showticklabels is False


def test_parallel_figure_has_only_varying_parameters():
    fig = T.parallel_figure(search(), "src")
    labels = [d.label for d in fig.data[0].dimensions]
    assert labels == ["BM", "BN", "WM", "TM", "STAGES", "TFLOP/s"]      # the varying parameters and the speed only
    assert fig.data[0].line.showscale and fig.data[0].line.colorbar.title.text == "TFLOP/s (colour)"
    assert len(fig.data[0].dimensions[-1].values) == 4                         # the wrong config is not drawn
    # the upright axis names stand between the title's lines and the plot, not over the title
    from helpers.figures import style
    title = style.title_margin(fig.layout.title.text, fig.layout.title.subtitle.text)
    assert fig.layout.margin.t >= title + style.text_px("TFLOP/s")


def test_heatmap_figure_steps_and_best_cells():
    fig = T.heatmap_figure(search(), "BM", "BN", "src", title="t")
    # the others that vary among correct configs: WM, TM, STAGES (two values each): 1 + 6 steps, a slider
    labels = [s.label for s in fig.layout.sliders[0].steps]
    assert labels == ["best over the others", "WM=32", "WM=64", "TM=8", "TM=16", "STAGES=2", "STAGES=3"]
    first = fig.data[0]
    z = {(y, x): v for y, zs in zip(first.y, first.z) for x, v in zip(first.x, zs)}
    assert z[("256", "128")] == 47.0 and z[("128", "128")] == 46.9 and z[("256", "64")] == 40.0


def test_ranked_figure_colours_by_kind():
    fig = T.ranked_figure(search(), "src")
    kinds = {t.name: t for t in fig.data}
    assert set(kinds) == {"other configs", "the dispatcher's choice", "wrong result", "cuBLAS, same run"}
    assert kinds["wrong result"].marker.color == style.WRONG
    assert list(kinds["the dispatcher's choice"].x) == [4]                       # the fastest: last of five


def test_roofline_figure_draws_the_cloud_under_the_named_points():
    fig = T.roofline_figure(search(), H200, "src")
    assert fig.data[1].name == "every timed config" and len(fig.data[1].x) == 4
    assert fig.data[2].name.startswith("best: ")
    assert max(fig.data[0].y) == pytest.approx(H200.fp32_tflops)



def test_roofline_figure_keeps_a_best_and_a_default_of_one_tile_apart():
    # the same block tile: one intensity, nearly one speed; a ring over the dot, names above and below
    rows = search()
    rows[0] = dict(rows[0], default=False)                # the best (47.0) is not the default
    rows[2] = dict(rows[2], params=dict(rows[0]["params"], STAGES=4), default=True)   # the best's tile, 46.9
    fig = T.roofline_figure(rows, H200, "src")
    default, best = (next(t for t in fig.data if t.name and t.name.startswith(w)) for w in ("default: ", "best: "))
    assert default.x == best.x and list(fig.data).index(best) > list(fig.data).index(default)
    assert (best.marker.symbol, default.textposition, best.textposition) == ("circle-open", "bottom center",
                                                                             "top center")


# ------------------------------------------------------------------ sentences
def test_best_text_ranks_and_ties():
    text = str(T.best_text(search()))
    assert "**47.0 TFLOP/s**" in text and "92% of cuBLAS" in text
    assert "It is also the default" in text and "It is also the dispatcher's choice" in text
    assert "one other config's band reaches" in text    # 46.9 with a 1% band reaches into the best's band
    alone = [r for r in search() if r.get("tflops") != 46.9]
    assert "no other config's band reaches into it" in str(T.best_text(alone))


def test_best_text_for_a_default_that_is_not_the_best():
    rows = search()
    rows[0]["default"] = False
    rows[1]["default"] = True
    text = str(T.best_text(rows))
    assert "ranks 3 of 4" in text and f"{100 * (47.0 / 45.0 - 1):.1f}% behind" in text


def test_warps_text_rank_correlation():
    rows = [timed({"BN": 64 * i}, 40.0 + i, warps=4 * i) for i in (1, 2, 4)]
    assert "+1.00" in str(T.warps_text(rows))
    rows = [timed({"BN": 64 * i}, 40.0 + i, warps=16 // i) for i in (1, 2, 4)]
    assert "-1.00" in str(T.warps_text(rows))
    assert [r["TFLOP/s"] for r in T.warps_table(rows, 2).rows] == [44.0, 42.0]


def test_pruned_and_timing_text():
    rows = search()
    assert T.pruned_table(FINAL, rows).rows[0]["spills (B)"] == 104
    assert str(T.timing_text(rows)).startswith("5 configs timed at n = 4096: 4 correct, 1 wrong")


def test_tune_here_without_a_gpu_is_a_sentence(monkeypatch):
    monkeypatch.setattr(hardware, "is_live", lambda: False)
    out = T.tune_here("final", sample=24)
    assert isinstance(out, Text) and "24 survivors" in str(out)


# ------------------------------------------------------------------ the chapter's prose, against the recorded search
@pytest.fixture(scope="module")
def recorded_search():
    from helpers.figures.leaderboard import recorded
    from helpers.measure import datafile

    try:
        return recorded("autotuning")
    except datafile.DataError as exc:
        pytest.skip(f"no recorded search: {exc}")


def test_most_combinations_are_not_programs():
    # "Most combinations are not programs at all": the 32-lanes rule alone removes most of them
    # (it involves WM, WN, TM, TN only, so its share over those four is its share of the whole space)
    import itertools

    allowed = {p.name: p.allowed for p in FINAL.params}
    combos = list(itertools.product(*(allowed[k] for k in ("WM", "WN", "TM", "TN"))))
    broken = sum(1 for wm, wn, tm, tn in combos if (wm // tm) * (wn // tn) != 32 or wm % tm or wn % tn)
    assert broken > len(combos) / 2


def test_big_blocks_are_refused_at_the_register_budget():
    # Step 1's second refusal and exercise 2: 512 threads of 16 x 4 tiles exceed the budget, 128 threads do not
    import helpers

    big = dict(BM=128, BN=256, BK=8, WM=64, WN=32, TM=16, TN=4, STAGES=3)
    text = str(helpers.validate("final", **big))
    assert text.startswith("**Refused.**") and "registers per thread" in text
    assert f"may use {helpers.device().register_budget(512)}" in text
    small = dict(big, BM=64, BN=128)
    assert FINAL.threads(dict(D, **small)) == 128
    assert str(helpers.validate("final", **small)).startswith("**Valid**")


def test_the_fastest_config_is_not_the_one_with_most_warps(recorded_search):
    # exercise 1: "the fastest configs are not the ones with the most warps"
    good = tuning.timed_rows(recorded_search.rows)
    best = tuning.best_row(recorded_search.rows)
    assert best["active_warps"] < max(r["active_warps"] for r in good)


def test_every_timed_config_was_checked(recorded_search):
    # "A config whose result is wrong is recorded as wrong and never chosen"
    best = tuning.best_row(recorded_search.rows)
    assert best["ok"] and all(r.get("rel_err") is not None for r in recorded_search.rows if r["status"] == "timed")


def test_pruned_table_without_pruned_configs_is_a_sentence():
    rows = [r for r in search() if r["status"] != "pruned"]
    assert "removed no config" in str(T.pruned_table(FINAL, rows))


def test_search_text_counts():
    from helpers.measure.results import ResultSet

    rs = ResultSet("autotuning", search(), H200, "recorded on Test GPU, 2026-01-01", False)
    text = str(T.search_text(rs))
    assert "6 configs analysed offline, 5 of them timed" in text and "Test GPU" in text
