"""The doors into the book: an exported notebook on a machine with nothing but the repository
(its first cell installs the package, then the chapter runs in recorded mode), the Colab
links the build writes, and what a wheel carries (CPU only, nothing downloaded).

The hosted-runtime test copies this repository's last commit into a temporary repository, exports a chapter
with ``SGEMM_BOOK_REPOSITORY`` set to that clone (a ``file://`` URL stands in for the public
one) and runs the notebook with a fresh environment's Python. That environment sees the
book environment's packages (a path, not a site folder, so the editable ``helpers`` of the
book environment stays invisible), and pip installs from the clone with no index and no
dependency resolution (``PIP_NO_DEPS``, ``PIP_NO_INDEX``): the cell's own command is the one
a reader's runtime runs.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from helpers import settings
from helpers.publish import notebooks

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "00_intro.md"         # a short chapter that reads the recorded data

RUN = textwrap.dedent("""\
    import sys, nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(sys.argv[1], 4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    import helpers
    print("HELPERS", helpers.__file__)
""")


def fresh_environment(tmp: Path) -> Path:
    """A venv with no packages of its own; the book environment's packages on its path."""
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "book_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    kernel = tmp / "jupyter" / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    return py


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the repository")
def test_an_exported_notebook_installs_the_book_from_its_repository_and_runs(tmp_path, monkeypatch):
    clone = tmp_path / "sgemm-book"      # the committed tree as a repository of one commit (CI's checkout is shallow,
    clone.mkdir()                        # and pip cannot fetch from a shallow clone)
    subprocess.run(f"git -C '{ROOT}' archive HEAD | tar -x -C '{clone}'", shell=True, check=True)
    git = ["git", "-C", str(clone), "-c", "user.name=book", "-c", "user.email=book@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the book"]):
        subprocess.run(git + args, check=True)
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", str(clone))
    nb = notebooks.export(CHAPTER)
    assert f"REPOSITORY = '{clone.as_uri()}'" in nb.cells[0].source
    path = tmp_path / "run" / f"{CHAPTER.stem}.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    py = fresh_environment(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV", "SGEMM_BOOK"))}
    env.update(SGEMM_BOOK_MODE="recorded", JUPYTER_PATH=str(tmp_path / "jupyter"), PIP_NO_DEPS="1",
               PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", PIP_DISABLE_PIP_VERSION_CHECK="1",
               HOME=str(tmp_path))
    proc = subprocess.run([py, "-c", RUN, str(path)], cwd=path.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    installed = Path(proc.stdout.split("HELPERS", 1)[1].strip())
    assert installed.is_relative_to(tmp_path / "venv"), installed      # the package the first cell installed
    assert (installed.parent / "_book" / "book" / "data" / "NVIDIA_H200.json").exists()


def test_the_setup_cell_installs_with_dependencies_from_the_named_repository(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", "https://github.com/example/sgemm-book")
    cell = notebooks.export(CHAPTER).cells[0].source
    assert "REPOSITORY = 'https://github.com/example/sgemm-book'" in cell
    assert "@ git+{REPOSITORY}" in cell and "--no-deps" not in cell
    compile(cell, "setup", "exec")


@pytest.mark.parametrize("given,url", [
    ("example/sgemm-book", "https://github.com/example/sgemm-book"),
    ("https://github.com/example/sgemm-book.git", "https://github.com/example/sgemm-book"),
    ("https://gitlab.com/example/sgemm-book/", "https://gitlab.com/example/sgemm-book"),
])
def test_the_repository_comes_from_the_environment_first(monkeypatch, given, url):
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", given)
    assert settings.repository() == url


def test_a_malformed_repository_is_refused(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", "not a repository")
    with pytest.raises(settings.SettingError, match="SGEMM_BOOK_REPOSITORY"):
        settings.repository()


def test_colab_opens_each_page_s_notebook_on_the_notebooks_branch(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", "example/sgemm-book")
    for chapter in notebooks.chapters():           # chapters and their deep dives
        assert notebooks.colab_url(chapter.stem) == ("https://colab.research.google.com/github/example/sgemm-book/"
                                                     f"blob/{notebooks.BRANCH}/{chapter.stem}.ipynb")
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", "https://gitlab.com/example/sgemm-book")
    assert notebooks.colab_url("02_naive") is None


def test_the_pages_workflow_names_the_repository_it_runs_in_and_publishes_the_notebooks():
    text = (ROOT / ".github" / "workflows" / "pages.yml").read_text()
    assert "SGEMM_BOOK_REPOSITORY: ${{ github.repository }}" in text
    assert f"git init -q -b {notebooks.BRANCH}" in text and f"push -q -f" in text and "_build/html/notebooks" in text


def test_a_wheel_carries_the_kernels_the_chapters_the_data_and_the_stylesheet(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", "_build", ".git", ".scratch", "*.egg-info",
                                                             "build", "__pycache__", ".pytest_cache"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = set(zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).namelist())
    want = ({f"helpers/_book/kernels/{p.name}" for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh")}
            | {f"helpers/_book/book/{p.name}" for p in notebooks.chapters()}
            | {f"helpers/_book/book/data/{p.name}" for p in (ROOT / "book" / "data").glob("*.json")}
            | {"helpers/_book/_toc.yml", "helpers/_book/_config.yml", "helpers/_book/pyproject.toml",
               "helpers/publish/sgemm.css", "helpers/measure/funnel_counts.json",
               "helpers/runtime/specs/final_dispatch.json"})
    assert want <= names, sorted(want - names)


def test_the_package_declares_what_it_imports():
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in deps}
    assert {"numpy", "plotly", "ipython", "nbformat", "jupytext", "pyyaml", "cupy-cuda12x", "cuda-bindings"} <= names
