"""Test-suite wiring: GPU tests skip (with the reason) where CuPy sees no CUDA GPU; the
``nvrtc`` fixture skips tests of the offline compile where its tools are missing; ``script``
loads a file of scripts/ as a module; the browser tests' Chromium closes after the last of them in a row."""
import importlib.util
import sys

import pytest

from helpers.hardware import gpu_available
from helpers.measure import datafile
from helpers.runtime import offline


@pytest.fixture(scope="session")
def script():
    """script(name): scripts/<name>.py as a module (the scripts are not a package)."""
    from helpers.settings import ROOT

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return load


@pytest.fixture(scope="session")
def nvrtc():
    """The offline compiler, of the CUDA major version the recorded kernels were compiled
    with: machine-code claims hold for that compiler (``make test`` installs it)."""
    pytest.importorskip("cuda.bindings")
    try:
        offline.tool("cuobjdump")
        here = offline.nvrtc_version()
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    recorded = {ch["device"].get("nvrtc", "").split(".")[0] for ch in datafile.load().doc["chapters"].values()}
    if here.split(".")[0] not in recorded:
        pytest.skip(f"NVRTC {here} here; the recorded kernels were compiled by NVRTC {'/'.join(sorted(recorded))}.x, "
                    "whose machine code the claims describe (make test uses that stack)")


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: cupy.cuda.is_available() is False on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The browser tests share one Chromium (tests/test_browser.py); it closes when the next
    test is not one of them, so that no other test runs beside Playwright's event loop."""
    yield
    if "browser" in item.keywords and (nextitem is None or "browser" not in nextitem.keywords):
        browser_tests = sys.modules.get("test_browser")
        if browser_tests is not None:
            browser_tests.close_browser()
