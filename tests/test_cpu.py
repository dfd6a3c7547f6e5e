"""CPU variants (chapter "On the CPU"): correct for any size, the traffic model, the benchmark helpers."""
import numpy as np
import pytest

from helpers import cpu

SHAPES = [(1, 1, 1), (5, 3, 7), (37, 67, 45), (67, 37, 1), (130, 600, 129), (4, 513, 9)]


@pytest.mark.parametrize("name", list(cpu.VARIANTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_variant_matches_numpy(name, shape):
    err = cpu.check(cpu.VARIANTS[name], *shape)
    assert err < 1e-5, f"{name} on {shape}: relative error {err:.1e}"


@pytest.mark.parametrize("n", [1, 5, 37, 67])
def test_square_odd_sizes(n):
    A, B = cpu.random(n, seed=n)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    for name, fn in cpu.VARIANTS.items():
        C = np.full((n, n), np.nan, dtype=np.float32)
        fn(A, B, C)
        assert np.isfinite(C).all(), name
        assert np.abs(C - ref).max() < 1e-4 * max(1, n), name


def test_variants_sum_in_the_same_order_as_ijk():
    """contract only fuses a*b+c: the first four variants agree with ijk bit for bit.

    The tiled ones may reassociate (partial sums per SIMD lane): close, and the
    parallel one is identical to the sequential one.
    """
    rng = np.random.default_rng(7)
    A = rng.uniform(-1, 1, (37, 1030)).astype(np.float32)
    B = rng.uniform(-1, 1, (1030, 600)).astype(np.float32)
    ref = np.empty((37, 600), np.float32)
    cpu.ijk(A, B, ref)
    out = {}
    for name, fn in cpu.VARIANTS.items():
        C = np.full_like(ref, np.nan)
        fn(A, B, C)
        out[name] = C
    for name in ("ikj (reordered)", "ikj, k unrolled x4", "4x4 register block"):
        assert np.array_equal(out[name], ref), name
    assert np.array_equal(out["tiled, packed B"], out["tiled, parallel"])
    assert np.abs(out["tiled, packed B"] - ref).max() < 1e-4


def test_pack_b_layout():
    K, N = cpu.KC + 5, cpu.NC + 3
    B = np.arange(K * N, dtype=np.float32).reshape(K, N)
    for Bp in (cpu.pack_b(B), cpu.pack_b_parallel(B)):
        assert Bp.shape == (2, 2, cpu.NC, cpu.KC)
        assert np.array_equal(Bp[0, 0], B[:cpu.KC, :cpu.NC].T)            # a block, transposed
        assert np.array_equal(Bp[1, 1, :3, :5], B[cpu.KC:, cpu.NC:].T)    # the corner block ...
        assert not Bp[1, 1, 3:].any() and not Bp[1, 1, :, 5:].any()         # ... padded with zeros


def test_traffic_model():
    t = {v: cpu.traffic(v, 1024) for v in cpu.VARIANTS}
    assert t["ijk"]["bytes_per_flop"] == 34            # (4 B of A + a 64-byte line of B) / 2 FLOP
    assert t["ikj (reordered)"]["bytes_per_flop"] == 6  # load B, load C, store C: 12 B / 2 FLOP
    assert t["ikj, k unrolled x4"]["bytes_per_flop"] == 3
    assert t["4x4 register block"]["bytes_per_flop"] == 1.5 and t["4x4 register block"]["reuse_b"] == 4
    assert t["ijk"]["reuse_bytes"] == 64 * 1024
    assert t["4x4 register block"]["reuse_bytes"] == 4 * 2**20
    assert t["tiled, packed B"]["reuse_bytes"] == 4 * cpu.KC * cpu.NC == 256 * 1024
    assert t["tiled, packed B"]["stores_per_fma"] == 0 and t["tiled, packed B"]["bytes_per_flop"] == 1.0
    with pytest.raises(KeyError):
        cpu.traffic("kji")


def test_machine_description():
    c = cpu.caches()
    assert c["line"] > 0 and c["L1"] < c["L2"]
    label = cpu.machine_label()
    assert label.startswith("measured on this machine: ") and label.endswith(f"{cpu.cores()} cores")


def test_benchmark_rows_figure_and_ratio():
    rows = cpu.benchmark({"ikj (reordered)": [32, 64], cpu.NUMPY: [32, 64]}, progress=None)
    assert [r["name"] for r in rows] == ["ikj (reordered)"] * 2 + [cpu.NUMPY] * 2
    assert all(r["gflops"] > 0 and r["s"] > 0 for r in rows)
    assert rows[-1]["vs_numpy"] == 1.0 and rows[0]["vs_numpy"] == rows[0]["gflops"] / rows[2]["gflops"]
    fig = cpu.figure(rows)
    assert len(fig.data) == 2
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["all variants", "ikj (reordered)"]
    assert list(fig.layout.updatemenus[0].buttons[1].args[0]["visible"]) == [True, True]
    assert "measured on this machine" in fig.layout.annotations[-1].text
    r = cpu.ratio_to_numpy(64, rounds=2)
    assert r["ratio"] > 0 and r["numpy_gflops"] > 0 and r["name"] == cpu.BEST
    f2 = cpu.traffic_figure(rows, 64)
    assert len(f2.data) == 2
