"""Sphinx extension for the built book: ship plotly.js locally, forbid remote assets.

* Copies ``plotly.min.js`` from the installed plotly package into ``_static`` and
  loads it on every page, so figures render with no network (no CDN).
* Warns (and so fails a ``-W`` build) when a page would load a script or
  stylesheet from another host, which would break the offline book.
"""
from __future__ import annotations

import shutil
from pathlib import Path

PLOTLY_JS = "plotly.min.js"


def _copy_plotly(app):
    import plotly

    src = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not src.exists():
        raise RuntimeError(f"{src} is missing: the plotly package is incomplete")
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, static / PLOTLY_JS)


def _remote(url) -> bool:
    url = str(getattr(url, "filename", url) or "")
    return url.startswith(("http://", "https://", "//"))


def _is_thebe(asset) -> bool:
    text = str(getattr(asset, "filename", None) or "") + str(getattr(asset, "attributes", {}).get("body", ""))
    return "thebe" in text.lower()


def _check_assets(app, pagename, templatename, context, doctree):
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    # The book has no live kernel behind its pages: drop the Thebe launcher that
    # Jupyter Book adds (it registers its script twice, a page error, and would
    # fetch thebe from a CDN).
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not _is_thebe(a)]
    for key in ("script_files", "css_files"):
        for asset in context.get(key, []):
            if _remote(asset):
                log.warning(f"{pagename}: loads {getattr(asset, 'filename', asset)} from the network; "
                            "the book must work offline (math in $...$ pulls MathJax from a CDN: "
                            "write formulas as code or plain text)")


def setup(app):
    app.add_js_file(PLOTLY_JS, priority=100)
    app.connect("builder-inited", lambda app: _copy_plotly(app) if app.builder.format == "html" else None)
    app.connect("html-page-context", _check_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


class PlotlyJSONRenderer:
    """myst-nb mime plugin: the book draws figures from their text/html twin.

    :func:`helpers.plots.show` emits Plotly JSON (for JupyterLab) *and* HTML; the
    JSON needs no rendering in the book, so it is dropped here instead of
    raising an "unknown mime type" warning. Any other unknown type still warns.
    """

    mime_priority_overrides = [("*", "application/vnd.plotly.v1+json", None)]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if data.mime_type == "application/vnd.plotly.v1+json":
            return []
        return None
