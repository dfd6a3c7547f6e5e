"""helpers.ncu offline: the command line, CSV parsing of captured-looking output, pivoting."""
import pytest

from helpers import ncu

DETAILS = '''==PROF== Connected to process 48213 (/usr/bin/python3.12)
==PROF== Profiling "sgemm_bank_conflicts" - 0: 0%....50%....100% - 3 passes
==PROF== Disconnected from process 48213
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","2,097,152"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum","","393,216"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","6,291,456"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum","","655,360"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_shared_ld.sum","inst","1,048,576"
"0","48213","python3.12","127.0.0.1","void sgemm_bank_conflicts<16, 0, 0, 0>(int, int, int, const float *, const float *, float *)","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_shared_st.sum","inst","163,840"
'''

RAW = '''==PROF== Connected to process 7 (/usr/bin/python3)
"ID","Process ID","Process Name","Host Name","Kernel Name","smsp__inst_executed_op_shared_ld.sum","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
"","","","","","inst",""
"0","7","python3","localhost","sgemm_vectorized","524288","2097152.5"
'''


def test_parse_details_page():
    rows = ncu.parse_csv(DETAILS)
    assert len(rows) == 6
    by = {r["metric"]: r["value"] for r in rows}
    assert by["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 6291456
    assert by["smsp__inst_executed_op_shared_st.sum"] == 163840
    assert rows[0]["kernel_name"].startswith("void sgemm_bank_conflicts<16")
    assert all(isinstance(r["value"], int) for r in rows)


def test_parse_raw_page():
    rows = ncu.parse_csv(RAW)
    assert [(r["metric"], r["value"]) for r in rows] == [
        ("smsp__inst_executed_op_shared_ld.sum", 524288),
        ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 2097152.5)]
    assert rows[0]["unit"] == "inst"


def test_parse_nothing():
    assert ncu.parse_csv("==PROF== Disconnected\n") == []
    assert ncu.parse_csv("") == []


def test_numbers():
    assert ncu._number("1,234,567") == 1234567
    assert ncu._number("12.5") == 12.5
    assert ncu._number("n/a") is None


def test_errors_and_unknown_metrics():
    out = ('==ERROR== Failed to find metric "smsp__inst_executed_op_shared_ld.sum"\n'
           "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    assert ncu.unknown_metrics(out) == ["smsp__inst_executed_op_shared_ld.sum"]
    assert len(ncu.errors_in(out)) == 2


def test_command_line_names_metrics_kernel_and_launch():
    cmd = ncu.command("bank_conflicts", {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}, 1024, ncu="ncu")
    assert cmd[:2] == ["ncu", "--csv"]
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:sgemm_bank_conflicts"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert set(cmd[cmd.index("--metrics") + 1].split(",")) == set(ncu.METRICS)
    assert "prepare(name, n, n, n, params)" in cmd[cmd.index("-c") + 1]
    assert cmd[-3:] == ["bank_conflicts", '{"BK": 16, "PAD": 0, "SPLIT": 1, "SWIZZLE": 1}', "1024"]
    line = ncu.command_line("vectorized", {}, 1024)
    assert line.startswith("ncu --csv") and "regex:sgemm_vectorized" in line and " python -c " in line


def test_launch_script_compiles():
    compile(ncu.LAUNCH, "<launch>", "exec")


def test_profile_without_ncu_says_so(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    with pytest.raises(ncu.NcuUnavailable, match="not installed"):
        ncu.profile("bank_conflicts", {})
    rows = ncu.collect([("bank_conflicts", {}), ("vectorized", {})], log=lambda *_: None)
    assert len(rows) == 1 and rows[0]["metric"] == "error"      # stops after the first: same for all


def test_profile_parses_a_run(monkeypatch):
    import subprocess

    monkeypatch.setattr(ncu, "find_ncu", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, DETAILS, ""))
    rows = ncu.collect([("bank_conflicts", {"SPLIT": 0, "SWIZZLE": 0})], log=lambda *_: None)
    table = ncu.pivot(rows)
    assert len(table) == 1
    t = table[0]
    assert t["load wavefronts per instruction"] == 6.0
    assert t["store wavefronts per instruction"] == 4.0
    assert t["load bank conflicts"] == 2097152


def test_unknown_metric_is_dropped_and_retried(monkeypatch):
    import subprocess

    calls = []

    def fake(cmd, **kw):
        calls.append(cmd[cmd.index("--metrics") + 1])
        if len(calls) == 1:
            return subprocess.CompletedProcess(cmd, 1, "", '==ERROR== Failed to find metric "smsp__inst_executed_op_shared_st.sum"')
        return subprocess.CompletedProcess(cmd, 0, DETAILS, "")

    monkeypatch.setattr(ncu, "find_ncu", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", fake)
    ncu.profile("bank_conflicts", {})
    assert len(calls) == 2 and "smsp__inst_executed_op_shared_st.sum" not in calls[1]


def test_registered_as_a_table_recorder():
    from helpers.record import TABLE_RECORDERS

    assert TABLE_RECORDERS[ncu.CHAPTER] is ncu.record_rows


def test_configs_cover_every_layout():
    cfgs = ncu.configs()
    assert ("vectorized", {}) in cfgs and len([c for c in cfgs if c[0] == "bank_conflicts"]) == 12
