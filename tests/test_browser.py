"""The built book in a real browser: every figure draws, sliders and menus work, no errors.

Needs `make book` first (``make test`` does it) and Debian's ``chromium``
(``.ci/run`` installs it). Playwright drives that binary; it never downloads one.
"""
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# JavaScript: what a slider or menu of the Plotly div d may change: visibility, data, axes, title
STATE_OF = """d => JSON.stringify([(d._fullData || []).map(t => [t.visible, t.type,
            t.x && Array.from(t.x).slice(0, 8), t.y && Array.from(t.y).slice(0, 8), t.z && t.z.length]),
          d._fullLayout && [d._fullLayout.title && d._fullLayout.title.text,
            d._fullLayout.xaxis && d._fullLayout.xaxis.range, d._fullLayout.yaxis && d._fullLayout.yaxis.range]])"""
# JavaScript: for each Plotly div, the number of drawn trace groups and the visibility list.
FIGURES_JS = f"""() => Array.from(document.querySelectorAll('div.plotly-graph-div')).map(d => ({{
  id: d.id,
  drawn: d.querySelectorAll('g.trace, g.hm, image, g.parcoords, .table').length,
  svg: d.querySelectorAll('svg.main-svg').length,
  data: (d._fullData || []).length,
  visible: (d._fullData || []).map(t => t.visible === true),
  state: ({STATE_OF})(d),
  slider: d.querySelectorAll('rect.slider-rail-touch-rect').length,
  menu: d.querySelectorAll('g.updatemenu-header-group').length,
}}))"""


def pages():
    return sorted((HTML / "book").glob("*.html")) if HTML.exists() else []


def start_server(root: Path):
    """A static HTTP server of ``root`` on a free port of 127.0.0.1: (its URL, the server to shut down)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd


@pytest.fixture(scope="module")
def server():
    if not (HTML / "book").exists():
        pytest.skip(f"{HTML} is not built: run `make book` first")
    url, httpd = start_server(HTML)
    yield url
    httpd.shutdown()


class Chromium:
    """One Chromium per test process, with one tab, shared by every browser test in a row:
    started by the first, closed after the last (tests/conftest.py) or at the end of the run.
    Its on-disk profile keeps V8's compiled code of plotly.js (4.8 MB), and its one tab keeps
    the renderer that has run it: a new browser, or a new tab, for each page would parse and
    compile plotly.js again (about a second per page)."""

    def __init__(self):
        self.playwright = self.context = self.tab = None
        self.problems: list = []

    def start(self, profile: Path):
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.context = self.playwright.chromium.launch_persistent_context(profile, executable_path=CHROMIUM,
                                                                          args=ARGS)
        self.new_tab(self.context.pages[0] if self.context.pages else None)
        return self

    def new_tab(self, tab=None):
        """Read pages in ``tab`` (a new one if None), listening to what it reports."""
        self.tab = tab or self.context.new_page()
        # what the page being read reports: console errors, script errors, requests leaving the machine
        self.tab.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type == "error"
                    else None)
        self.tab.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

        def on_request(req):
            host = urlparse(req.url).hostname
            if req.url.startswith(("http://", "https://")) and host not in ("127.0.0.1", "localhost"):
                self.problems.append(f"network request to {req.url}")

        self.tab.on("request", on_request)

    def close(self):
        if self.playwright is not None:
            self.context.close()
            self.playwright.stop()
        self.playwright = self.context = self.tab = None


CHROME = Chromium()


def close_browser():
    """Close the shared Chromium (the next browser test starts another)."""
    CHROME.close()


@pytest.fixture(scope="module")
def browser(request, tmp_path_factory):
    """The shared Chromium (:class:`Chromium`), started if it is not running."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run should have installed Debian's chromium")
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium)")
    if CHROME.playwright is None:
        CHROME.start(tmp_path_factory.mktemp("chromium-profile"))
        request.config.add_cleanup(close_browser)
    return CHROME


# JavaScript: every figure of the page has drawn its SVG from its data.
DRAWN_JS = """() => Array.from(document.querySelectorAll('div.plotly-graph-div'))
  .every(d => d.querySelector('svg.main-svg') && (d._fullData || []).length > 0)"""
