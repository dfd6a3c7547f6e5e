"""Sphinx extension for the built book: plotly.js from the package, only where a page draws
figures; no asset from another host.

* Copies ``plotly.min.js`` from the installed plotly package into ``_static`` and adds
  it, deferred, to the pages that have a figure: the others stay light, and no page
  waits for 4.8 MB of script before it shows its text. The figures' own scripts wait
  for the page to be parsed (:func:`helpers.figures.style.show`), so the order holds.
* Turns the launch buttons on only when _config.yml names the book's repository.
* Puts a link to the chapter's notebook (written by ``python -m helpers notebooks`` into
  ``notebooks/`` next to the pages) at the top of every chapter.
* Adds the book's own stylesheet (``sgemm.css`` next to this file) to every page.
* Warns (and so fails a ``-W`` build) when a page would load a script or stylesheet
  from another host, which would break the offline book.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import plotly
from sphinx.util import logging

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
        context["body"] = (f'<p class="sgemm-notebook"><a href="../notebooks/{name}.ipynb" download>'
                           f"Download this chapter as a Jupyter notebook</a> (runs live on {where}; "
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


def _launch_buttons_need_a_repository(app, config):
    """The launch buttons (Colab) open a chapter from the book's repository: with no
    ``repository.url`` in _config.yml there is nothing to open, so they stay off."""
    options = config.html_theme_options
    if not options.get("repository_url"):
        options["launch_buttons"] = {}


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


def setup(app):
    app.add_css_file(CSS.name)
    app.connect("config-inited", _launch_buttons_need_a_repository)
    app.connect("build-finished", _drop_icon_script)
    app.connect("builder-inited", _copy_static)
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
