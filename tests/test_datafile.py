"""Recorded data on disk: the schema, strict JSON, choosing the device's file, and writes
that never lose what was there (CPU only)."""
import json
import os
import warnings

import pytest

from helpers.measure import datafile, record
from helpers.measure.datafile import DataError


def row(**kw):
    return dict({"kernel": "naive", "params": {"BX": 32, "BY": 32}, "M": 64, "N": 64, "K": 64, "ms": 0.5,
                 "ms_p20": 0.4, "ms_p80": 0.6, "tflops": 0.001, "cublas_ms": 0.01, "cublas_tflops": 0.05,
                 "rel_err": 1e-7, "ok": True, "source_hash": "abc"}, **kw)


def device(name="Test GPU", driver="13.0"):
    return {"name": name, "compute_capability": "9.0", "sm_count": 132, "clock_mhz": 1980, "l2_bytes": 2**20,
            "bandwidth_gbs": 1000.0, "driver": driver, "cuda_runtime": "13.2", "cupy": "14.2.0"}


def chapter(rows=None, dev=None, kind="timing"):
    return {"device": dev or device(), "recorded": "2026-11-22T00:00:00+00:00", "git_commit": "abc",
            "command": "python -m helpers record", "kind": kind, "rows": rows if rows is not None else [row()]}


def doc(**chapters):
    return {"schema": datafile.SCHEMA, "chapters": chapters or {"naive": chapter()}}


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SGEMM_BOOK_DEVICE", "Test GPU")
    return tmp_path


@pytest.mark.parametrize("breakage,message", [
    (lambda d: d.update(schema=1), "schema 1"),
    (lambda d: d["chapters"]["naive"].pop("device"), "missing key 'device'"),
    (lambda d: d["chapters"]["naive"]["device"].pop("bandwidth_gbs"), "missing key 'bandwidth_gbs'"),
    (lambda d: d["chapters"]["naive"]["rows"][0].pop("tflops"), "missing key 'tflops'"),
    (lambda d: d["chapters"]["naive"]["rows"][0].pop("source_hash"), "missing key 'source_hash'"),
    (lambda d: d["chapters"]["naive"]["rows"][0].update(tflops=-1.0), "positive number"),
    (lambda d: d["chapters"]["naive"]["rows"][0].update(M="64"), "rows[0].M"),
    (lambda d: d["chapters"]["naive"].update(kind="movie"), "'timing' or 'table'"),
    (lambda d: d["chapters"].update(other=chapter(dev=device("Other GPU"))), "several devices"),
])
def test_malformed_data_is_refused_with_a_clear_message(breakage, message):
    d = doc()
    datafile.validate(d)
    breakage(d)
    with pytest.raises(DataError, match=message.replace("[", r"\[")):
        datafile.validate(d, "test.json")


def test_files_are_strict_json(data):
    d = doc(naive=chapter([row(rel_err=None)]))
    assert "Infinity" not in datafile.dumps(d) and "NaN" not in datafile.dumps(d)
    with pytest.raises(ValueError):
        datafile.dumps(doc(naive=chapter([row(rel_err=float("inf"))])))
    (data / "Test_GPU.json").write_text(datafile.dumps(d).replace("null", "Infinity"))
    with pytest.raises(DataError, match="not JSON"):
        datafile.read(data / "Test_GPU.json")


def test_the_reference_device_is_chosen_by_name_not_by_sorting(data):
    (data / "Test_GPU.json").write_text(datafile.dumps(doc()))
    other = doc(naive=chapter(dev=device("A Earlier Name")))
    (data / "A_Earlier_Name.json").write_text(datafile.dumps(other))
    assert datafile.load().device_name == "Test GPU"
    assert datafile.load("A Earlier Name").device_name == "A Earlier Name"
    with pytest.raises(DataError, match="no recorded data for 'Missing GPU'.*A Earlier Name, Test GPU"):
        datafile.load("Missing GPU")


def test_a_stray_file_is_ignored_with_a_warning(data):
    (data / "Test_GPU.json").write_text(datafile.dumps(doc()))
    (data / "notes.json").write_text('{"hello": 1}')
    with pytest.warns(UserWarning, match="ignoring notes.json"):
        assert datafile.load().device_name == "Test GPU"


