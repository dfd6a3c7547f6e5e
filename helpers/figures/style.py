"""One look for every figure: colours per kernel, log ticks, margins, legends, menus, and showing.

* Every kernel has one colour everywhere (:func:`colour`), cuBLAS is black and dashed.
* Log axes get ticks at 1, 2 and 5 of each decade, labelled in full (:func:`log_axis`).
* :func:`finish` puts the title at the top with the note saying where the data came from
  as its subtitle, with a top margin tall enough for both (:func:`title_margin`), the legend
  under the plot (never over the title or the data), and lets Plotly grow the other margins to
  fit the axes (``automargin``), so figures read at 390 px wide:
  Plotly never wraps text itself, so the title, the note and the axis titles are broken
  into lines (:func:`wrap`) that fit a 358 px wide figure, and so are long legend entries.
* Bar labels are never cut: inside the bar where they fit, after it where not (:func:`bar_labels`),
  with room on the axis for those written after their bars (:func:`label_room`).
* :func:`steps_figure` shows one group of traces at a time: a drop-down menu for a few
  choices, a slider for many (a long menu would overflow the figure), its rail inset so
  that the labels at its two ends stay inside the figure.
* :func:`show` draws a figure in the built book (an HTML div for the plotly.js the page
  loads) and with Plotly's own renderer everywhere else (JupyterLab, Notebook 7, VS Code,
  Colab), so no notebook needs the book's build to see a figure.
"""
from __future__ import annotations

import functools
import math
import os
import re

import plotly.graph_objects as go

from ..runtime.specs import ALL
from ..tables import Text
from IPython.display import HTML, display

TEMPLATE = "plotly_white"
CUBLAS = "#111111"
GRID = "#e6e6e6"
WRONG = "#d62728"
FONT = 13
MENU_MAX = 6                      # more choices than this become a slider
# Distinct colours, one per registered kernel in book order (Plotly's, then D3's 20).
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5"]
KERNEL_COLOURS = {s.name: PALETTE[i % len(PALETTE)] for i, s in enumerate(ALL)}
# Not grey (the leaderboard draws its variants grey), not a colour another kernel has (the palette
# wraps after 16), and the autotuned warp-tiling step of the main line a colour of its own.
KERNEL_COLOURS.update(double_buffering="#393b79", wgmma_tf32x3="#8c6d31", warptiling_tuned="#637939",
                      cublas=CUBLAS)


def colour(name: str, i: int = 0) -> str:
    """The colour of a kernel (by name), or of the i-th series of anything else."""
    return KERNEL_COLOURS.get(name, PALETTE[i % len(PALETTE)])