WAIT_MS = 5000       # the longest wait for a figure to draw, or for a control to change the plot


def wait_until(page, js, arg=None) -> bool:
    """Whether the JavaScript predicate became true within WAIT_MS (polled every frame)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(js, arg=arg, timeout=WAIT_MS)
        return True
    except PlaywrightTimeout:
        return False


def open_page(browser, server, path, width=1280):
    """``path`` in the shared tab at ``width`` px, its figures drawn: (the tab, the list of
    problems it reports from now on)."""
    if browser.tab.is_closed():          # a test closed the shared tab: read in a new one
        browser.new_tab()
    page = browser.tab
    browser.problems = problems = []
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{server}/{path}", wait_until="load")
    wait_until(page, DRAWN_JS)           # the callers' checks say which figure did not draw
    return page, problems


def test_book_has_pages():
    if not HTML.exists():
        pytest.skip("book not built")
    names = [p.name for p in pages()]
    assert "02_naive.html" in names and "99_status.html" in names, names


# JavaScript: what a reader sees of the page's layout (plot areas, sideways scroll, bytes).
LAYOUT_JS = """() => ({
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  text: document.body.innerText,
  bytes: performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
           .reduce((s, e) => s + (e.decodedBodySize || 0), 0),
  plots: Array.from(document.querySelectorAll('div.plotly-graph-div')).map(d => ({
    id: d.id, w: d._fullLayout._size.w, h: d._fullLayout._size.h,
    title: (d._fullLayout.title && d._fullLayout.title.text || '').slice(0, 60),
    box: d.getBoundingClientRect().toJSON(),
    menus: (d._fullLayout.updatemenus || []).length,
  })),
})"""
MIN_PLOT_PX = 200                  # width and height of a figure's plot area at 1400 px
LIGHT_PAGE_BYTES = 2_000_000       # a page without figures loads no plotly.js
TRACEBACK = ("Traceback (most recent call last)",)


def state(page, index: int) -> str:
    return page.evaluate(f"(i) => ({STATE_OF})(document.querySelectorAll('div.plotly-graph-div')[i])", index)


# JavaScript: figure i's state differs from ``before``.
# each figure's title inside its figure, and its subtitle (where the data came from) under it
TITLES_JS = """() => Array.from(document.querySelectorAll('div.plotly-graph-div')).map((d, i) => {
    const t = d.querySelector('.gtitle'), s = d.querySelector('.gtitle-subtitle');
    if (!t || !t.textContent) return null;
    const r = d.getBoundingClientRect(), a = t.getBoundingClientRect();
    const wrong = [];
    if (a.top < r.top - 1) wrong.push('title above the figure');
    if (s && s.textContent && s.getBoundingClientRect().top < a.bottom - 2) wrong.push('subtitle not under the title');
    return wrong.length ? `figure ${i} (${t.textContent.slice(0, 40)}): ${wrong.join(', ')}` : null;
}).filter(x => x)"""
CHANGED_JS = f"([i, before]) => ({STATE_OF})(document.querySelectorAll('div.plotly-graph-div')[i]) !== before"
# JavaScript: how far the lowest and the rightmost button of figure i's open menu reach past the figure (px)
MENU_REACH_JS = """(i) => { const d = document.querySelectorAll('div.plotly-graph-div')[i];
  const box = d.getBoundingClientRect();
  const rs = Array.from(d.querySelectorAll('g.updatemenu-dropdown-button')).map(b => b.getBoundingClientRect());
  return [Math.max(-Infinity, ...rs.map(r => r.bottom - box.bottom)),
          Math.max(-Infinity, ...rs.map(r => r.right - box.right))]; }"""


def changes(page, index: int, before: str) -> bool:
    """Whether the plot of figure ``index`` leaves the state ``before`` (within WAIT_MS)."""
    return wait_until(page, CHANGED_JS, [index, before])


def check_menus(page, index: int) -> list[str]:
    """Open each dropdown of figure ``index``: every button inside the figure, and picking
    another one changes the plot."""
    out = []
    div = page.locator("div.plotly-graph-div").nth(index)
    headers = div.locator("g.updatemenu-header-group")
    for m in range(headers.count()):
        before = state(page, index)
        headers.nth(m).click()
        buttons = div.locator("g.updatemenu-dropdown-button")
        wait_until(page, "([i, n]) => document.querySelectorAll('div.plotly-graph-div')[i]"
                         ".querySelectorAll('g.updatemenu-dropdown-button').length >= n",
                   [index, 1])      # plotly draws the open menu's buttons in the click handler
        below, right = page.evaluate(MENU_REACH_JS, index)
        if below > 1 or right > 1:
            out.append(f"menu {m}: a button ends {below:.0f} px below, {right:.0f} px right of the figure")
        if buttons.count() < 2:
            headers.nth(m).click()           # close it again
            continue
        active = page.evaluate("([i, m]) => document.querySelectorAll('div.plotly-graph-div')[i]"
                               "._fullLayout.updatemenus[m].active", [index, m])
        buttons.nth(active + 1 if active + 1 < buttons.count() else active - 1).click()
        if not changes(page, index, before):
            out.append(f"menu {m}: picking another entry did not change the plot")
    return out


def check_slider(page, index: int) -> list[str]:
    """Click the end of the slider's rail away from the active step: the plot changes."""
    div = page.locator("div.plotly-graph-div").nth(index)
    div.scroll_into_view_if_needed()
    box = div.locator("rect.slider-rail-touch-rect").first.bounding_box()
    before = state(page, index)
    active = page.evaluate("(i) => document.querySelectorAll('div.plotly-graph-div')[i]"
                           "._fullLayout.sliders[0].active", index)
    x = box["x"] + box["width"] - 3 if active == 0 else box["x"] + 3
    page.mouse.click(x, box["y"] + box["height"] / 2)
    return [] if changes(page, index, before) else ["the slider did not change the plot"]


