"""The final chapter's feature ladder (helpers/figures/final.py, feature_figure) in a real browser
(tests/test_browser.py's fixtures and helpers), drawn from rows made up for the test on a page of
its own, so that it is checked before the ladder is recorded: every bar draws, the plot keeps its
room at 1400 px and nothing scrolls sideways on a phone."""
import shutil
from pathlib import Path

import plotly
import pytest

from test_browser import FIGURES_JS, LAYOUT_JS, MIN_PLOT_PX, browser, open_page, start_server  # noqa: F401
from test_final_features import TF, rows_for, run_of

from helpers.figures import final as F
from helpers.figures import style

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def ladder_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("ladder")
    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", root / "plotly.min.js")
    # the last step at n=4096 just above cuBLAS (51 against 50): its bar ends just past cuBLAS's line
    div = style.book_html(F.feature_figure(run_of(rows_for(TF[:5] + [51.0] + TF[6:]))), style.CONFIG)
    (root / "ladder.html").write_text('<!DOCTYPE html><html><head><meta charset="utf-8">'
                                      '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
                                      f'<script src="plotly.min.js"></script></head><body>{div}</body></html>')
    url, httpd = start_server(root)
    yield url
    httpd.shutdown()


@pytest.mark.parametrize("width", [1400, 390])
def test_the_ladder_draws_every_bar_and_fits(browser, ladder_page, width):  # noqa: F811
    page, problems = open_page(browser, ladder_page, "ladder.html", width=width)
    figs = page.evaluate(FIGURES_JS)
    assert len(figs) == 1 and figs[0]["svg"] > 0 and figs[0]["drawn"] >= 3 + 1   # three shapes, cuBLAS
    bars = page.evaluate("() => document.querySelectorAll('g.trace.bars g.point').length")
    assert bars == len(TF)
    layout = page.evaluate(LAYOUT_JS)
    if width == 1400:
        assert min(layout["plots"][0]["w"], layout["plots"][0]["h"]) >= MIN_PLOT_PX
    assert layout["overflow"] <= 1
    # no bar's value label lies across cuBLAS's dashed line at 100%
    crossed = page.evaluate("""() => {
        const line = document.querySelector('g.trace.scatter path.js-line').getBoundingClientRect();
        return [...document.querySelectorAll('g.trace.bars text')].map(t => t.getBoundingClientRect())
            .filter(b => b.left < line.right && b.right > line.left && b.bottom > line.top && b.top < line.bottom)
            .length; }""")
    assert crossed == 0
    assert not problems, problems
