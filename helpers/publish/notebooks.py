"""Self-contained notebooks: one ``.ipynb`` per chapter, for JupyterLab, Notebook 7, VS Code,
Colab and Kaggle (``python -m helpers notebooks``; ``make book`` writes them next to the pages).

The chapters are MyST markdown notebooks; a plain notebook front end shows MyST directives as
raw text. The export turns them into what every front end renders:

* solutions in ``{admonition}`` dropdowns become collapsed ``<details>`` blocks, other
  admonitions quoted paragraphs, MyST roles plain text, links to chapters links to notebooks;
* each ``helpers.show_kernel(...)`` cell keeps its code and gets the kernel file as its
  output already, with an execution count (nbval refuses output on a cell never run),
  so the notebook shows every kernel before it runs;
* a first cell sets up a hosted runtime (Colab, Kaggle): when the ``helpers`` package is not
  installed, it installs it with its dependencies from the book's repository
  (:func:`helpers.settings.repository`: ``SGEMM_BOOK_REPOSITORY`` or ``_config.yml``); it
  does nothing anywhere else.

Colab opens a notebook from a GitHub repository by its path on a branch. The Pages workflow
(``.github/workflows/pages.yml``) pushes the exported notebooks to the branch
:data:`BRANCH` of the repository it runs in, after every build of the site, so the
launch button of each page (:func:`colab_url`) opens the notebook of that page as it was
last published.
"""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat
import yaml

from .. import settings
from ..runtime.source import kernel_source

SETUP = '''\
# Setup for a hosted runtime (Colab, Kaggle): install the book's package, with what it needs,
# from its repository if this notebook runs without it (with the CUDA 12 libraries where
# there is a GPU). Anywhere the book is installed, this cell does nothing.
import importlib, importlib.util, shutil, subprocess, sys
REPOSITORY = {repository!r}
if importlib.util.find_spec("helpers") is None:
    if not REPOSITORY:
        raise RuntimeError("this notebook needs the book's `helpers` package: clone the book's repository "
                           "and run `pip install -r requirements.txt && pip install -e .` in it")
    extra = "[cuda12]" if shutil.which("nvidia-smi") else ""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"sgemm-book-helpers{{extra}} @ git+{{REPOSITORY}}"],
                   check=True)
    importlib.invalidate_caches()
'''

BRANCH = "notebooks"     # the branch of the repository that holds the exported notebooks
COLAB = "https://colab.research.google.com/github"

DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{(\w[\w-]*)\}[ \t]*(.*?)\n(.*?)^\1[ \t]*$", re.S | re.M)
ROLE = re.compile(r"\{(?:doc|ref|term|numref|eq|download)\}`([^`<]*?)(?:\s*<[^>]*>)?`")
CHAPTER_LINK = re.compile(r"\]\((\d\d_[\w-]+)\.md(#[\w-]*)?\)")
SHOW_KERNEL = re.compile(r"show_kernel\(\s*[\"']([^\"']+)[\"']\s*(?:,\s*(?:region\s*=\s*)?[\"'](\w+)[\"']\s*)?\)")


def repository() -> str:
    return settings.repository()


def colab_url(stem: str, repository_url: str | None = None) -> str | None:
    """Where Colab opens the notebook of page ``book/<stem>``: its file on the branch :data:`BRANCH`
    of the book's GitHub repository (None when the repository is not on GitHub)."""
    slug = settings.github_slug(repository() if repository_url is None else repository_url)
    return f"{COLAB}/{slug}/blob/{BRANCH}/{stem}.ipynb" if slug else None


def chapters() -> list[Path]:
    """The chapter files (and their deep dives), in the order of the table of contents."""
    toc = yaml.safe_load((settings.ROOT / "_toc.yml").read_text())

    def files(entries):   # a chapter, then its sections (its deep dive), in order
        for entry in entries:
            yield entry["file"]
            yield from files(entry.get("sections", []))

    names = [toc["root"]] + [f for part in toc.get("parts", []) for f in files(part.get("chapters", []))]
    return [settings.ROOT / f"{f}.md" for f in names if (settings.ROOT / f"{f}.md").exists()]


def _options(body: str) -> tuple[dict, str]:
    """A directive's ``:key: value`` options and the rest of its body."""
    opts, lines = {}, body.splitlines()
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        key, _, value = lines.pop(0)[1:].partition(":")
        opts[key.strip()] = value.strip()
    return opts, "\n".join(lines).strip()


def markdown(text: str) -> str:
    """MyST markdown as plain (Jupyter) markdown."""
    def directive(m):
        name, arg, (opts, body) = m.group(2), m.group(3).strip(), _options(m.group(4))
        body = markdown(body)
        if "dropdown" in opts.get("class", ""):
            return f"<details>\n<summary><b>{arg or 'Details'}</b> (click to open)</summary>\n\n{body}\n\n</details>"
        if name in ("code-block", "code"):
            return f"```{arg}\n{body}\n```"
        title = arg or name.capitalize()
        return "\n".join(f"> {line}" if line else ">" for line in f"**{title}.** {body}".splitlines())

    text = DIRECTIVE.sub(directive, text)
    text = ROLE.sub(lambda m: m.group(1), text)
    return CHAPTER_LINK.sub(lambda m: f"]({m.group(1)}.ipynb{m.group(2) or ''})", text)


def kernel_output(name: str, region: str | None = None) -> nbformat.NotebookNode:
    text = kernel_source(name, region)
    return nbformat.v4.new_output("display_data", data={"text/markdown": text, "text/plain": text})


def export(chapter: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(chapter)
    cells = [nbformat.v4.new_code_cell(SETUP.format(repository=repository()),
                                       metadata={"tags": ["hide-input"], "jupyter": {"source_hidden": True}})]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = markdown(cell.source)
        elif cell.cell_type == "code":
            tags = cell.metadata.get("tags", [])
            if "hide-input" in tags or "remove-input" in tags:
                cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            m = SHOW_KERNEL.search(cell.source)
            if m:   # shown before anything runs; a count too, as a notebook runner expects of a cell with output
                cell.outputs = [kernel_output(m.group(1), m.group(2))]
                cell.execution_count = sum(c.cell_type == "code" for c in cells) + 1
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def export_all(out: str | Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chapter in chapters():
        path = out / f"{chapter.stem}.ipynb"
        nbformat.write(export(chapter), path)
        written.append(path)
    return written
