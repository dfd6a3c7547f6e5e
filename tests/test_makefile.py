"""The Makefile's environments, through `make -n` (what each target would run, nothing run):
no target removes an environment it did not make, and targets use what is there."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def dry(target: str, venv: Path, *extra: str) -> str:
    proc = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target, f"VENV={venv}", *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def requirements_hash(tmp_path) -> str:
    """The hash this checkout's requirements stamp an environment with (as `make` computes it)."""
    return re.search(r'echo "build ([0-9a-f]{16})"', dry("book", tmp_path / "none")).group(1)


def venv(tmp_path, stamp: str | None) -> Path:
    path = tmp_path / "env"
    (path / "bin").mkdir(parents=True)
    if stamp is not None:
        (path / ".sgemm-book-env").write_text(stamp + "\n")
    return path


@pytest.mark.parametrize("target", ["book", "test", "notebooks", "test-notebooks", "test-gpu"])
def test_an_environment_not_made_by_make_is_used_as_it_is(tmp_path, target):
    env = venv(tmp_path, None)              # e.g. pip install -r requirements.txt && pip install -e .
    out = dry(target, env)
    assert "rm -rf" not in out and "pip install" not in out and "-m venv" not in out
    assert "using" in out and str(env) in out


def test_make_venv_refuses_to_replace_an_environment_it_did_not_make(tmp_path):
    out = dry("venv", venv(tmp_path, None))
    assert "rm -rf" not in out and "exit 2" in out


def test_no_environment_book_makes_the_cpu_build_environment_and_gpu_targets_cuda12(tmp_path):
    assert "-r requirements-build.txt" in dry("book", tmp_path / "none")
    assert "-c constraints.txt" in dry("book", tmp_path / "none")
    assert "-r requirements.txt" in dry("test-gpu", tmp_path / "none")        # CUDA 12, the one default
    assert "-r requirements.txt" in dry("venv", tmp_path / "none")
    assert "-r requirements-cuda13.txt" in dry("venv", tmp_path / "none", "CUDA=13")


def test_an_environment_made_here_is_used_until_the_requirements_change(tmp_path):
    h = requirements_hash(tmp_path)
    for kind in ("build", "cuda12", "cuda13"):
        env = venv(tmp_path / kind, f"{kind} {h}")
        for target in ("book", "notebooks"):
            out = dry(target, env)
            assert "rm -rf" not in out and "pip install" not in out
    stale = venv(tmp_path / "stale", "cuda12 0000000000000000")
    out = dry("book", stale)
    assert f"rm -rf {stale}" in out and "-r requirements.txt" in out     # made again as what it was
    partial = venv(tmp_path / "partial", "build partial")                # an interrupted creation
    assert f"rm -rf {partial}" in dry("book", partial)


def test_gpu_targets_turn_the_cpu_build_environment_made_here_into_a_gpu_one(tmp_path):
    h = requirements_hash(tmp_path)
    env = venv(tmp_path, f"build {h}")
    out = dry("test-gpu", env)
    assert f"rm -rf {env}" in out and "-r requirements.txt" in out
    gpu = venv(tmp_path / "gpu", f"cuda12 {h}")
    assert "rm -rf" not in dry("test-gpu", gpu) and "pip install" not in dry("test-gpu", gpu)


def test_a_bare_make_lists_the_targets_and_touches_nothing(tmp_path):
    out = dry("help", venv(tmp_path, None))
    assert "rm -rf" not in out
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), f"VENV={tmp_path / 'env'}"], capture_output=True, text=True)
    for target in ("book", "test", "notebooks", "test-gpu", "venv", "constraints"):
        assert f"make {target} " in proc.stdout


def test_the_book_build_starts_each_notebook_kernel_on_sockets_of_its_own(monkeypatch):
    # chapters run in parallel processes; TCP ports found free by one can be taken by another
    from jupyter_client.manager import AsyncKernelManager, KernelManager

    from helpers.publish import build

    monkeypatch.setattr(KernelManager, "__init__", KernelManager.__init__)     # restored after the test
    build.unique_kernel_sockets()
    a, b = KernelManager(kernel_name="python3"), AsyncKernelManager(kernel_name="python3")
    assert a.transport == b.transport == "ipc"
    assert a.ip != b.ip and os.path.dirname(a.ip) == os.path.dirname(b.ip) and os.path.isdir(os.path.dirname(a.ip))
