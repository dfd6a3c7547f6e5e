"""The pictures of chapters 6-9 in a real browser: at 1400 px the control of each moves the
drawing, and at 390 px (a phone) it stays inside the page; with the checks of test_browser.py at
both widths, in the same load of the page. Reuses the driver of test_browser.py;
needs the chapters built (``make book``, or ``scripts/build_chapters.sh 06_thread_tile_2d ...``
with ``SGEMM_BOOK_HTML=_build/chapters/_build/html``)."""
import os
from pathlib import Path

import pytest

import test_browser as tb
from test_browser import LAYOUT_JS, FIGURES_JS, browser, open_page  # noqa: F401

pytestmark = pytest.mark.browser

HTML = Path(os.environ.get("SGEMM_BOOK_HTML", tb.HTML))
# page -> the title words of its picture (the first figure whose title holds them); tests/test_browser.py
# leaves these pages to this file
PICTURES = {"06_thread_tile_2d": "block,", "07_vectorized": "Tile rows of", "08_bank_conflicts": "transposed",
            "09_double_buffering": "stage"}


@pytest.fixture(scope="module")
def server():
    if not (HTML / "book").exists():
        pytest.skip(f"{HTML} is not built")
    url, httpd = tb.start_server(HTML)
    yield url
    httpd.shutdown()


@pytest.mark.parametrize("stem", sorted(PICTURES))
def test_the_picture_moves_and_fits(browser, server, stem):
    """At 1400 px the picture draws, has a control, and the page passes test_browser.check_desktop
    (every control clicked, the picture's among them); at 390 px the picture stays inside the
    page, which passes test_browser.check_phone: the page test leaves these pages to this one."""
    page, problems = open_page(browser, server, f"book/{stem}.html", width=1400)
    figs, plots = page.evaluate(FIGURES_JS), page.evaluate(LAYOUT_JS)["plots"]
    index = tb.picture_index([p["title"] for p in plots], PICTURES[stem])
    assert index is not None, f"no figure of {stem} has {PICTURES[stem]!r} in its title"
    f = figs[index]
    assert f["svg"] and f["drawn"], f"the picture of {stem} did not draw"
    assert f["menu"] or f["slider"], f"the picture of {stem} has no control"
    tb.check_desktop(page, (HTML / "book" / f"{stem}.html").read_text(), f"{stem}.html")
    tb.resize(page, 390)
    box = page.evaluate(LAYOUT_JS)["plots"][index]["box"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= 391, f"the picture of {stem} overflows: {box}"
    tb.check_phone(page, problems)