# JavaScript: every figure has been drawn again at its box's width (plotly redraws them a moment
# after the window's resize), menus used before included: a step that sets a height must not
# freeze the width
RESIZED_JS = """() => Array.from(document.querySelectorAll('div.plotly-graph-div')).every(d =>
  !d._fullLayout || Math.abs(d._fullLayout.width - d.getBoundingClientRect().width) <= 1)"""


def owned_pictures() -> dict:
    """page -> the title words of its pictures whose controls a picture test clicks at a desktop
    width (tests/test_browser_pictures_late.py): :func:`check_desktop` leaves those to it."""
    import test_browser_pictures_late as late

    return {late.HIERARCHY_PAGE: [late.HIERARCHY_TITLE]}


def pages_read_by_picture_tests() -> dict:
    """page -> the picture test that reads it whole (:func:`check_desktop` and :func:`check_phone`
    beside its own checks, in one load of the page): the page test leaves those pages to it."""
    import test_browser_pictures_late as late
    import test_browser_pictures_mid as mid

    return {**{f"{stem}.html": "test_browser_pictures_mid.py" for stem in mid.PICTURES},
            **{name: "test_browser_pictures_late.py" for name in late.PAGES}}


def picture_index(titles: list, words: str):
    """The first figure whose title holds ``words`` (line breaks read as spaces), or None."""
    return next((i for i, t in enumerate(titles) if words in t.replace("<br>", " ")), None)


def check_desktop(page, html: str, name: str) -> None:
    """At 1400 px, the page ``name`` whose HTML is ``html``: every figure draws, with a plot area of
    at least MIN_PLOT_PX each way; its menus fit inside it and, like its slider, change the plot
    (those of the pictures that a picture test clicks are left to it: :func:`owned_pictures`);
    nothing scrolls sideways; no traceback is printed."""
    layout = page.evaluate(LAYOUT_JS)
    assert not any(t in layout["text"] for t in TRACEBACK), "a traceback is printed on the page"
    figs = page.evaluate(FIGURES_JS)
    expected = html.count('class="plotly-graph-div"')
    assert len(figs) == expected, f"{len(figs)} figures drawn, {expected} in the HTML"
    for f in figs:
        assert f["svg"] > 0 and f["data"] > 0, f"figure {f['id']} did not draw: {f}"
        assert f["drawn"] > 0, f"figure {f['id']} has no trace in its SVG: {f}"
    small = [f"{p['title']!r}: {p['w']:.0f} x {p['h']:.0f} px" for p in layout["plots"]
             if min(p["w"], p["h"]) < MIN_PLOT_PX]
    assert not small, f"plot areas under {MIN_PLOT_PX} px at 1400 px: {small}"
    assert layout["overflow"] <= 1, f"the page scrolls sideways by {layout['overflow']} px at 1400 px"
    misplaced = page.evaluate(TITLES_JS)
    assert not misplaced, f"titles out of place at 1400 px: {misplaced}"
    titles = [p["title"] for p in layout["plots"]]
    theirs = {w: picture_index(titles, w) for w in owned_pictures().get(name, [])}
    assert None not in theirs.values(), f"no figure for the picture tests' titles {theirs}: {titles}"
    controls = {}
    for i, (f, p) in enumerate(zip(figs, layout["plots"])):
        if i in theirs.values():
            continue
        found = (check_menus(page, i) if f["menu"] else []) + \
                (check_slider(page, i) if f["slider"] else [])
        if found:
            controls[p["title"]] = found
    assert not controls, f"controls that do not work: {controls}"


