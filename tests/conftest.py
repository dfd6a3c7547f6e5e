"""Test-suite wiring: GPU tests skip (with the reason) where CuPy sees no CUDA GPU."""
import pytest

from helpers.hardware import gpu_available


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: cupy.cuda.is_available() is False on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
