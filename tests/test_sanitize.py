"""``python -m helpers sanitize`` offline: report parsing, commands, verdicts and tables.

The sample reports follow compute-sanitizer's documented text format; the
GPU run itself is exercised by ``python -m helpers sanitize`` on a GPU machine.
"""
import sys

import pytest

from helpers import sanitize as S
from helpers.registry import get

CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
RACY = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void k<8, 0>(int)+0x850 in /tmp/tmpab12/kern.cu:160
=========     and Read access at void k<8, 0>(int)+0x1510 in /tmp/tmpab12/kern.cu:145 [1024 hazards]
=========     and Read access at void k<8, 0>(int)+0x1890 in /tmp/tmpab12/kern.cu:147 [512 hazards]
=========
========= Error: Race reported between Read access at void k<8, 0>(int)+0x1890 in /tmp/tmpab12/kern.cu:147
=========     and Write access at void k<8, 0>(int)+0x900 in /tmp/tmpab12/kern.cu:160 [1 hazard]
=========
========= RACECHECK SUMMARY: 5 hazards displayed (5 errors, 0 warnings)
"""
MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at sgemm_x<8>(int, int, int, const float *, const float *, float *)+0x2b0 in /tmp/tmpq/kern.cu:87
=========     by thread (3,0,0) in block (1,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""


def test_parse_clean_report():
    r = S.parse(CLEAN)
    assert r["errors"] == 0 and r["hazards"] == 0 and r["kinds"] == {}


def test_parse_racecheck_report_counts_hazards_by_access_pair():
    r = S.parse(RACY)
    assert r["errors"] == 5 and r["warnings"] == 0
    assert r["hazards"] == 1537
    assert r["kinds"] == {"Write/Read": 1536, "Read/Write": 1}
    assert "Race reported" in r["excerpt"] and "COMPUTE-SANITIZER" in r["excerpt"]


def test_parse_memcheck_report():
    r = S.parse(MEMCHECK)
    assert r["errors"] == 1 and r["hazards"] == 0
    assert S.source_lines(r["excerpt"]) == [87]


def test_a_report_without_summary_is_unknown():
    assert S.parse("Segmentation fault")["errors"] is None


def test_source_lines_and_tidy_name_the_kernel_file():
    assert S.source_lines(RACY) == [160, 145, 147]
    text = S.tidy(RACY, "08_double_buffering.cu")
    assert "/tmp/" not in text and "in 08_double_buffering.cu:145 [1024 hazards]" in text
    assert "block (1,0,0)" in S.tidy(MEMCHECK, "x.cu")   # "in block" is not a file


def test_command_runs_one_kernel_under_the_tool():
    cmd = S.command("racecheck", "naive", {"BX": 32, "BY": 32}, (7, 13, 5))
    assert cmd[:5] == ["compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "1"]
    assert cmd[5] == sys.executable and cmd[6] == "-c"
    assert cmd[-4:] == ['{"BX": 32, "BY": 32}', "7", "13", "5"]
    assert "-lineinfo" in cmd[7] and "matmul(name, A, B, params)" in cmd[7]


def test_launch_script_is_valid_python():
    compile(S.LAUNCH, "<launch>", "exec")


def test_verdict_and_exit_code():
    assert S.verdict(False, 0, 0)
    assert not S.verdict(False, 3, 1)
    assert not S.verdict(False, None, 1)          # crashed before the summary
    assert not S.verdict(False, 0, 124)           # timed out
    assert S.verdict(True, 5, 1)                  # the racy kernel: expected
    row = lambda ok: {"ok": ok}
    assert S.exit_code([row(True), row(True)]) == 0
    assert S.exit_code([row(True), row(False)]) == 1
    assert S.exit_code([]) == 0


def _rows():
    base = dict(params={}, M=67, N=45, K=33, returncode=0, kinds={}, lines=[], excerpt="")
    return [dict(base, kernel="naive", tool="memcheck", errors=0, hazards=0, expected_broken=False, ok=True),
            dict(base, kernel="naive", tool="racecheck", errors=0, hazards=0, expected_broken=False, ok=True),
            dict(base, kernel="double_buffering_racy", tool="racecheck", errors=5, hazards=1536,
                 expected_broken=True, ok=True),
            dict(base, kernel="double_buffering_racy", tool="racecheck", errors=4, hazards=1000,
                 expected_broken=True, ok=True),
            dict(base, kernel="bad", tool="memcheck", errors=2, hazards=0, expected_broken=False, ok=False)]


def test_summary_rows_aggregate_per_kernel_and_tool():
    s = {(a["kernel"], a["tool"]): a for a in S.summary_rows(_rows())}
    assert s[("naive", "memcheck")]["verdict"] == "clean"
    racy = s[("double_buffering_racy", "racecheck")]
    assert racy["runs"] == 2 and racy["errors"] == 9 and racy["hazards"] == 2536
    assert racy["verdict"] == "kept racy on purpose"
    assert s[("bad", "memcheck")]["verdict"] == "ERRORS"
    assert S.exit_code(_rows()) == 1


def test_tables_render():
    text = S.format_table(_rows())
    assert text.splitlines()[0].split()[:3] == ["kernel", "tool", "runs"]
    assert "kept racy on purpose" in text
    html = S.summary_table(_rows()).data
    assert html.count("<tr>") == 1 + 4 and "<th>hazards</th>" in html


def test_jobs_cover_every_checked_config_at_both_shapes_and_tools():
    from helpers.specs import test_configs

    todo = S.jobs()
    assert len(todo) == len(test_configs()) * len(S.SHAPES) * len(S.TOOLS)
    names = {spec.name for spec, _, _, _ in todo}
    assert {"naive", "double_buffering", "double_buffering_racy", "double_buffering_async"} <= names
    only = S.jobs(tools=("racecheck",), kernels=["double_buffering_racy"])
    assert {(s.name, t) for s, _, _, t in only} == {("double_buffering_racy", "racecheck")}
    for spec, params, shape, tool in todo:
        assert params == spec.validate(params)           # full, valid configs
        for dim, tile in zip(shape[:2], (128, 128)):
            assert dim % 32 and dim % tile               # not a multiple of any tile


def test_the_recorder_is_registered():
    from helpers.record import TABLE_RECORDERS

    assert TABLE_RECORDERS["sanitize"] is S.record_rows


def test_main_without_a_gpu_says_so(monkeypatch, capsys):
    import helpers.mode

    monkeypatch.setattr(helpers.mode, "gpu_available", lambda: False)
    assert S.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(KeyError, match="no kernel named"):
        S.main(["--kernel", "nonexistent"])


def test_racy_kernel_is_the_only_broken_one():
    from helpers.registry import all_specs

    assert [s.name for s in all_specs() if s.broken] == ["double_buffering_racy"]
    assert get("double_buffering_racy").broken
