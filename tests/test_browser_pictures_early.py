"""The pages of chapters 1 to 5 on a phone, in a real browser: no text of any figure is cut by the
figure's edge at 390 px, and each picture's slider or menu (helpers.figures.pictures) changes the
drawing there.

Reads the whole book (``make book``) or the chapters alone (``scripts/build_chapters.sh``);
uses Debian's chromium through the fixtures and helpers of tests/test_browser.py."""
from pathlib import Path

import pytest

from test_browser import (LAYOUT_JS, RESIZED_JS, browser, check_menus, check_slider, open_page,  # noqa: F401
                          start_server, wait_until)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
BUILDS = [ROOT / "_build" / "html", ROOT / "_build" / "chapters" / "_build" / "html"]
PICTURES = [("02_naive", "how much each level holds", "menu"), ("04_smem_tiling", "TILE = ", "slider"),
            ("04_smem_tiling", "TILE = ", "menu"), ("05_thread_tile_1d", " tile, ", "slider")]
PAGES = ["01_cpu", "02_naive", "03_coalescing", "04_smem_tiling", "05_thread_tile_1d"]
# JavaScript: the page's fonts are in and its figures drawn at their boxes' widths
READY_JS = f"() => document.fonts.status === 'loaded' && ({RESIZED_JS})()"

# JavaScript: per figure, the texts (labels on bars, ticks, titles, legend, annotations, slider) that
# reach out of the figure's box by more than a pixel, and the figure's title
CUT_JS = """() => Array.from(document.querySelectorAll('div.plotly-graph-div')).map(d => {
  const box = d.getBoundingClientRect();
  const cut = Array.from(d.querySelectorAll('text')).filter(t => {
    const r = t.getBoundingClientRect();
    if (!t.textContent.trim() || r.width === 0 || getComputedStyle(t).fill === 'rgba(0, 0, 0, 0)') return false;
    return r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1;
  }).map(t => t.textContent.slice(0, 40));
  return {title: (d._fullLayout.title && d._fullLayout.title.text || '').slice(0, 60), cut: cut};
})"""


def built():
    return next((b for b in BUILDS if (b / "book" / "02_naive.html").exists()), None)


@pytest.fixture(scope="module")
def site():
    html = built()
    if html is None:
        pytest.skip("chapters 1-5 are not built: run `make book` or scripts/build_chapters.sh first")
    url, httpd = start_server(html)
    yield url, html
    httpd.shutdown()


def figure_index(page, title_part: str) -> int:
    titles = [p["title"].replace("<br>", " ").replace("\xa0", " ") for p in page.evaluate(LAYOUT_JS)["plots"]]
    found = [i for i, t in enumerate(titles) if title_part in t]
    assert found, f"no figure whose title has {title_part!r}: {titles}"
    return found[0]


@pytest.mark.parametrize("stem", PAGES)
def test_on_a_phone_no_text_is_cut_and_the_pictures_move(browser, site, stem):  # noqa: F811
    """At 390 px: no text of any figure reaches out of the figure's box, each picture's control
    changes its drawing, and nothing scrolls sideways. (At 1400 px, tests/test_browser.py clicks
    every control of the full build's pages, these pictures' among them.)"""
    url, html = site
    if not (html / "book" / f"{stem}.html").exists():
        pytest.skip(f"{stem} is not built")
    page, problems = open_page(browser, url, f"book/{stem}.html", width=390)
    assert wait_until(page, READY_JS), "the figures were not drawn at 390 px"
    cut = [f for f in page.evaluate(CUT_JS) if f["cut"]]
    assert not cut, f"texts cut by the figure's edge at 390 px: {cut}"
    for _, title, control in [p for p in PICTURES if p[0] == stem]:
        i = figure_index(page, title)
        page.locator("div.plotly-graph-div").nth(i).scroll_into_view_if_needed()
        found = check_slider(page, i) if control == "slider" else check_menus(page, i)
        assert not found, (title, found)
    overflow = page.evaluate(LAYOUT_JS)["overflow"]
    assert overflow <= 1, f"the page scrolls sideways by {overflow} px at 390 px"
    assert not problems, problems
