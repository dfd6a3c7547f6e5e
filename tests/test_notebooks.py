"""Every chapter runs top to bottom under nbval (recorded mode in CI, live on a GPU).

nbval reads only .ipynb, so the MyST chapters are converted with jupytext into a
scratch folder first; no .ipynb twins are left in book/. ``--nbval-lax`` checks
that every cell runs (cells tagged raises-exception must raise) without comparing
outputs, which differ from run to run.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebooks

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".scratch" / "nbval"


def chapters():
    return sorted(p for p in (ROOT / "book").glob("*.md") if "jupytext:" in p.read_text()[:400])


@pytest.mark.parametrize("chapter", chapters(), ids=lambda p: p.stem)
def test_chapter_runs_under_nbval(chapter):
    SCRATCH.mkdir(parents=True, exist_ok=True)
    nb = SCRATCH / f"{chapter.stem}.ipynb"
    subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--to", "ipynb", "-o", str(nb), str(chapter)],
                   check=True, cwd=ROOT)
    env = dict(os.environ)
    if env.get("SGEMM_BOOK_MODE", "") != "recorded":
        env.setdefault("SGEMM_BOOK_QUICK", "1")  # live: small sweeps, the point is that cells run
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
         "--nbval-cell-timeout=900", str(nb)],
        cwd=ROOT / "book", env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{chapter.name} failed under nbval:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout, proc.stdout[-2000:]


def test_no_ipynb_twins_in_book():
    assert not list((ROOT / "book").glob("*.ipynb")), "convert into .scratch, not book/"
