"""The pictures of chapters 10, 11 and 13 in a real browser (tests/test_browser.py's fixtures and
helpers): the warp-tile hierarchy follows its slider, the autotuning search's parallel coordinates
carry a colour bar and fit a phone, and no two kernels share a point on the leaderboard's roofline;
with the checks of test_browser.py at both widths on these pages, in the same load of each.

Reads the full build (`_build/html`) or, where only a few chapters were built, the one of
`scripts/build_chapters.sh` (`_build/chapters/_build/html`)."""

import pytest

from test_browser import (ROOT, FIGURES_JS, browser, check_desktop, check_phone, check_slider,  # noqa: F401
                          open_page, resize, start_server)                                 # (browser: a fixture)

pytestmark = pytest.mark.browser
BUILDS = (ROOT / "_build" / "html", ROOT / "_build" / "chapters" / "_build" / "html")
PAGES = ("10_warptiling.html", "11_autotuning.html", "13_leaderboard_deep_dive.html")    # read whole here
# the warp-tile hierarchy: its page and the start of its title (test_browser.check_desktop leaves its slider
# to this file)
HIERARCHY_PAGE, HIERARCHY_TITLE = "10_warptiling.html", "128 threads; a warp's lanes"


def built(page: str):
    return next((b for b in BUILDS if (b / "book" / page).exists()), None)


@pytest.fixture(scope="module")
def serve():
    servers = {}

    def url(page: str) -> str:
        root = built(page)
        if root is None:
            pytest.skip(f"book/{page} is not built: run scripts/build_chapters.sh {page[:-5]}")
        if root not in servers:
            servers[root] = start_server(root)
        return servers[root][0]
    yield url
    for _, httpd in servers.values():
        httpd.shutdown()


def figure_index(page, title_start: str) -> int:
    titles = page.evaluate("() => Array.from(document.querySelectorAll('div.plotly-graph-div'))"
                           ".map(d => (d._fullLayout.title && d._fullLayout.title.text) || '')")
    found = [i for i, t in enumerate(titles) if t.startswith(title_start)]
    assert found, f"no figure titled {title_start!r}: {titles}"
    return found[0]


def test_the_warp_tile_hierarchy_follows_its_slider(browser, serve):  # noqa: F811
    page, problems = open_page(browser, serve(HIERARCHY_PAGE), f"book/{HIERARCHY_PAGE}", width=1400)
    i = figure_index(page, HIERARCHY_TITLE)
    title = lambda: page.evaluate("(i) => document.querySelectorAll('div.plotly-graph-div')[i]"  # noqa: E731
                                  "._fullLayout.title.text", i)
    before = title()
    assert not check_slider(page, i)
    assert title() != before
    visible = page.evaluate(FIGURES_JS)[i]["visible"]
    assert sum(visible) >= 32 + 2                     # 32 lanes, the warp tiles and their labels
    read_whole(page, problems, HIERARCHY_PAGE)


def test_the_parallel_coordinates_fit_a_phone_with_a_colour_bar(browser, serve):  # noqa: F811
    page, problems = open_page(browser, serve("11_autotuning.html"), "book/11_autotuning.html", width=1400)
    read_whole(page, problems, "11_autotuning.html")      # the figures drawn again at 390 px, as on a phone
    i = figure_index(page, "Every timed config")
    info = page.evaluate("(i) => { const d = document.querySelectorAll('div.plotly-graph-div')[i];"
                         " return {bar: d.querySelectorAll('g.colorbar').length,"
                         " over: document.documentElement.scrollWidth - document.documentElement.clientWidth,"
                         " w: d.getBoundingClientRect().width}; }", i)
    assert info["bar"] >= 1 and info["over"] <= 0 and info["w"] <= 390


def test_no_two_kernels_share_a_point_on_the_leaderboards_roofline(browser, serve):  # noqa: F811
    page, problems = open_page(browser, serve("13_leaderboard_deep_dive.html"), "book/13_leaderboard_deep_dive.html",
                               width=1400)
    i = figure_index(page, "Every chapter's kernel on the roofline")
    points = page.evaluate("(i) => document.querySelectorAll('div.plotly-graph-div')[i]._fullData"
                           ".filter(t => t.mode && t.mode.includes('markers') && t.x && t.x.length === 1)"
                           ".map(t => [t.name, t.x[0], t.y[0]])", i)
    assert len(points) >= 10
    spots = {(round(x, 6), round(y, 6)) for _, x, y in points}
    assert len(spots) == len(points), points
    read_whole(page, problems, "13_leaderboard_deep_dive.html")


def read_whole(page, problems, name: str) -> None:
    """The checks of tests/test_browser.py on the page open at 1400 px: check_desktop, then
    check_phone at 390 px (the page test leaves the pages of this file to it)."""
    check_desktop(page, (built(name) / "book" / name).read_text(), name)
    resize(page, 390)
    check_phone(page, problems)
