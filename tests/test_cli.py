"""The command line: one line `error: ...` and exit status 2 for a user's mistake, never a traceback.

The commands run in this process (helpers.__main__.main, as `python -m helpers` calls it); two
run as `python -m helpers` in a process of their own, for the exit status and the output that
a shell sees."""
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers import hardware
from helpers.__main__ import main
from helpers.settings import ROOT


def run_process(*args):
    return subprocess.run([sys.executable, "-m", "helpers", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.fixture
def run(capsys, monkeypatch):
    """run(*args): the command in this process, as (returncode, stdout, stderr); an exception
    that escapes main() is a traceback the user would see, and fails the test."""
    monkeypatch.chdir(ROOT)

    def command(*args):
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
    return command


@pytest.mark.parametrize("args,message", [
    (("resources", "naive", "BX"), "'BX': expected NAME=VALUE"),
    (("resources", "naive", "BX=abc"), "'BX=abc': the value must be an integer"),
    (("resources", "nosuch"), "no kernel named 'nosuch'"),
    (("resources", "naive", "BX=64", "BY=32"), "2048 threads per block"),
    (("sanitize", "--kernel", "nosuch"), "no kernel named 'nosuch'"),
    (("record", "--chapter", "nosuch"), "no data source for chapter 'nosuch'"),
    (("bench", "--record", "--quick"), "--record stores the full default run only"),
    (("bench", "--max-ms", "x"), "invalid float value"),
    (("bench", "--suite", "layouts", "--kernels", "naive"), "--suite layouts runs helpers.sgemm"),
    (("frobnicate",), "invalid choice"),
])
def test_user_mistakes_are_one_line_and_exit_2(run, args, message):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr


def test_a_mistake_in_a_process_of_its_own_is_one_line_and_exit_2():
    proc = run_process("frobnicate")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "invalid choice" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_commands_that_need_a_gpu_say_so(run):
    if hardware.gpu_available():
        pytest.skip("a GPU is present")
    for args in (("record", "--chapter", "naive"), ("bench", "--quick"), ("sanitize",)):
        proc = run(*args)
        assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr, (args, proc.stderr)


def test_a_bad_environment_variable_is_a_user_error(run, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_QUICK", "maybe")
    proc = run("record")
    assert proc.returncode == 2 and "SGEMM_BOOK_QUICK='maybe' is not a boolean" in proc.stderr


def test_list_and_resources_work_offline(run):
    proc = run_process("list")
    assert proc.returncode == 0 and "naive" in proc.stdout and "02_naive.cu" in proc.stdout
    proc = run("resources", "naive", "BX=16", "BY=16")
    assert proc.returncode == 0 and "registers/thread" in proc.stdout


def test_bench_json_is_checked_writable_before_any_run(run, tmp_path):
    proc = run("bench", "--json", str(tmp_path / "no" / "such" / "dir" / "rows.json"), "--quick")
    assert proc.returncode == 2 and "cannot write" in proc.stderr
