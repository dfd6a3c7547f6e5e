"""The downloadable notebooks: what `make book` exports for each chapter, and (marked
``notebooks``, run by `make test-notebooks` or on a GPU) every one of them under nbval.

The static checks read the notebooks the book build wrote (chapters run once per `make test`,
in the build); nbval runs each exported notebook again, top to bottom: recorded mode on a
machine without a GPU, live mode (quick sweeps) on one.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.publish import notebooks

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "html" / "notebooks"
CHAPTERS = notebooks.chapters()


def exported(chapter: Path):
    path = OUT / f"{chapter.stem}.ipynb"
    if not path.exists():
        pytest.skip("run `make book` first (it exports the notebooks)")
    return nbformat.read(path, 4)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_exported_notebook_shows_what_the_page_shows(chapter):
    nb = exported(chapter)
    assert "REPOSITORY" in nb.cells[0].source                          # the hosted-runtime setup cell
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert not re.search(r"^(```|:::)\{", cell.source, re.M), f"raw MyST directive in {chapter.name}"
            assert "{doc}`" not in cell.source and "{ref}`" not in cell.source
    shown = [c for c in nb.cells if c.cell_type == "code" and "show_kernel(" in c.source]
    for cell in shown:
        name, region = notebooks.SHOW_KERNEL.search(cell.source).groups()
        path = notebooks.kernel_output(name, region).data["text/markdown"]
        assert cell.outputs and cell.outputs[0].data["text/markdown"] == path
    for cell in nb.cells:       # nbval fails a cell that has output but was never run
        assert cell.cell_type != "code" or not cell.outputs or cell.execution_count, cell.source


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_kernel_the_page_includes_is_in_the_notebook(chapter):
    source = chapter.read_text()
    nb = exported(chapter)
    text = "\n".join(o.data.get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if "data" in o)
    for name, region in notebooks.SHOW_KERNEL.findall(source):
        assert notebooks.kernel_output(name, region or None).data["text/markdown"] in text
    assert "{literalinclude}" not in source, "show kernels with helpers.show_kernel, which notebooks render"


def test_solutions_are_collapsed():
    text = "\n".join(c.source for ch in CHAPTERS for c in exported(ch).cells if c.cell_type == "markdown")
    if ":class: dropdown" in "\n".join(ch.read_text() for ch in CHAPTERS):
        assert "<details>" in text


def test_myst_to_markdown():
    md = notebooks.markdown("a\n\n```{admonition} Solution\n:class: dropdown\n\nThe answer.\n```\n\n"
                            "See {doc}`the naive kernel <02_naive>` and [this](03_coalescing.md#top).")
    assert "<details>\n<summary><b>Solution</b>" in md and "The answer." in md
    assert "See the naive kernel and [this](03_coalescing.ipynb#top)." in md


def test_a_notebook_beside_its_chapter_is_not_a_second_source():
    """jupytext's route (`jupytext --to ipynb book/NN.md`) writes book/NN.ipynb: the build leaves it out."""
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "book/*.ipynb" in config["exclude_patterns"]
    assert "book/*.ipynb" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_exported_notebook_runs_under_nbval(chapter, tmp_path):
    nb = OUT / f"{chapter.stem}.ipynb"
    if not nb.exists():
        nbformat.write(notebooks.export(chapter), tmp_path / nb.name)
        nb = tmp_path / nb.name
    env = dict(os.environ)
    if env.get("SGEMM_BOOK_MODE", "") != "recorded":
        env.setdefault("SGEMM_BOOK_QUICK", "1")            # live: small sweeps, the point is that cells run
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-cell-timeout=900", "-o", "addopts=", str(nb)],
                          cwd=ROOT / "book", env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{chapter.name} failed under nbval:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_page_says_it_is_a_myst_notebook(chapter):
    # without the header jupytext guesses the format, and a page with ':::' blocks reads as
    # Pandoc markdown, which needs a pandoc program the book's environment does not have
    head = chapter.read_text().split("---", 2)[1] if chapter.read_text().startswith("---") else ""
    assert "format_name: myst" in head, f"{chapter.name} has no jupytext header naming the MyST format"
