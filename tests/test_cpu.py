"""The CPU variants are correct for any size, including sizes that are not multiples of 4."""
import numpy as np
import pytest

from helpers import cpu


@pytest.mark.parametrize("name", list(cpu.VARIANTS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 3, 7), (37, 67, 45), (130, 300, 129)])
def test_variant_matches_numpy(name, shape):
    err = cpu.check(cpu.VARIANTS[name], *shape)
    assert err < 1e-5, f"{name} on {shape}: relative error {err:.1e}"


def test_benchmark_rows_have_positive_rates():
    rows = cpu.benchmark({"ikj (reordered)": [64], "NumPy (BLAS)": [64]}, progress=None)
    assert [r["name"] for r in rows] == ["ikj (reordered)", "NumPy (BLAS)"]
    assert all(r["gflops"] > 0 and r["s"] > 0 for r in rows)
    fig = cpu.figure(rows)
    assert len(fig.data) == 2
