"""Words of a built page's main text: what a reader reads top to bottom without opening anything.

Counted on the HTML that ``make book`` writes: the article's prose, headings, tables and text
outputs. Left out: code cells' inputs, figures (their data and scripts), collapsed blocks
(dropdowns, hidden cells, exercise solutions), and the navigation around the article.
"""
from __future__ import annotations

import re
from pathlib import Path

# The longest main text a chapter may have, in words (the final kernel's chapter is the book's
# longest on purpose: it assembles everything before it).
LIMIT = 2500
LIMITS = {"12_final": 4000}

_LEFT_OUT = ["script", "style", "details", "nav", "button",
             "div.cell_input", "div.dropdown", "div.toggle", ".toggle-hidden", "div.plotly-graph-div",
             "a.headerlink", "span.section-number"]


def main_text(html: str) -> str:
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(html, "html.parser")
    article = soup.select_one("article.bd-article") or soup.body or soup
    for selector in _LEFT_OUT:
        for node in article.select(selector):
            node.decompose()
    return article.get_text(" ")


def words(html: str) -> int:
    return len(re.findall(r"[^\W_][\w.,'’/%×+-]*", main_text(html)))


def page_words(path: str | Path) -> int:
    return words(Path(path).read_text(encoding="utf-8"))


def limit(stem: str) -> int:
    return LIMITS.get(stem, LIMIT)


def report(html_dir: str | Path) -> list[tuple[str, int, int]]:
    """(page, words, limit) for every chapter page under ``html_dir/book``."""
    pages = sorted(Path(html_dir, "book").glob("*.html"))
    return [(p.stem, page_words(p), limit(p.stem)) for p in pages]


if __name__ == "__main__":   # python -m helpers.publish.wordcount [_build/html]
    import sys
    for stem, n, most in report(sys.argv[1] if len(sys.argv) > 1 else "_build/html"):
        print(f"{stem:32s} {n:6d} / {most}" + ("  over" if n > most and not stem.endswith("_deep_dive") else ""))
