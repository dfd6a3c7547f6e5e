"""The introduction's claims against the recorded data and the book's own pages.

The numbers of book/00_intro.md come from :func:`helpers.figures.leaderboard.closeness`;
these tests check that function against the recorded rows, and the words around it.
"""
import re
from pathlib import Path

import pytest

from helpers.figures import leaderboard as L
from helpers.measure import bench, datafile
from helpers.runtime.specs import get

BOOK = Path(__file__).resolve().parents[1] / "book"


@pytest.fixture(scope="module")
def rs():
    try:
        return L.recorded("leaderboard")
    except datafile.DataError as exc:
        pytest.skip(f"no recorded leaderboard: {exc}")


def final_squares(rs):
    return sorted((r for r in rs.rows if r["kernel"] == "final" and r.get("suite") == "sizes" and bench.measured_ok(r)),
                  key=lambda r: r["M"])


def test_final_kernel_competes_with_cublas(rs):
    # "a CUDA kernel that competes with cuBLAS"
    best = max(100 * r["tflops"] / r["cublas_tflops"] for r in final_squares(rs))
    assert best >= 85


def test_closeness_quotes_the_largest_sizes(rs):
    text = str(L.closeness(rs))
    pcts = [f"{100 * r['tflops'] / r['cublas_tflops']:.0f}" for r in final_squares(rs)[-2:]]
    for p in pcts:
        assert p in text
    assert "within a few percent" not in text and "matches" not in text


def test_closeness_reports_the_suite_with_and_without_outliers(rs):
    text = str(L.closeness(rs))
    score, counted, _ = bench.suite_score(rs.rows, "final")
    assert f"geometric mean is {score:.0f}%" in text
    skip = L.outlier_shapes(rs.rows)
    if skip:
        without, n = L.score_without(rs.rows, "final", skip)
        assert f"it is {without:.0f}% over {n} shapes" in text


def test_intro_has_no_fixed_closeness_claim():
    text = (BOOK / "00_intro.md").read_text()
    assert "within a few percent" not in text
    assert not re.search(r"\b\d{2}(\.\d)?\s*%", text), "a percentage written into the intro: compute it instead"


def test_intro_and_references_agree_on_the_articles():
    intro = (BOOK / "00_intro.md").read_text()
    refs = (BOOK / "98_references.md").read_text()
    section = refs.split("## The articles the chapters follow")[1].split("\n## ")[0]
    articles = re.findall(r"^\d+\. ", section, flags=re.M)
    assert "five Chinese-language articles" in intro and len(articles) == 5
    assert sum("Built on Boehm's worklog" in line or "builds on Boehm's worklog" in line
               for line in section.splitlines()) == 3
    assert "Three of them retrace Simon Boehm's worklog" in intro
    for needle in ("siboehm.com/articles/22/CUDA-MMM", "github.com/siboehm/SGEMM_CUDA", "efficient_gemm",
                   "cuda-c-programming-guide", "ProfilingGuide", "10.1145/1498765.1498785"):
        assert needle in refs


def test_the_race_the_intro_mentions_is_kept_in_the_book():
    # "(and the race hidden in its double buffering)"
    assert get("double_buffering_racy").broken
