"""The recorded data against the code it claims to measure (CPU only).

Every recorded row that names a kernel carries the hash of that kernel's source (with its
headers) at the time it was measured. When a kernel changes, its recorded rows no longer
describe it: this test fails until they are recorded again, unless
scripts/check_source_equivalence.py found that the row's config compiles to the same SASS
from the old source and the new one for the recorded GPU (a change in code that only
other GPUs compile).
"""
import json

from helpers.figures import status
from helpers.measure import datafile, sources
from helpers.measure.freshness import stale_rows
from helpers.runtime.specs import BY_NAME

def recorded():
    return datafile.load()


def test_every_chapter_with_a_source_is_recorded():
    rec = recorded()
    missing = [c for c in sources.required() if not rec.has(c)]
    assert not missing, f"not recorded: {missing}"


def test_recorded_rows_measure_the_kernels_as_they_are_now():
    stale = stale_rows()
    assert not stale, ("rows recorded for another version of these kernels; record again with "
                       f"`python -m helpers record --chapter ...`: {sorted(stale)}")


def test_every_timing_row_was_correct():
    rec = recorded()
    wrong = [(c, r["kernel"], r["params"], r["M"]) for c, ch in rec.doc["chapters"].items() if ch["kind"] == "timing"
             for r in ch["rows"] if not r["ok"] and not BY_NAME[r["kernel"]].broken]
    assert not wrong


def test_the_status_page_lists_the_rows_awaiting_a_record():
    shown, stale = status.freshness_text(), stale_rows()
    if not stale:
        assert "Every recorded row measures its kernel's code as it is now" in str(shown)
        return
    assert {(r["data source"], r["kernel"], r["config"]) for r in shown.rows} == {
        (c, k, BY_NAME[k].label(BY_NAME[k].resolve(json.loads(p)))) for c, k, p in stale}


def test_every_sanitizer_run_finished_clean_or_was_kept_racy_on_purpose():
    rows = recorded().chapter("sanitize")["rows"]
    assert not [(r["kernel"], r["params"], r["M"], r["tool"]) for r in rows if not r["ok"]]
    assert all(r["errors"] == 0 for r in rows if not r["expected_broken"])


def test_equivalence_compares_machine_code_under_the_names_the_rows_had(nvrtc, script):
    # scripts/check_source_equivalence.py: a template parameter added since, at its default, leaves
    # the machine code as it was; the mangled name (every template argument) is not compared
    import types

    from helpers import hardware

    cse = script("check_source_equivalence")
    param = lambda name: types.SimpleNamespace(name=name, template=True)  # noqa: E731
    kernel = types.SimpleNamespace(params=[param("A"), param("B")], function="k", file="k.cu")
    old = 'template <int A> __global__ void k(float* x) { x[threadIdx.x] = A; }\n'
    new = 'template <int A, int B = 0> __global__ void k(float* x) { x[threadIdx.x] = A + 2 * B; }\n'
    device = hardware.Device.from_datasheet("NVIDIA H200")
    before = cse.recorded_sass(kernel, {"A": 3}, device, old)                  # named k<3>, as recorded
    assert "Function :" not in before and "STG" in before
    assert cse.recorded_sass(kernel, {"A": 3, "B": 0}, device, new) == before  # k<3, 0>: the same code
    assert cse.recorded_sass(kernel, {"A": 3, "B": 1}, device, new) != before
