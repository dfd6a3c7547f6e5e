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

# Rows whose config compiles to other SASS since the change that let the cp.async kernels
# run on GPUs before compute capability 8.0 (instruction order only: NVRTC's scheduling
# moves with any edit of the text). They wait for the next `python -m helpers record
# --chapter double_buffering` on a GPU; the status page lists them.
AWAITING_RECORD = {("double_buffering", "cp_async", '{"BK": 8, "STAGES": 3}'),
                   ("double_buffering", "cp_async", '{"BK": 32, "STAGES": 3}')}


def recorded():
    return datafile.load()


def test_every_chapter_with_a_source_is_recorded():
    rec = recorded()
    missing = [c for c in sources.SOURCES if not rec.has(c)]
    assert not missing, f"not recorded: {missing}"


def test_recorded_rows_measure_the_kernels_as_they_are_now():
    stale = stale_rows()
    assert stale <= AWAITING_RECORD, ("rows recorded for another version of these kernels; record again with "
                                      f"`python -m helpers record --chapter ...`: {sorted(stale - AWAITING_RECORD)}")
    assert stale == AWAITING_RECORD, f"recorded again: remove {sorted(AWAITING_RECORD - stale)} from AWAITING_RECORD"


def test_every_timing_row_was_correct():
    rec = recorded()
    wrong = [(c, r["kernel"], r["params"], r["M"]) for c, ch in rec.doc["chapters"].items() if ch["kind"] == "timing"
             for r in ch["rows"] if not r["ok"] and not BY_NAME[r["kernel"]].broken]
    assert not wrong


def test_the_status_page_lists_the_rows_awaiting_a_record():
    shown = {(r["data source"], r["kernel"], r["config"]) for r in status.freshness_text().rows}
    assert shown == {(c, k, BY_NAME[k].label(BY_NAME[k].resolve(json.loads(p)))) for c, k, p in stale_rows()}
