"""The final kernel's dispatch numbers are data that one command re-derives: `python -m helpers refit`
fits them to the measured tables that helpers/runtime/specs/final_dispatch.json names, with the
recipe it holds, and must write the file as shipped."""
import json

import pytest

from helpers import settings
from helpers.measure import dispatch_fit
from helpers.runtime.specs import final

SHIPPED = json.loads(final.DISPATCH_FILE.read_text())


@pytest.fixture(scope="module")
def refitted():
    return dispatch_fit.refit_file()


def test_the_refit_reproduces_the_shipped_file(refitted):
    assert dispatch_fit.differences(SHIPPED, refitted) == []


def test_the_shipped_file_names_committed_tables_by_their_content():
    tables = SHIPPED["provenance"]["tables"]
    assert tables, "the dispatch file names no table"
    for t in tables:
        doc = dispatch_fit.read_table(settings.ROOT / t["file"])
        assert dispatch_fit.table_hash(doc) == t["hash"], t["file"]
        assert len(doc["rows"]) == t["rows"] and doc.get("commit") == t["commit"]


def test_the_model_runs_on_the_shipped_numbers():
    cands, constants = final.numbers(SHIPPED)
    assert [c.name for c in cands] == list(final.TILES) == list(SHIPPED["candidates"])
    assert constants == final.CONSTANTS and cands == final.CANDIDATES
    for c in cands:              # named fields only: each candidate's numbers as the file has them
        assert c.efficiency == SHIPPED["candidates"][c.name]["efficiency"]
        assert dict(c.layouts) == SHIPPED["candidates"][c.name]["layouts"]


def test_the_fit_chooses_on_its_tables_at_least_as_well_as_the_numbers_they_were_measured_with():
    q = SHIPPED["quality"]
    assert q["fitted"]["choice_quality"] >= q["measured_with"]["choice_quality"] - 0.002


def test_differences_finds_a_changed_number_a_missing_field_and_a_changed_table():
    changed = json.loads(json.dumps(SHIPPED))
    changed["candidates"]["large"]["efficiency"] *= 1.01
    del changed["constants"]["alone"]
    changed["provenance"]["tables"][0]["hash"] = "0" * 16
    found = dispatch_fit.differences(SHIPPED, changed)
    assert len(found) == 3
    assert any(".candidates.large.efficiency" in d for d in found)
    assert any(".constants.alone" in d for d in found)
