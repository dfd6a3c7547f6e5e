from helpers.sanitize import command, parse

CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
RACY = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void k<8, 0>(int)+0x850
=========     and Read access at void k<8, 0>(int)+0x1510 [1024 hazards]
=========     and Read access at void k<8, 0>(int)+0x1890 [512 hazards]
=========
========= RACECHECK SUMMARY: 5 hazards displayed (5 errors, 0 warnings)
"""


def test_parse_clean_and_racy_reports():
    assert parse(CLEAN)["errors"] == 0 and parse(CLEAN)["hazards"] == 0
    r = parse(RACY)
    assert r["errors"] == 5 and r["hazards"] == 1536 and "Race reported" in r["excerpt"]


def test_parse_without_summary_is_unknown():
    assert parse("segfault")["errors"] is None


def test_command_runs_one_kernel_under_the_tool():
    cmd = command("racecheck", "naive", {"BX": 32, "BY": 32}, (7, 13, 5))
    assert cmd[:5] == ["compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "1"]
    assert cmd[-4:] == ['{"BX": 32, "BY": 32}', "7", "13", "5"]
