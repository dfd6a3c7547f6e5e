"""Kernel regions: the lines a paragraph shows come from the file that runs (CPU only)."""
import pytest

from helpers.publish import notebooks
from helpers.runtime import source

TEXT = """\
__global__ void k() {
    // region load: the tiles
    int a = 1;
        int b = 2;
    // endregion load
    // region store
    c = a;
    // endregion store
}
"""


def test_regions_are_the_lines_between_the_markers():
    assert source.regions(TEXT) == {"load": (3, 4), "store": (7, 7)}


def test_a_region_is_shown_dedented_with_its_line_numbers(tmp_path, monkeypatch):
    (tmp_path / "x.cu").write_text(TEXT)
    monkeypatch.setattr(source.settings, "KERNEL_DIR", tmp_path)
    shown = source.kernel_source("x.cu", "load")
    assert shown.startswith("`kernels/x.cu`, lines 3-4") and "int a = 1;\n    int b = 2;" in shown
    assert "region" not in shown.split("```cuda")[1]
    with pytest.raises(KeyError, match="its regions: load, store"):
        source.kernel_source("x.cu", "compute")


def test_the_notebook_export_renders_a_region_before_anything_runs():
    m = notebooks.SHOW_KERNEL.search('helpers.show_kernel("smem_tiling", region="load")')
    assert m.groups() == ("smem_tiling", "load")
    assert notebooks.SHOW_KERNEL.search("helpers.show_kernel('final')").groups() == ("final", None)
