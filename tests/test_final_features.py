"""CPU tests of the final chapter's feature ladder: its plan (helpers/measure/final_features.py),
its figure, table and sentences (helpers/figures/final.py), and the note while it is not recorded."""
import re

import pytest

from helpers import hardware
from helpers.figures import final as F
from helpers.measure import final_features as L
from helpers.measure import sources
from helpers.measure.results import ResultSet
from helpers.runtime.specs import final as final_spec
from helpers.runtime.specs.final import SPEC

H200 = hardware.Device.from_datasheet("NVIDIA H200")
# every parameter the ladder may switch, and the value it has in the reduced kernel
OFF = dict(EDGES=0, PACK_A=0, PACK_B=0, SPLITK=1, STREAMK=0, GROUP=0, KU=0, REDUCE=0)


# ------------------------------------------------------------------ the plan
def test_the_reduced_kernel_has_every_feature_off():
    p = L.REDUCED
    assert all(p[k] == v for k, v in OFF.items())
    assert p["STAGES"] == min(x.allowed for x in SPEC.params if x.name == "STAGES")[0] == 2
    # chapter 10's block: 128 x 128 of four 64 x 64 warps, 16 x 8 per thread, k-slices of 8
    from helpers.runtime.specs import get
    w = get("warptiling").defaults()
    assert all(p[k] == w[k] for k in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    assert (p["A_T"], p["B_T"]) == (0, 0)          # A row-major: 4-byte copies


def test_every_step_is_a_valid_config_for_its_shape():
    for s, p in L.plan():
        full = SPEC.validate(p, device=H200)
        SPEC.check_shape(full, *s.shape, H200)
        if p["STREAMK"]:
            assert final_spec.stream_k_fits(p, *s.shape, H200)


def test_each_step_differs_from_its_base_by_its_own_feature():
    plan = L.plan()
    for i, (s, p) in enumerate(plan):
        b = L.base_of(i)
        if b is None:
            assert p == L.REDUCED and s.change == {}
            continue
        before = plan[b][1]
        changed = {k for k in p if p[k] != before[k]}
        assert changed == set(s.change), (s.name, changed)
        if not s.change:                          # a step with no change moves the same config to a new shape
            assert s.shape != plan[b][0].shape
        else:                                     # a feature is measured on the shape of the step it builds on
            assert s.shape == plan[b][0].shape


def test_the_ladder_is_cumulative_and_ends_at_the_choice_for_4096():
    plan = L.plan()
    square = [p for s, p in plan if s.shape == L.SQUARE]
    assert square[-1] == final_spec.choose_config(*L.SQUARE, H200)
    features = [s.name for s, _ in plan if s.change]
    assert features == list(L.FEATURES) and len(set(features)) == len(features)
    # every feature the reduced kernel leaves off is switched on by some step
    on = {k for s, _ in plan for k in s.change}
    assert {"EDGES", "PACK_A", "SPLITK", "STREAMK", "GROUP", "KU", "STAGES", "BN"} <= on


def test_each_feature_runs_on_a_shape_where_it_matters():
    by = {s.name: (s, p) for s, p in L.plan()}
    s, p = by["edges"]
    assert any(n % p["BM"] or n % p["BN"] for n in s.shape[:2])      # tiles over an edge of C
    s, p = by["split-K"]
    tiles = final_spec.tiles_of(p, *s.shape[:2])                     # a quarter of the SMs, before the split
    assert 4 * tiles <= H200.sm_count and tiles * p["SPLITK"] > 0.9 * H200.sm_count
    assert by["grouping"][1]["A_T"] == 0                              # A row-major before packing: 4-byte copies


def test_the_sweep_times_each_config_and_shape_once_briefly():
    src = sources.get(L.CHAPTER)
    items = src.items(H200)
    assert len(items) == len({(json_key(p), s) for _, p, s in items}) == len(L.STEPS)
    assert src.target_s <= 0.1
    assert L.CHAPTER in sources.AWAITING_FIRST_RECORD or L.CHAPTER in sources.required()


def json_key(p):
    return tuple(sorted(p.items()))


# ------------------------------------------------------------------ figure, table, sentences
def rows_for(tflops: list[float], cublas: float = 50.0, ok=True) -> list[dict]:
    out = []
    for (s, p), tf in zip(L.plan(), tflops):
        M, N, K = s.shape
        ms = 2 * M * N * K / (tf * 1e12) * 1e3
        out.append({"kernel": "final", "params": dict(p), "M": M, "N": N, "K": K, "tflops": tf,
                    "cublas_tflops": cublas, "ms": ms, "ms_p20": ms, "ms_p80": ms, "rel_err": 1e-6, "ok": ok})
    return out


TF = [20.0, 25.0, 30.0, 31.0, 31.1, 40.0, 36.0, 38.0, 10.0, 30.0, 33.0]


def run_of(rows):
    return ResultSet(L.CHAPTER, rows, H200, "recorded on NVIDIA H200, 2026-01-01", False)


def test_figure_has_a_bar_per_step_coloured_by_shape_with_percent_of_cublas():
    fig = F.feature_figure(run_of(rows_for(TF)))
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["n=4096", "n=4097", "1024x1024x16384"]
    assert sum(len(t.y) for t in bars) == len(L.STEPS)
    xs = [x for t in bars for x in t.x]
    assert xs == pytest.approx([100 * tf / 50.0 for tf in TF])
    # a feature's label carries its speed against its base; stream-K's base is the row before split-K
    text = {y: t for b in bars for y, t in zip(b.y, b.text)}
    assert text["+ 128 × 256 block tile"] == "50% (×1.25)"
    assert text["stream-K instead"] == "66% (×3.30)"
    assert text["the same, long K"] == "20%"
    line = [t for t in fig.data if t.type == "scatter"]
    assert line and list(line[0].x) == [100, 100]


def test_a_wrong_row_is_drawn_in_the_wrong_colour():
    rows = rows_for(TF)
    rows[3]["ok"] = False
    fig = F.feature_figure(run_of(rows))
    colours = [c for t in fig.data if t.type == "bar" for c in t.marker.color]
    assert colours.count(F.style.WRONG) == 1


def test_table_gives_the_change_only_for_features():
    t = F.feature_table(run_of(rows_for(TF)))
    by = {r["step"]: r for r in t.rows}
    assert by["reduced kernel"]["change"] == "" and by["the same, odd square"]["change"] == ""
    assert by["+ edge tiles moved back"]["change"] == "+6%"
    assert by["+ split-K by 4"]["% of cuBLAS"] == 60.0


def test_sentences_are_computed_from_the_rows():
    rs = run_of(rows_for(TF))
    assert "from 20.0 to 25.0 TFLOP/s (+25%), 50% of cuBLAS" in str(F.feature_text(rs, "block tile"))
    assert "left the kernel level" in str(F.feature_text(rs, "grouping"))      # 31.0 -> 31.1
    assert "from 10.0 to 33.0" in str(F.feature_text(rs, "stream-K"))
    assert "matched cuBLAS" in str(F.reduced_text(rs)) and "40% of cuBLAS" in str(F.reduced_text(rs))
    assert "from 40% to 80% of cuBLAS" in str(F.ladder_summary_text(rs))
    assert "all matched" in str(F.ladder_correctness_text(rs))


def test_missing_rows_give_a_sentence_not_an_error():
    rs = run_of(rows_for(TF)[:1])
    assert "No row" in str(F.feature_text(rs, "edges"))


def test_not_recorded_gives_the_note_with_the_command(monkeypatch):
    monkeypatch.setattr(hardware, "is_live", lambda: False)
    monkeypatch.setattr(F, "_recorded_or_none", lambda chapter: None)
    assert F.ladder_run() is None
    for out in (F.feature_figure(None), F.feature_table(None), F.feature_text(None, "edges"), F.reduced_text(None)):
        assert re.search(r"Not recorded yet.*python -m helpers record --chapter final_features", str(out))
