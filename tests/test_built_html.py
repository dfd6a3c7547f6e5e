"""The built book: self-contained (no asset from another host), light where it draws nothing,
no traceback on any page, a notebook link on every chapter, published as-is (CPU only)."""
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

HTML = Path(__file__).resolve().parents[1] / "_build" / "html"


def built_pages():
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts) if HTML.exists() else []


class Assets(HTMLParser):
    """The URLs a page loads: scripts, stylesheets, images (not plain links)."""

    def __init__(self):
        super().__init__()
        self.loaded = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.loaded.append(a["src"])
        elif tag == "img" and a.get("src"):
            self.loaded.append(a["src"])
        elif tag == "link" and "stylesheet" in (a.get("rel") or "") and a.get("href"):
            self.loaded.append(a["href"])


def loaded(page: Path) -> list[str]:
    parser = Assets()
    parser.feed(page.read_text(errors="replace"))
    return parser.loaded


def test_assets_parser_sees_remote_scripts_and_styles_but_not_links():
    p = Assets()
    p.feed('<script src="https://cdn.x/a.js"></script><link rel="stylesheet" href="//cdn.x/b.css">'
           '<a href="https://example.org">x</a><link rel="canonical" href="https://example.org/c">')
    assert p.loaded == ["https://cdn.x/a.js", "//cdn.x/b.css"]


def test_book_was_built():
    if not HTML.exists():
        pytest.skip("run `make book` first")
    assert (HTML / "_static" / "plotly.min.js").stat().st_size > 1_000_000
    assert (HTML / ".nojekyll").exists(), "branch-based GitHub Pages would hide _static"


def test_tables_that_scroll_say_so():
    # the book's own CSS: shadows that stay with a table's box, covers that move with the table
    css = (HTML.parent.parent / "helpers" / "publish" / "sgemm.css").read_text()
    assert re.search(r"\.sgemm-table \{\s*background:", css) and css.count(" local,") == 2 and css.count(" scroll") >= 2
    if not HTML.exists():
        pytest.skip("run `make book` first")
    pages = [p for p in built_pages() if "sgemm-table" in p.read_text(errors="replace")]
    assert pages and all(any(u.split("?")[0].endswith("_static/sgemm.css") for u in loaded(p)) for p in pages)


@pytest.mark.parametrize("page", built_pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_no_remote_assets(page):
    remote = [u for u in loaded(page) if u.startswith(("http://", "https://", "//"))]
    assert not remote, f"{page.name} loads {remote} from the network"


@pytest.mark.parametrize("page", built_pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_plotly_only_where_a_figure_is_drawn(page):
    text = page.read_text(errors="replace")
    has_figure = "plotly-graph-div" in text
    uses_plotly = any(u.split("?")[0].endswith("plotly.min.js") for u in loaded(page))   # Sphinx adds ?v=...
    assert has_figure == uses_plotly, f"{page.name}: figure {has_figure}, plotly.js {uses_plotly}"
    if uses_plotly:
        assert re.search(r'<script(?=[^>]*plotly\.min\.js)(?=[^>]*\bdefer\b)[^>]*>', text), "plotly.js must not block the page"
    else:
        assert page.stat().st_size < 2_000_000
    assert not any("fontawesome.js" in u for u in loaded(page)), "1.5 MB of icon script: the theme's CSS has the icons"


@pytest.mark.parametrize("page", built_pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_no_traceback_on_any_page(page):
    text = page.read_text(errors="replace")
    assert "Traceback (most recent call last)" not in text and "site-packages/" not in text


@pytest.mark.parametrize("page", [p for p in built_pages() if p.parent.name == "book" and p.stem[:2].isdigit()],
                         ids=lambda p: p.stem)
def test_every_chapter_links_its_notebook(page):
    text = page.read_text(errors="replace")
    assert f"../notebooks/{page.stem}.ipynb" in text
    assert (HTML / "notebooks" / f"{page.stem}.ipynb").exists()
    # with no repository to fetch the code from, a downloaded notebook needs it installed: say where
    from helpers.publish.notebooks import repository
    assert repository() or 'href="00_intro.html#run-it-on-a-gpu">Run it on a GPU</a>' in text


BOOK = HTML.parents[1] / "book"


@pytest.mark.parametrize("source", sorted(p for p in BOOK.glob("*.md") if "helpers.banner()" in p.read_text()),
                         ids=lambda p: p.name)
def test_every_chapter_that_calls_the_banner_shows_it(source):
    # a notebook cell shows only its last expression: a banner followed by more code says nothing
    page = HTML / "book" / source.with_suffix(".html").name
    if not page.exists():
        pytest.skip("run `make book` first")
    assert 'class="sgemm-mode"' in page.read_text(), f"{source.name}: helpers.banner() is not the last line of its cell"


def test_word_counter_leaves_out_code_figures_and_collapsed_blocks():
    from helpers.publish import wordcount
    page = ('<nav>menu words</nav><article class="bd-article"><h1>Title here<a class="headerlink">#</a></h1>'
            '<p>Three plain words.</p><div class="cell_input"><pre>x = 1</pre></div>'
            '<details><summary>Deep</summary><p>hidden words not counted</p></details>'
            '<div class="dropdown admonition"><p>solution words</p></div>'
            '<table><tr><td>64x64</td><td>15.9</td></tr></table><script>var a = 1;</script></article>')
    assert wordcount.words(page) == 2 + 3 + 2


@pytest.mark.parametrize("stem", [p.stem for p in sorted(Path(__file__).resolve().parents[1].glob("book/[0-9][0-9]_*.md"))
                                  if int(p.stem[:2]) < 90])      # the chapters, not the appendix pages
def test_main_text_of_a_chapter_reads_in_a_sitting(stem):
    from helpers.publish import wordcount
    page = HTML / "book" / f"{stem}.html"
    if not page.exists():
        pytest.skip("run `make book` first")
    if stem.endswith("_deep_dive"):
        pytest.skip("a deep dive is read by choice, at any length")
    n = wordcount.page_words(page)
    assert n <= wordcount.limit(stem), f"{stem}: {n} words of main text (limit {wordcount.limit(stem)})"
