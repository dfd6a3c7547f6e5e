"""The Sphinx extension's doors: the repository it reads, the Colab button it points at the
page's notebook, the data it checks before any page runs (no Sphinx build needed)."""
from types import SimpleNamespace

import pytest

pytest.importorskip("sphinx", reason="the book's build environment has Sphinx; a bare GPU machine may not")

from helpers.measure import datafile  # noqa: E402
from helpers.publish import notebooks, sphinx_ext  # noqa: E402


def config(**options):
    return SimpleNamespace(html_theme_options={"launch_buttons": {"colab_url": "https://colab.research.google.com"},
                                               **options}, exclude_patterns=["_build"])


def test_with_a_github_repository_the_colab_button_opens_the_page_s_notebook(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", "https://github.com/example/sgemm-book")
    c = config()
    sphinx_ext._repository(None, c)
    assert c.html_theme_options["repository_url"] == "https://github.com/example/sgemm-book"
    assert c.html_theme_options["launch_buttons"] and "book/*.ipynb" in c.exclude_patterns
    theme = "https://colab.research.google.com/github/example/sgemm-book/blob/main/book/04_smem_tiling_deep_dive.md"
    context = {"header_buttons": [{"type": "group", "label": "launch-buttons",
                                   "buttons": [{"type": "link", "text": "Colab", "url": theme}]}]}
    sphinx_ext._colab_opens_the_notebook(None, "book/04_smem_tiling_deep_dive", "page.html", context, None)
    url = context["header_buttons"][0]["buttons"][0]["url"]
    assert url == ("https://colab.research.google.com/github/example/sgemm-book/blob/"
                   f"{notebooks.BRANCH}/04_smem_tiling_deep_dive.ipynb")


def test_without_a_github_repository_there_are_no_launch_buttons(monkeypatch):
    for value in ("", "https://gitlab.com/example/sgemm-book"):
        monkeypatch.setenv("SGEMM_BOOK_REPOSITORY", value)
        monkeypatch.setattr(sphinx_ext.settings, "ROOT", sphinx_ext.settings.ROOT)   # _config.yml's url is ""
        c = config()
        sphinx_ext._repository(None, c)
        assert c.html_theme_options["launch_buttons"] == {} and not c.html_theme_options["repository_url"]


def test_the_reference_device_has_every_data_source():
    sphinx_ext.check_data()


def test_a_device_that_lacks_data_sources_is_refused_by_name(monkeypatch):
    have = {n: datafile.load(n) for n in datafile.device_files()}
    partial = [n for n, rec in have.items() if any(not rec.has(s) for s in sphinx_ext.sources.required())]
    if not partial:
        pytest.skip("every recorded device has every data source")
    monkeypatch.setenv("SGEMM_BOOK_DEVICE", partial[0])
    with pytest.raises(datafile.DataError, match=f"has no recorded .*reference device"):
        sphinx_ext.check_data()
