"""Tables that show themselves: HTML in a notebook or the book (wrapped, scrolling inside
its own box on a narrow screen, configs and commands in two lines at most), aligned text in a terminal.

``Table(rows, columns)`` takes a list of dicts; numbers are formatted once, here.
"""
from __future__ import annotations

import html
import math


def fmt(v) -> str:
    """A cell: 3 significant digits for small floats, thousands separators for large numbers."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.1e}"
    if isinstance(v, int) and abs(v) >= 10000:
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
    return str(v)


# Columns of short tokens ("64x256x16 w64x64 t8x16 s5 u2 k/3 g8 TN packA", a command line):
# squeezed to the width of their longest token they take a line per token and make every row
# tall. In HTML a cell of these breaks at one space at most, the one nearest its middle, so it
# takes one line or two, in a smaller font; the table scrolls sideways in its box where it is
# wider than the page.
COMPACT = ("config", "command", "commit", "recorded")
COMPACT_STYLE = "font-size:0.85em"
NOWRAP = "<span style='white-space:nowrap'>{}</span>"


def two_lines(text: str) -> str:
    """A cell's text as HTML that wraps at most once: at the space nearest its middle."""
    words = text.split(" ")
    if len(words) < 2:
        return NOWRAP.format(html.escape(text))
    cut = min(range(1, len(words)), key=lambda i: abs(len(" ".join(words[:i])) - len(" ".join(words[i:]))))
    return " ".join(NOWRAP.format(html.escape(" ".join(part))) for part in (words[:cut], words[cut:]))


class Table:
    """Rows of dicts as a table; ``columns`` picks and orders them (default: all, in order of
    appearance); ``compact``: the columns whose cells take at most two lines in HTML (default
    :data:`COMPACT`)."""

    def __init__(self, rows: list[dict], columns: list[str] | None = None, caption: str = "",
                 compact=COMPACT):
        self.rows = list(rows)
        self.columns = columns or list(dict.fromkeys(k for r in self.rows for k in r))
        self.caption = caption
        self.compact = frozenset(compact)

    def _cells(self) -> list[list[str]]:
        return [[fmt(r.get(c)) for c in self.columns] for r in self.rows]

    def __str__(self):
        cells = self._cells()
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        lines = ([self.caption] if self.caption else []) + [
            "  ".join(c.ljust(w) for c, w in zip(self.columns, widths)),
            "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)

        def cell(column: str, v: str) -> str:
            if column in self.compact:
                return f"<td style='{COMPACT_STYLE}'>{two_lines(v)}</td>"
            return f"<td>{html.escape(v)}</td>"

        body = "".join("<tr>" + "".join(cell(c, v) for c, v in zip(self.columns, row)) + "</tr>"
                       for row in self._cells())
        # the caption above the scrolling box, so that it wraps to the page, not to the table
        cap = (f"<div class='sgemm-table-caption' style='font-style:italic;margin:0.3em 0'>"
               f"{html.escape(self.caption)}</div>") if self.caption else ""
        return (f"{cap}<div class='sgemm-table' style='overflow-x:auto;max-width:100%'><table class='table'>"
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


class Text:
    """A paragraph computed from data (shows as Markdown in notebooks and the book)."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self):
        return self.text

    def __repr__(self):
        return self.text

    def _repr_markdown_(self):
        return self.text