def check_phone(page, problems) -> None:
    """At 390 px (a phone): nothing scrolls sideways; a table wider than the page scrolls in its
    box, with shadows (helpers/publish/sgemm.css) that say so; nothing went wrong on the page."""
    overflow = page.evaluate(LAYOUT_JS)["overflow"]
    assert overflow <= 1, f"the page scrolls sideways by {overflow} px at 390 px"
    misplaced = page.evaluate(TITLES_JS)
    assert not misplaced, f"titles out of place at 390 px: {misplaced}"
    cues = page.evaluate("() => Array.from(document.querySelectorAll('.sgemm-table'))"
                         ".filter(d => d.scrollWidth > d.clientWidth + 1).map(d => getComputedStyle(d).backgroundAttachment)")
    assert all(c == "local, local, scroll, scroll" for c in cues), f"a scrolling table without its shadows: {cues}"
    assert not problems, "\n".join(problems)


def resize(page, width: int) -> None:
    """The window to ``width`` px, and the figures drawn again at their new widths."""
    page.set_viewport_size({"width": width, "height": 844 if width < 800 else 1000})
    assert wait_until(page, RESIZED_JS), f"the figures were not drawn again at {width} px"


def pytest_generate_tests(metafunc):
    # the pages for the page test (here, once this module and the picture tests' are imported)
    if "page_file" in metafunc.fixturenames:
        theirs = pages_read_by_picture_tests()
        metafunc.parametrize("page_file", [p for p in pages() if p.name not in theirs], ids=lambda p: p.name)


def test_page_reads_well_at_both_widths(browser, server, page_file):
    """:func:`check_desktop` at 1400 px, then :func:`check_phone` at 390 px. A page without
    figures stays light, and is read at 390 px only (nothing on it depends on the width but the
    layout). The pages of :func:`pages_read_by_picture_tests` are read whole by those tests."""
    html = page_file.read_text()
    expected = html.count('class="plotly-graph-div"')
    page, problems = open_page(browser, server, f"book/{page_file.name}", width=1400 if expected else 390)
    if not expected:
        layout = page.evaluate(LAYOUT_JS)
        assert not any(t in layout["text"] for t in TRACEBACK), "a traceback is printed on the page"
        assert not layout["plots"], f"{len(layout['plots'])} figures drawn, none in the HTML"
        assert layout["bytes"] < LIGHT_PAGE_BYTES, f"{layout['bytes']:,} B loaded by a page without figures"
        check_phone(page, problems)
        return
    check_desktop(page, html, page_file.name)
    resize(page, 390)
    check_phone(page, problems)


def test_the_picture_tests_read_pages_of_the_book():
    """Each page the page test leaves to a picture test is in the build, so that test reads it."""
    if not pages():
        pytest.skip("book not built")
    names = {p.name for p in pages()}
    assert not set(pages_read_by_picture_tests()) - names
    assert set(owned_pictures()) <= names


def test_the_book_has_sliders_and_menus():
    """The page test and the picture tests click every control; this one makes sure there are some to click."""
    text = "".join(p.read_text() for p in pages())
    if not text:
        pytest.skip("book not built")
    assert '"sliders"' in text and '"updatemenus"' in text
