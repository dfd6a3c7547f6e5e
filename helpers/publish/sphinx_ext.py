"""Sphinx extension for the built book: plotly.js from the package, only where a page draws
figures; no asset from another host.

* Copies ``plotly.min.js`` from the installed plotly package into ``_static`` and adds
  it, deferred, to the pages that have a figure: the others stay light, and no page
  waits for 4.8 MB of script before it shows its text. The figures' own scripts wait
  for the page to be parsed (:func:`helpers.figures.style.show`), so the order holds.
* Reads the book's repository from :func:`helpers.settings.repository` (``SGEMM_BOOK_REPOSITORY``,
  which the Pages workflow sets to the repository it runs in, or ``_config.yml``). With a
  GitHub repository, each page's Colab button opens that page's exported notebook
  (:func:`helpers.publish.notebooks.colab_url`); with none, the launch buttons stay off.
* Puts a link to the chapter's notebook (written by ``python -m helpers notebooks`` into
  ``notebooks/`` next to the pages) at the top of every chapter and deep dive.
* Leaves ``book/*.ipynb`` out of the build: a notebook that jupytext writes beside its
  chapter would otherwise be a second source of the same page.
* Checks the recorded data before any page runs: a file that is not valid, or a chosen
  device that lacks data sources the book reads, stops the build with one line that says so.
* Adds the book's own stylesheet (``sgemm.css`` next to this file) to every page.
* Warns (and so fails a ``-W`` build) when a page would load a script or stylesheet
  from another host, which would break the offline book.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import plotly
from sphinx.errors import ConfigError
from sphinx.util import logging

from .. import settings
from ..measure import datafile, sources
from . import notebooks

PLOTLY_JS = "plotly.min.js"
CSS = Path(__file__).with_name("sgemm.css")     # the book's own style, on every page
FIGURE_MARK = "plotly-graph-div"


def _copy_static(app):
    if app.builder.format != "html":
        return
    src = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not src.exists():
        raise RuntimeError(f"{src} is missing: the plotly package is incomplete")
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, static / PLOTLY_JS)
    shutil.copyfile(CSS, static / CSS.name)


def _remote(url) -> bool:
    url = str(getattr(url, "filename", url) or "")
    return url.startswith(("http://", "https://", "//"))


def _is_thebe(asset) -> bool:
    text = str(getattr(asset, "filename", None) or "") + str(getattr(asset, "attributes", {}).get("body", ""))
    return "thebe" in text.lower()


def _page(app, pagename, templatename, context, doctree):
    log = logging.getLogger(__name__)
    if FIGURE_MARK in context.get("body", ""):
        app.add_js_file(PLOTLY_JS, priority=100, loading_method="defer")
    if pagename.startswith("book/") and "body" in context and context.get("page_source_suffix") == ".md":
        name = pagename.split("/", 1)[1]
        # without the repository's URL a downloaded notebook cannot fetch the book's code itself
        where = ("a CUDA GPU" if app.config.html_theme_options.get("repository_url") else
                 'a CUDA GPU with the book\'s code installed: <a href="00_intro.html#run-it-on-a-gpu">Run it on a GPU</a>')
        colab = notebooks.colab_url(name) if app.config.html_theme_options.get("launch_buttons") else None
        also = f' or <a class="sgemm-colab" href="{colab}">open it in Colab</a>' if colab else ""
        context["body"] = (f'<p class="sgemm-notebook"><a href="../notebooks/{name}.ipynb" download>'
                           f"Download this chapter as a Jupyter notebook</a>{also} (runs live on {where}; "
                           f"recorded figures anywhere else)</p>" + context["body"])
    # The book has no live kernel behind its pages: drop the Thebe launcher Jupyter Book
    # adds (it would fetch thebe from a CDN).
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not _is_thebe(a)]
        for asset in context.get(key, []):
            if _remote(asset):
                log.warning(f"{pagename}: loads {getattr(asset, 'filename', asset)} from the network; the book "
                            "must work offline (math in $...$ pulls MathJax from a CDN: write formulas as code "
                            "or plain text)")


def _colab_opens_the_notebook(app, pagename, templatename, context, doctree):
    """The theme's Colab button points at the page's source (a MyST ``.md`` Colab cannot open):
    point it at the page's exported notebook instead. Runs after the theme's handler (501)."""
    url = notebooks.colab_url(pagename.rsplit("/", 1)[-1])
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            if button.get("text") == "Colab" and url:
                button["url"] = url


def _repository(app, config):
    """The repository from SGEMM_BOOK_REPOSITORY or _config.yml; launch buttons (Colab) only
    when it is on GitHub, where Colab can open the published notebooks."""
    options = config.html_theme_options
    url = settings.repository()
    options["repository_url"] = url
    if not settings.github_slug(url):
        options["launch_buttons"] = {}
        options["repository_url"] = ""
    # a notebook jupytext writes beside its chapter (book/NN.ipynb) would be a second source of the page
    if "book/*.ipynb" not in config.exclude_patterns:
        config.exclude_patterns = list(config.exclude_patterns) + ["book/*.ipynb"]


def check_data() -> None:
    """The recorded data the book reads: valid, and complete for the chosen device.
    Raises DataError with a one-line message that names the file or device and what is wrong."""
    rec = datafile.load()
    missing = [name for name in sources.required() if not rec.has(name)]
    if missing:
        reference = settings.project()["reference-device"]
        raise datafile.DataError(
            f"{rec.path.name} ({rec.device_name}) has no recorded {', '.join(missing)}: the book reads every data "
            f"source; build it for the reference device {reference!r} (unset SGEMM_BOOK_DEVICE), or record the "
            f"missing ones on that GPU (`python -m helpers record --chapter NAME`)")


def _check_data(app):
    try:
        check_data()
    except datafile.DataError as exc:
        raise ConfigError(str(exc)) from None


FONTAWESOME_JS = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')


def _drop_icon_script(app, exc):
    """The theme loads Font Awesome twice: as a webfont from its CSS, and as a 1.5 MB script
    that swaps icons for SVGs (for custom icons, which the book has none of). Without the
    script a page with no figure loads about 1 MB instead of 2.5 MB, and shows the same icons."""
    if exc is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text()
        lean = FONTAWESOME_JS.sub("", text)
        if lean != text:
            page.write_text(lean)


# Extensions Jupyter Book adds that do not declare whether Sphinx may read documents in parallel
# (so Sphinx reads one at a time): the first numbers sections once reading is done, in the main
# process; the second acts on LaTeX builds. Neither keeps per-document state in the environment,
# and the pages of a parallel build are those of a serial one.
READ_IN_PARALLEL = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def _parallel_reading(app):
    for name in READ_IN_PARALLEL:
        ext = app.extensions.get(name)
        if ext is not None and ext.parallel_read_safe is None:
            ext.parallel_read_safe = True


def setup(app):
    app.add_css_file(CSS.name)
    app.connect("builder-inited", _parallel_reading)
    app.connect("config-inited", _repository)
    app.connect("builder-inited", _check_data)
    app.connect("html-page-context", _colab_opens_the_notebook, priority=900)
    app.connect("build-finished", _drop_icon_script)
    app.connect("builder-inited", _copy_static)
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