def ink(fill: str) -> str:
    """Black or white, whichever reads better on a ``#rrggbb`` fill (text inside a bar)."""
    r, g, b = (int(fill.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    return "#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks covering [lo, hi]."""
    lo, hi = max(lo, 1e-12), max(hi, lo * 1.0001)
    out = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0 ** e for m in (1, 2, 5)]
    inside = [t for t in out if lo / 1.0001 <= t <= hi * 1.0001]
    return inside or out


def tick_text(v: float) -> str:
    return f"{v:g}" if v >= 1e-3 else f"{v:.0e}"


WHISKER_GAP = "\u00a0\u00a0"   # between a bar's end and its label, where an error whisker runs (not collapsed)
LABEL_SHARE = 1 / 6      # labelled ticks of a log axis at least this share of its span apart


def spaced_labels(ticks: list) -> list[str]:
    """The label of each tick of a log axis, or "" where it would crowd the label before it: labels
    at least LABEL_SHARE of the axis's span apart (in log), the first and the last always kept, so
    that on a phone Plotly neither overlaps nor tilts and drops them."""
    logs = [math.log10(t) for t in ticks]
    gap = (logs[-1] - logs[0]) * LABEL_SHARE
    keep, last = [], None
    for i, x in enumerate(logs):
        if last is None or x - last >= gap:
            keep.append(i)
            last = x
    if keep[-1] != len(ticks) - 1:                  # the last value is labelled: it ends the axis
        if len(keep) > 1 and logs[-1] - logs[keep[-1]] < gap:
            keep.pop()
        keep.append(len(ticks) - 1)
    return [tick_text(t) if i in keep else "" for i, t in enumerate(ticks)]


def log_axis(fig: go.Figure, axis: str, values, title: str | None = None, exact: bool = False,
             cover: bool = False) -> go.Figure:
    """Make ``axis`` ("x" or "y") logarithmic with readable 1-2-5 ticks over ``values``
    (``exact``: a tick at each of the values themselves, e.g. matrix sizes, labelled where
    :func:`spaced_labels` leaves room; ``cover``: a tick at or beyond each end of the values,
    and the axis spans those ticks, so that no point lies beyond the last label)."""
    vals = [v for v in values if v and v > 0]
    if not vals:
        return fig
    ticks = sorted(set(vals)) if exact else log_ticks(min(vals), max(vals))
    kw = {}
    if cover and not exact:
        below = [t for t in log_ticks(min(vals) / 2.5, min(vals)) if t <= min(vals) * 1.0001]
        above = [t for t in log_ticks(max(vals), max(vals) * 2.5) if t >= max(vals) / 1.0001]
        ticks = sorted(set(ticks + below[-1:] + above[:1]))
        pad = (math.log10(ticks[-1]) - math.log10(ticks[0])) * 0.03
        kw["range"] = [math.log10(ticks[0]) - pad, math.log10(ticks[-1]) + pad]
    text = spaced_labels(ticks) if exact else [tick_text(t) for t in ticks]
    kw.update(type="log", tickvals=ticks, ticktext=text, tickfont=dict(size=FONT - 1))
    if title is not None:
        kw["title"] = title
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**kw)
    return fig


