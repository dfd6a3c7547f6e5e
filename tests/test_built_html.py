"""The built book is self-contained: no asset comes from another host (it must work offline)."""
import re
from pathlib import Path

import pytest

HTML = Path(__file__).resolve().parents[1] / "_build" / "html"
ASSET = re.compile(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]+)"', re.I)


def built_pages():
    return sorted(HTML.rglob("*.html")) if HTML.exists() else []


def test_book_was_built():
    if not HTML.exists():
        pytest.skip("run `make book` first")
    assert (HTML / "_static" / "plotly.min.js").stat().st_size > 1_000_000


@pytest.mark.parametrize("page", built_pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_no_remote_assets(page):
    remote = [u for u in ASSET.findall(page.read_text(errors="replace"))
              if u.startswith(("http://", "https://", "//")) and "<link" not in u]
    # <link rel=canonical/alternate> pointing outside is not an asset; only scripts, styles, images matter
    text = page.read_text(errors="replace")
    bad = [u for u in remote if re.search(r'<(?:script|img)[^>]*"' + re.escape(u) + '"', text)
           or re.search(r'<link[^>]*rel="stylesheet"[^>]*"' + re.escape(u) + '"', text)]
    assert not bad, f"{page.name} loads {bad} from the network"
