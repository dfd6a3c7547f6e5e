"""The recorded data against the code it claims to measure (CPU only).

Every recorded row that names a kernel carries the hash of that kernel's source (with its
headers) at the time it was measured. When a kernel changes, its recorded rows no longer
describe it: this test fails until they are recorded again, unless
scripts/check_source_equivalence.py found that every recorded config of the old source
compiles to the same SASS as the new one for the recorded GPU (a change that only touches
what other GPUs compile).
"""
import json

from helpers.measure import datafile, sources
from helpers.runtime.specs import BY_NAME
from helpers.settings import ROOT

EQUIVALENCE = ROOT / "tests" / "data" / "source_equivalence.json"


def recorded():
    return datafile.load()


def same_machine_code() -> set[tuple[str, str, str]]:
    """(kernel, recorded hash, current hash) whose every recorded config compiles alike."""
    if not EQUIVALENCE.exists():
        return set()
    return {(k["kernel"], k["recorded_hash"], k["current_hash"])
            for k in json.loads(EQUIVALENCE.read_text())["kernels"] if k["same_sass"] == k["configs"]}


def test_every_chapter_with_a_source_is_recorded():
    rec = recorded()
    missing = [c for c in sources.SOURCES if not rec.has(c)]
    assert not missing, f"not recorded: {missing}"


def test_recorded_rows_measure_the_kernels_as_they_are_now():
    rec, alike = recorded(), same_machine_code()
    stale = {}
    for chapter, ch in rec.doc["chapters"].items():
        for r in ch["rows"]:
            spec = BY_NAME.get(r.get("kernel"))
            if spec is None or r.get("source_hash") in ("", spec.source_hash()):
                continue
            if (spec.name, r["source_hash"], spec.source_hash()) not in alike:
                stale.setdefault(chapter, set()).add(spec.name)
    assert not stale, ("rows recorded for another version of these kernels; record again with "
                       f"`python -m helpers record --chapter ...`: {stale}")


def test_the_equivalence_file_covers_every_config_it_vouches_for():
    rec = recorded()
    for kernel, old, new in same_machine_code():
        configs = {json.dumps(r["params"], sort_keys=True) for ch in rec.doc["chapters"].values()
                   for r in ch["rows"] if r.get("kernel") == kernel and r.get("source_hash") == old}
        entry = next(k for k in json.loads(EQUIVALENCE.read_text())["kernels"]
                     if (k["kernel"], k["recorded_hash"], k["current_hash"]) == (kernel, old, new))
        assert entry["configs"] == len(configs), (kernel, entry["configs"], len(configs))


def test_every_timing_row_was_correct():
    rec = recorded()
    wrong = [(c, r["kernel"], r["params"], r["M"]) for c, ch in rec.doc["chapters"].items() if ch["kind"] == "timing"
             for r in ch["rows"] if not r["ok"] and not BY_NAME[r["kernel"]].broken]
    assert not wrong
