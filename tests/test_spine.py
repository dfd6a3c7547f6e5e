"""CPU tests of the spine: data schema and loader, model, plots, mode, record, CLI."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import data, model, plots
from helpers.data import DataError, validate

ROOT = Path(__file__).resolve().parents[1]


def good_doc():
    row = {"kernel": "naive", "params": {"BX": 32, "BY": 32}, "M": 64, "N": 64, "K": 64, "ms": 0.5,
           "ms_p20": 0.4, "ms_p80": 0.6, "tflops": 0.001, "cublas_ms": 0.01, "cublas_tflops": 0.05,
           "rel_err": 1e-7, "ok": True}
    return {"schema": 1,
            "device": {"name": "Test GPU", "compute_capability": "9.0", "sm_count": 132, "driver": "13.0",
                       "cuda_runtime": "13.2", "cupy": "14.2.0"},
            "chapters": {"naive": {"recorded": "2026-11-22T00:00:00+00:00", "git_commit": "abc",
                                   "command": "python -m helpers record", "kind": "timing", "rows": [row]}}}


# ------------------------------------------------------------------ data
def test_committed_data_validates():
    files = sorted((ROOT / "book" / "data").glob("*.json"))
    assert files, "book/data has no recorded file"
    for f in files:
        doc = validate(json.loads(f.read_text()), f.name)
        assert "naive" in doc["chapters"]
        assert all(r["ok"] for r in doc["chapters"]["naive"]["rows"])


@pytest.mark.parametrize("breakage,message", [
    (lambda d: d.pop("device"), "missing key 'device'"),
    (lambda d: d.update(schema=2), "schema 2"),
    (lambda d: d["chapters"]["naive"]["rows"][0].pop("tflops"), "missing key 'tflops'"),
    (lambda d: d["chapters"]["naive"]["rows"][0].update(tflops=-1.0), "positive number"),
    (lambda d: d["chapters"]["naive"]["rows"][0].update(M="64"), "rows[0].M"),
    (lambda d: d["chapters"]["naive"].update(kind="movie"), "'timing' or 'table'"),
])
def test_malformed_data_is_refused_with_a_clear_message(breakage, message):
    doc = good_doc()
    validate(doc)
    breakage(doc)
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("(", r"\(")):
        validate(doc, "test.json")


def test_loader_refuses_bad_json_and_missing_chapters(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match="no recorded data"):
        data.load()
    (tmp_path / "Test_GPU.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        data.load()
    (tmp_path / "Test_GPU.json").write_text(json.dumps(good_doc()))
    rec = data.load()
    assert rec.label("naive") == "recorded on Test GPU, 2026-11-22"
    with pytest.raises(DataError, match="record --chapter coalescing"):
        rec.rows("coalescing")


def test_results_recorded_mode_and_where(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")
    (tmp_path / "Test_GPU.json").write_text(json.dumps(good_doc()))
    rs = data.results("naive")
    assert not rs.live and rs.source.startswith("recorded on Test GPU")
    assert len(rs.where(BX=32, M=64)) == 1 and rs.where(BX=16) == []


# ------------------------------------------------------------------ mode
def test_mode_forced_and_invalid(monkeypatch):
    from helpers import mode

    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")
    assert mode.mode() == "recorded" and not mode.is_live()
    monkeypatch.setenv("SGEMM_BOOK_MODE", "fast")
    with pytest.raises(ValueError, match="live' or 'recorded"):
        mode.mode()
    if not mode.gpu_available():
        monkeypatch.setenv("SGEMM_BOOK_MODE", "live")
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            mode.mode()


# ------------------------------------------------------------------ model
def test_model_numbers():
    assert model.flops(2, 3, 4) == 48
    assert model.min_bytes(10, 20, 30) == 4 * (300 + 600 + 200)
    # 128x128 tiles at n=4096: 4*n^3*(2/128) + 4*n^2 bytes
    n = 4096
    assert model.tiled_bytes(n, n, n, 128, 128) == pytest.approx(4 * n**3 * 2 / 128 + 4 * n * n)
    # naive: each thread reads 2K floats for 2K FLOPs -> about 0.25 FLOP/byte
    assert model.intensity("naive", None, n, n, n) == pytest.approx(0.25, rel=1e-3)
    h100 = model.ceilings({"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"})
    assert h100.fp32_tflops == pytest.approx(66.9, abs=0.05)
    assert h100.attainable(1.0) == pytest.approx(3.35) and h100.attainable(1e3) == h100.fp32_tflops
    with pytest.raises(ValueError, match="no ceilings known"):
        model.ceilings({"name": "Imaginary GPU"})


# ------------------------------------------------------------------ plots
def rows():
    out = []
    for n, t in ((1024, 0.4), (2048, 0.5)):
        r = good_doc()["chapters"]["naive"]["rows"][0]
        out.append(dict(r, M=n, N=n, K=n, tflops=t, cublas_tflops=40.0,
                        ms=2 * n**3 / t / 1e9, ms_p20=2 * n**3 / t / 1e9 * 0.99, ms_p80=2 * n**3 / t / 1e9 * 1.01))
    return out


def test_tflops_vs_size_has_kernel_and_cublas_and_source():
    fig = plots.tflops_vs_size(rows(), "recorded on Test GPU, 2026-11-22")
    names = [t.name for t in fig.data]
    assert any("cuBLAS" in n for n in names) and len(fig.data) == 2
    assert list(fig.data[0].y) == [0.4, 0.5]
    assert any("recorded on Test GPU" in a.text for a in fig.layout.annotations)


def test_slider_steps_toggle_visibility():
    import plotly.graph_objects as go

    fig = plots.with_slider([("a", [go.Scatter(y=[1])]), ("b", [go.Scatter(y=[2]), go.Scatter(y=[3])])])
    steps = fig.layout.sliders[0].steps
    assert [s.args[0]["visible"] for s in steps] == [[True, False, False], [False, True, True]]
    assert [t.visible for t in fig.data] == [False, True, True]  # starts on the last step


def test_configs_by_size_one_step_per_shape():
    fig = plots.configs_by_size(rows(), "src")
    assert len(fig.layout.sliders[0].steps) == 2


def test_warp_map_first_warp_of_naive_block_is_a_column_strip():
    fig = plots.warp_map(shapes=((32, 32), (4, 64)))
    z = fig.data[0].z  # block 32x32: threadIdx.x walks rows
    red = [(r, c) for r, row in enumerate(z) for c, v in enumerate(row) if v == 2]
    assert red == [(r, 0) for r in range(32)]
    z = fig.data[1].z  # block 4x64: a warp spans 4 rows x 8 columns
    red = {(r, c) for r, row in enumerate(z) for c, v in enumerate(row) if v == 2}
    assert red == {(r, c) for r in range(4) for c in range(8)}


# ------------------------------------------------------------------ record + CLI
def test_record_without_gpu_exits_with_a_reason():
    from helpers.mode import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, "-m", "helpers", "record", "--chapter", "naive"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "needs a CUDA GPU" in proc.stderr


def test_quick_mode_shrinks_sweeps():
    from helpers.record import shrink

    items = [(None, {}, (n, n, n)) for n in (256, 1024, 4096)]
    assert [it[2][0] for it in shrink(items)] == [256, 1024]
    assert shrink(items[2:]) == items[2:]


def test_cli_list_shows_kernels():
    proc = subprocess.run([sys.executable, "-m", "helpers", "list"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "naive" in proc.stdout and "01_naive.cu" in proc.stdout


def test_loads_per_result_match_the_articles_counts():
    K = 4096
    s = model.loads_per_result("smem_tiling", {"TILE": 32}, K)
    assert s == {"global": K / 16, "shared": 2 * K}
    t = model.loads_per_result("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 8, "TM": 8}, K)
    assert t == {"global": K / 32, "shared": 9 * K / 8}
    u = model.loads_per_result("thread_tile_2d", {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, K)
    assert u == {"global": K / 64, "shared": K / 4}


def test_every_helpers_module_imports():
    """`record` imports them all to find table recorders: a syntax error must fail here first."""
    import importlib
    import pkgutil

    import helpers

    for info in pkgutil.iter_modules(helpers.__path__):
        if info.name != "__main__":
            importlib.import_module(f"helpers.{info.name}")
