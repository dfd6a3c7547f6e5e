"""The recorded data against the code it claims to measure (CPU only).

Every recorded row that names a kernel carries the hash of that kernel's source (with its
headers) at the time it was measured. When a kernel changes, its recorded rows no longer
describe it: this test fails until they are recorded again.
"""
import pytest

from helpers.measure import datafile, sources
from helpers.runtime.specs import BY_NAME


def recorded():
    return datafile.load()


def test_every_chapter_with_a_source_is_recorded():
    rec = recorded()
    missing = [c for c in sources.SOURCES if not rec.has(c)]
    assert not missing, f"not recorded: {missing}"


def test_recorded_rows_measure_the_kernels_as_they_are_now():
    rec = recorded()
    stale = {}
    for chapter, ch in rec.doc["chapters"].items():
        for r in ch["rows"]:
            spec = BY_NAME.get(r.get("kernel"))
            if spec is not None and r.get("source_hash") not in ("", spec.source_hash()):
                stale.setdefault(chapter, set()).add(spec.name)
    assert not stale, ("rows recorded for another version of these kernels; record again with "
                       f"`python -m helpers record --chapter ...`: {stale}")


def test_every_timing_row_was_correct():
    rec = recorded()
    wrong = [(c, r["kernel"], r["params"], r["M"]) for c, ch in rec.doc["chapters"].items() if ch["kind"] == "timing"
             for r in ch["rows"] if not r["ok"] and not BY_NAME[r["kernel"]].broken]
    assert not wrong
