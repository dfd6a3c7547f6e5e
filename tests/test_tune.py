"""helpers.tune: which options it times, what it returns and remembers (a stand-in for the
GPU's timings; tests/test_gpu_final.py tunes on a GPU)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers import hardware
from helpers.runtime import tune as tuning
from helpers.runtime.specs import final

H200 = hardware.Device.from_datasheet("NVIDIA H200")
SHAPE = (300, 200, 1500)


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """An H200 that 'times' each option: slower the later the model ranks it, except the third,
    fastest of all, and the second, faster still but wrong."""
    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path))
    monkeypatch.delenv("SGEMM_BOOK_TARGET", raising=False)
    monkeypatch.setattr(tuning.hardware, "current", lambda: H200)
    order = [e.params for e in final.ranked_options(*SHAPE, H200)]
    timed = []

    def measure(spec, M, N, K, params, **kw):
        i = order.index(params)
        timed.append(i)
        ms = {1: 0.5, 2: 0.8}.get(i, 1.0 + i)
        return SimpleNamespace(ok=i != 1, ms=ms, tflops=2 * M * N * K / ms / 1e9, cublas_ms=1.0)

    monkeypatch.setattr(tuning, "measure", measure)
    return SimpleNamespace(order=order, timed=timed, path=tmp_path / "tuned.json")


def test_tune_returns_the_fastest_correct_of_the_models_first_options(fake_gpu):
    best = tuning.tune(*SHAPE, top=4, log=lambda *a: None)
    assert fake_gpu.timed == [0, 1, 2, 3]            # the model's order, `top` of them
    assert best == fake_gpu.order[2]                 # the second was faster, but wrong


def test_tune_remembers_per_gpu_shape_and_kernel_source(fake_gpu):
    first = tuning.tune(*SHAPE, top=3, log=lambda *a: None)
    saved = json.loads(fake_gpu.path.read_text())
    (key,) = saved
    assert key.startswith(f"{H200.name} 300x200x1500 ") and key.endswith(final.SPEC.source_hash())
    assert saved[key]["params"] == first and saved[key]["model_first"] == fake_gpu.order[0]
    del fake_gpu.timed[:]
    assert tuning.tune(*SHAPE, top=3, log=lambda *a: None) == first and fake_gpu.timed == []
    assert tuning.tune(*SHAPE, top=3, refresh=True, log=lambda *a: None) == first and len(fake_gpu.timed) == 3
    tuning.tune(300, 200, 1501, top=1, log=lambda *a: None)           # another shape: a second entry
    assert len(json.loads(fake_gpu.path.read_text())) == 2


def test_tune_refuses_what_it_cannot_time(fake_gpu, monkeypatch):
    wrong = SimpleNamespace(ok=False, ms=1.0, tflops=1.0, cublas_ms=1.0)
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: wrong)
    with pytest.raises(RuntimeError, match="correct result"):
        tuning.tune(*SHAPE, top=2, log=lambda *a: None)
    assert not fake_gpu.path.exists()                # nothing remembered
    with pytest.raises(ValueError, match="positive"):
        tuning.tune(0, 200, 1500)
    monkeypatch.setenv("SGEMM_BOOK_TARGET", "sm_75")
    with pytest.raises(hardware.DeviceError, match="SGEMM_BOOK_TARGET"):
        tuning.tune(*SHAPE)


@pytest.mark.skipif(hardware.gpu_available(), reason="checks the error a machine without a GPU gives")
def test_tune_without_a_gpu_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path))
    monkeypatch.delenv("SGEMM_BOOK_TARGET", raising=False)
    with pytest.raises(hardware.DeviceError, match="no CUDA GPU"):
        tuning.tune(*SHAPE)


def test_the_chapters_words_on_tune(tmp_path, monkeypatch):
    # book/12_final.md: "six by default"; "tuned.json in ~/.cache/sgemm-book, or in SGEMM_BOOK_CACHE"
    monkeypatch.setenv("SGEMM_BOOK_CACHE", str(tmp_path))
    assert tuning.cache_path() == tmp_path / "tuned.json"
    monkeypatch.delenv("SGEMM_BOOK_CACHE")
    assert str(tuning.cache_path()).endswith(".cache/sgemm-book/tuned.json")