def test_two_files_for_one_device_are_an_error(data):
    (data / "Test_GPU.json").write_text(datafile.dumps(doc()))
    (data / "copy.json").write_text(datafile.dumps(doc()))
    with pytest.raises(DataError, match="several files record the same device"):
        datafile.load()


def test_save_keeps_other_chapters_and_their_devices(data):
    (data / "Test_GPU.json").write_text(datafile.dumps(doc()))
    datafile.save_chapter("coalescing", chapter(dev=device(driver="13.5")))
    d = datafile.read(data / "Test_GPU.json")
    assert d["chapters"]["naive"]["device"]["driver"] == "13.0"
    assert d["chapters"]["coalescing"]["device"]["driver"] == "13.5"


def test_a_failing_write_leaves_the_old_file_byte_for_byte(data, monkeypatch):
    path = data / "Test_GPU.json"
    path.write_text(datafile.dumps(doc()))
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        datafile.save_chapter("coalescing", chapter())
    assert path.read_bytes() == before
    assert [p.name for p in data.iterdir()] == ["Test_GPU.json"]       # no temporary file left


def test_a_file_that_cannot_be_merged_is_refused_before_measuring(data, monkeypatch):
    path = data / "Test_GPU.json"
    path.write_text('{"schema": 1, "device": {}, "chapters": {}}')
    before = path.read_bytes()
    monkeypatch.setattr(record.hardware, "gpu_available", lambda: True)
    monkeypatch.setattr(record, "device_block", lambda: device())
    measured = []
    monkeypatch.setattr(record, "measure_items", lambda *a, **k: measured.append(1) or ([], []))
    with pytest.raises(DataError, match="schema 1"):
        record.record(["naive"], log=lambda line: None)
    assert not measured and path.read_bytes() == before


def test_record_refuses_quick_mode_and_emulated_targets(data, monkeypatch):
    monkeypatch.setattr(record.hardware, "gpu_available", lambda: True)
    monkeypatch.setenv("SGEMM_BOOK_QUICK", "yes")
    with pytest.raises(record.RecordError, match="QUICK"):
        record.check_can_record(["naive"])
    monkeypatch.delenv("SGEMM_BOOK_QUICK")
    monkeypatch.setenv("SGEMM_BOOK_TARGET", "sm_86")
    with pytest.raises(record.RecordError, match="emulated"):
        record.check_can_record(["naive"])


def test_each_chapter_is_saved_as_soon_as_it_is_measured(data, monkeypatch):
    monkeypatch.setattr(record.hardware, "gpu_available", lambda: True)
    monkeypatch.setattr(record.hardware, "gpu", lambda: None)
    monkeypatch.setattr(record, "device_block", lambda: device())
    calls = []

    def fake(items, dev, log=None, cached=True, target_s=0.4):
        if calls:
            raise RuntimeError("the GPU fell over")
        calls.append(1)
        return [row()], []

    monkeypatch.setattr(record, "measure_items", fake)
    with pytest.raises(RuntimeError, match="fell over"):
        record.record(["naive", "coalescing"], log=lambda line: None)
    saved = datafile.read(data / "Test_GPU.json")
    assert list(saved["chapters"]) == ["naive"]


def test_the_committed_data_validates_and_names_the_reference_device():
    from helpers import settings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        files = datafile.device_files()
    assert settings.reference_device() in files


def test_a_truncated_file_names_itself_its_line_and_the_way_back(data):
    text = datafile.dumps(doc())
    (data / "Test_GPU.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError) as exc:
        datafile.load()                      # the reference device's own file: its defect, not "no recorded data"
    message = str(exc.value)
    assert "\n" not in message and "no recorded data" not in message
    assert str(data / "Test_GPU.json") in message and "is not valid JSON (line " in message
    assert "git checkout -- " in message and "python -m helpers record" in message


def test_a_file_that_breaks_the_schema_names_its_folder_and_the_defect(data):
    d = doc()
    d["chapters"]["naive"]["rows"][0].pop("tflops")
    (data / "Test_GPU.json").write_text(datafile.dumps(d))
    with pytest.raises(DataError, match=r"Test_GPU\.json\.chapters\.naive\.rows\[0\]: missing key 'tflops'"):
        datafile.load()