def wrap(text: str | None, width: int) -> str | None:
    """Break a Plotly text into lines of at most ``width`` visible characters (tags not counted),
    at spaces: Plotly never wraps a title or an axis title itself, and a long one is cut on a
    narrow screen."""
    if not text:
        return text
    visible = lambda t: len(re.sub(r"<[^>]+>", "", t))
    lines = []
    text = str(text).replace(" = ", "\u00a0=\u00a0")          # never break "n = 1024"
    for para in text.split("<br>"):
        line = ""
        for word in para.split(" "):
            if line and visible(line + " " + word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def plain(text: str | None) -> str | None:
    """A text as it reads, without the line breaks :func:`wrap` put in (for comparisons)."""
    return text if not text else str(text).replace("<br>", " ").replace("\u00a0", " ")


# characters a line in a 358 px wide figure (a 390 px screen); a title's font is the largest;
# a legend entry has its symbol (about 40 px) before it
TITLE_LINE, NOTE_CHARS, AXIS_CHARS, LEGEND_CHARS = 40, 56, 28, 42
SLIDER_TOP = 40                   # a slider's rail under the plot: room for tick labels and a one-line x title
MODEBAR_PX = 30                   # Plotly's mode bar (on hover or a tap): 2 px from the top, its icons 22 px tall
                                  # (its box 26 px in the book), 240 px wide at the right: over a title on a phone


TITLE_TOP = 16 + MODEBAR_PX       # from the figure's top to its title's first line
TITLE_MARGIN = 120                # the top margin of a title and a note of a line or two each


def title_margin(title: str, source: str) -> int:
    """The top margin that holds a title and its subtitle (both already wrapped, lines split by
    <br>) below the mode bar's strip, and a gap above the plot; at least 120 px."""
    lines = lambda t: t.count("<br>") + 1 if t else 0           # noqa: E731
    # lines of 1.3 em (Plotly's line spacing), the subtitle a few px under the title, 12 px above the plot
    height = TITLE_TOP + 1.3 * (FONT + 2) * lines(title) + 4 + 1.3 * (FONT - 2) * lines(source) + 12
    return max(TITLE_MARGIN, math.ceil(height))


def controls(fig: go.Figure) -> list:
    """A figure's menu buttons and slider steps."""
    return ([b for m in fig.layout.updatemenus or () for b in m.buttons]
            + [st for sl in fig.layout.sliders or () for st in sl.steps])


def grow_steps(fig: go.Figure, extra: int) -> None:
    """Add ``extra`` px to the height each menu or slider step sets, if it sets one."""
    for c in controls(fig):
        args = list(c.args or ())
        if extra and len(args) > 1 and isinstance(args[1], dict) and "height" in args[1]:
            c.args = [args[0], dict(args[1], height=args[1]["height"] + extra)] + args[2:]


def step_titles(fig: go.Figure) -> list[str]:
    """The titles a figure's menu or slider steps set (steps_figure), as they will be drawn."""
    titles = []
    for c in controls(fig):
        args = c.args or ()
        if len(args) > 1 and isinstance(args[1], dict) and "title.text" in args[1]:
            titles.append(args[1]["title.text"])
    return titles


def finish(fig: go.Figure, title: str, xtitle: str | None = None, ytitle: str | None = None,
           source: str = "", height: int = 460, legend: bool = True) -> go.Figure:
    """The common layout: title on top, legend and source note below the plot, margins that grow to fit.
    The figure is :data:`MODEBAR_PX` taller than ``height``: a strip above the title for the mode
    bar, the plot keeps its room (a menu or slider step that sets a height adds it too)."""
    menus = len(fig.layout.updatemenus or ())
    title, source = wrap(title, TITLE_LINE), wrap(source, NOTE_CHARS)
    top = max(title_margin(t, source) for t in [title] + step_titles(fig))
    extra = top - TITLE_MARGIN        # a title of more lines: the figure grows by them, the plot keeps its room
    grow_steps(fig, extra)
    fig.update_layout(
        template=TEMPLATE, height=height + MODEBAR_PX + extra, font=dict(size=FONT),
        # hung from the top of the figure, and the top margin made tall enough for all its lines:
        # Plotly's own title automargin moves a title of several lines with a subtitle above the
        # figure where it measured the title's height before the page was laid out
        title=dict(text=title, x=0, xanchor="left", y=1, yref="container", yanchor="top",
                   font=dict(size=FONT + 2), automargin=False, pad=dict(l=6, t=TITLE_TOP),
                   subtitle=dict(text=source, font=dict(size=FONT - 2, color="#555"))),
        margin=dict(l=10, r=10, t=top + 40 * menus, b=10, autoexpand=True),     # l, r: see SLIDER_ROOM
        showlegend=legend,
        # at the bottom of the whole figure (container), under the x axis title whatever the plot's height
        legend=dict(orientation="h", x=0, xanchor="left", yref="container", y=0, yanchor="bottom",
                    font=dict(size=FONT - 1)),
    )
    fig.update_xaxes(automargin=True, gridcolor=GRID, title_standoff=8)
    fig.update_yaxes(automargin=True, gridcolor=GRID, title_standoff=8)
    if xtitle is not None:
        fig.update_xaxes(title=xtitle)
    if ytitle is not None:
        fig.update_yaxes(title=ytitle)
    for axis in ("xaxis", "yaxis"):               # whoever set them, the axis titles fit too
        a = fig.layout[axis]
        if a and a.title and a.title.text:
            a.title.text = wrap(a.title.text, AXIS_CHARS if axis == "yaxis" else x_title_chars(fig))
    for t in fig.data:                            # a legend entry too: Plotly cuts a long one at the edge
        if t.name and t.showlegend is not False and len(plain(t.name)) > LEGEND_CHARS:
            t.name = wrap(t.name, LEGEND_CHARS)
    # a slider hangs under the plot, so a line more of x title (about 20 px) would run into its label
    xtitle_lines = 1 + (fig.layout.xaxis.title.text or "").count("<br>")
    for s in fig.layout.sliders or ():
        s.pad.t = SLIDER_TOP + 20 * (xtitle_lines - 1)
    return fig


def x_title_chars(fig: go.Figure) -> int:
    """How many characters a line of the x title may have: it is centred on the plot, which the
    category labels of horizontal bars narrow on a phone (an axis title's font is 1.2 x FONT)."""
    if fig.layout.yaxis.showticklabels is False:
        return AXIS_CHARS
    labels = [v for t in fig.data if t.type == "bar" and t.orientation == "h" for v in (t.y or ())]
    if not labels or not all(isinstance(v, str) for v in labels):
        return AXIS_CHARS
    plot = PHONE_PX - 20 - max(text_px(line) for v in labels for line in v.split("<br>"))
    return max(12, min(AXIS_CHARS, int((plot + 20) / (EM_PER_CHAR * round(1.2 * FONT)))))


PHONE_PX = 358                    # a figure's width on a 390 px screen
EM_PER_CHAR = 0.56                # a character of a label, on average (digits, x, =, letters), in ems, a little over


def plural(n: int, word: str) -> str:
    """``1 wavefront``, ``4 wavefronts``: a count in a generated sentence or title."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def text_px(text: str, font: float = FONT) -> float:
    """About how wide a one-line text is in pixels (Plotly measures it only in the browser)."""
    return len(plain(re.sub(r"<[^>]+>", "", str(text)))) * EM_PER_CHAR * font


def bar_labels(fills) -> dict:
    """Trace settings for value labels on bars, read whole at any width: inside the bar's end
    where they fit (in black or white, whichever reads on the fill), just after the bar where
    they don't (a short bar), never cut by the plot area. Plotly decides per bar, in the browser."""
    fills = [fills] if isinstance(fills, str) else list(fills)
    return dict(textposition="auto", insidetextanchor="end", textangle=0, constraintext="none", cliponaxis=False,
                insidetextfont=dict(color=[ink(f) for f in fills]), outsidetextfont=dict(color="#222"))


def label_room(xs, labels, left_px: float = 0, font: float = FONT) -> float:
    """An axis maximum for horizontal bars with their labels after them (textposition "outside"):
    on a phone each label ends inside the figure. ``left_px``: what the y axis's labels take."""
    plot = PHONE_PX - 20 - left_px
    return max(x * plot / max(plot - text_px(t, font) - 12, plot / 4) for x, t in zip(xs, labels))


def inside_or_after(xs, labels, left_px: float = 0, font: float = FONT) -> float:
    """An axis maximum for horizontal bars with :func:`bar_labels`: the smallest, from the longest
    bar on, at which on a phone each label fits inside its bar or after it (a label's width: its
    longest line). ``left_px``: what the y axis's labels take."""
    plot = PHONE_PX - 20 - left_px
    need = [max(text_px(line, font) for line in str(t).split("<br>")) + 12 for t in labels]

    def fits(top):
        return all(x / top * plot >= w or x / top * plot + w <= plot for x, w in zip(xs, need))

    first = max(xs) * 1.02
    tops = sorted([first] + [x * plot / (plot - w) for x, w in zip(xs, need) if plot > w])
    return next((t for t in tops if t >= first and fits(t)), tops[-1])


SLIDER_ROOM = 10 + 10              # left of a slider's first tick (right of its last) when its rail has no pad:
                                  # the figure's margin (finish) and Plotly's inset of the steps in the rail


def slider_pad(label: str, font: float = FONT) -> int:
    """How far to inset a slider's rail at one end so that the label centred on its end tick
    stays inside the figure: half the label, a little over, less the room there is anyway
    (:data:`SLIDER_ROOM`; an axis's tick labels beside the plot leave more)."""
    return max(0, math.ceil(text_px(label, font) / 2) + 9 - SLIDER_ROOM)


def steps_figure(steps: list, active: int | None = None, prefix: str = "", layouts: list | None = None) -> go.Figure:
    """A figure that shows one group of traces at a time; ``steps`` is [(label, [traces], title?)].

    All traces are added once and each step sets which are visible, so the figure needs
    no Python to move. Up to :data:`MENU_MAX` steps get a drop-down menu, more a slider.
    A step may carry its own title (a third element), which the control sets too, and its own
    layout (``layouts[i]``, e.g. ``{"height": ..., "yaxis.range": ...}``: a step with fewer bars
    gets a shorter figure, not an empty one), which the figure opens with for the active step.
    """
    fig = go.Figure()
    owner = []
    for i, step in enumerate(steps):
        for t in step[1]:
            fig.add_trace(t)
            owner.append(i)
    active = len(steps) - 1 if active is None else active
    for t, o in zip(fig.data, owner):
        t.visible = o == active

    def args(i):
        lay = dict(layouts[i]) if layouts else {}
        if "height" in lay:         # Plotly fixes the width where a relayout sets a height, unless told
            lay["autosize"] = True  # to keep sizing to its div: the figure still fits a narrowed page
        if len(steps[i]) > 2:
            lay["title.text"] = wrap(steps[i][2], TITLE_LINE)
        return [{"visible": [o == i for o in owner]}] + ([lay] if lay else [])

    if len(steps) > MENU_MAX:
        fig.update_layout(sliders=[dict(
            active=active, currentvalue=dict(prefix=prefix, font=dict(size=FONT)),
            pad=dict(t=SLIDER_TOP, b=10, l=slider_pad(steps[0][0]), r=slider_pad(steps[-1][0])),
            x=0, len=1, steps=[dict(label=s[0], method="update", args=args(i)) for i, s in enumerate(steps)])])
    elif len(steps) > 1:
        fig.update_layout(updatemenus=[dict(
            active=active, type="dropdown", x=0, xanchor="left", y=1.0, yanchor="bottom", pad=dict(b=8),
            buttons=[dict(label=s[0], method="update", args=args(i)) for i, s in enumerate(steps)])])
    if len(steps[active]) > 2:
        fig.update_layout(title_text=wrap(steps[active][2], TITLE_LINE))
    for key, value in (layouts[active] if layouts else {}).items():
        fig.layout[key] = value
    return fig


def in_book_build() -> bool:
    """True while Jupyter Book executes the chapters (the Makefile sets SGEMM_BOOK_BUILD=1)."""
    return os.environ.get("SGEMM_BOOK_BUILD", "") == "1"


# the mode bar (zoom, reset, download) only while the pointer is over the figure, or after a tap;
# it then covers the top right corner, above the title (finish: MODEBAR_PX)
CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover"}
# Plotly's HTML fixes the div's height at the figure's, and on a resize ("responsive") the figure
# takes the div's: the div follows each redraw's height, so a menu step that makes the figure
# shorter (steps_figure's layouts) leaves no gap under it and keeps its height on a resize
FIT_DIV = ("var gd = document.getElementById('{plot_id}');"
           "gd.on('plotly_afterplot', function () { gd.style.height = gd._fullLayout.height + 'px'; });")


def show(fig: go.Figure) -> None:
    """Display a figure: an HTML div in the built book, Plotly's own renderer anywhere else."""
    if in_book_build():

        display(HTML(book_html(fig, CONFIG)))
    else:
        fig.show(config=CONFIG, post_script=FIT_DIV)        # renderers without post_script ignore it


def book_html(fig: go.Figure, config: dict) -> str:
    """The figure as a div whose script draws it once the page is parsed: the book loads
    plotly.js deferred (it must not hold up the text), so it exists only by then."""
    div = fig.to_html(full_html=False, include_plotlyjs=False, config=config, post_script=FIT_DIV)
    head, sep, rest = div.partition('<script type="text/javascript">')
    body, sep2, tail = rest.rpartition("</script>")
    if not sep or not sep2:
        raise RuntimeError("plotly's HTML changed: no inline script to defer")
    return f'{head}<script type="text/javascript">window.addEventListener("DOMContentLoaded", function () {{{body}}});</script>{tail}'


def rects(boxes):
    """One Scatter path through several rectangles (x0, y0, x1, y1), separated by None: the
    tiles of the book's pictures as a single trace."""
    xs, ys = [], []
    for x0, y0, x1, y1 in boxes:
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y0, y0, y1, y1, y0, None]
    return xs, ys


def needs_run(record_command: str):
    """A decorator for the figures and sentences of a chapter drawn from one recorded run: the
    function's result, or, where the run is None (nothing recorded yet), a short note naming the
    command that records it."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(run, *args, **kw):
            if run is None:
                return Text(f"*Not recorded yet* (`{record_command}`).")
            return fn(run, *args, **kw)
        return wrapper
    return decorate


def show_or_note(obj):
    """Draw a figure (through :func:`show`); anything else (a table, a note) is returned to be displayed."""
    if isinstance(obj, go.Figure):
        show(obj)
        return None
    return obj
