"""Shared-memory tiling: specs (the unguarded kernel refuses what it cannot do), the
index math of both kernels emulated on the CPU, and offline resources."""
import numpy as np
import pytest

from helpers.registry import ConfigError, get
from helpers.tiling import (CLOBBERED, CORRECT, UNDEFINED, emulate_smem_tiling, failure_map)


def rand(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (M, K)).astype(np.float32), rng.uniform(-1, 1, (K, N)).astype(np.float32))


def test_specs_and_grid_orders():
    g, u = get("smem_tiling"), get("smem_tiling_unguarded")
    assert g.defaults() == {"TILE": 32, "SWAP": 1} and u.defaults() == {"TILE": 32}
    assert g.block({"TILE": 16, "SWAP": 1}) == (16, 16, 1)
    assert g.grid({"TILE": 32, "SWAP": 1}, 1000, 3000, 777) == (32, 94, 1)   # x walks rows of C
    assert g.grid({"TILE": 32, "SWAP": 0}, 1000, 3000, 777) == (94, 32, 1)
    assert u.grid({"TILE": 32}, 1024, 2048, 64) == (32, 64, 1)
    assert g.name_expression({"TILE": 8, "SWAP": 0}) == "sgemm_smem_tiling<8, 0>"
    assert u.name_expression({"TILE": 8}) == "sgemm_smem_tiling_unguarded<8>"


def test_unguarded_kernel_refuses_shapes_that_are_not_tile_multiples():
    u = get("smem_tiling_unguarded")
    u.check_shape({"TILE": 32}, 64, 4096, 32)
    with pytest.raises(ConfigError, match=r"K=777 must be a multiple of 32 \(the kernel has no bounds checks\)"):
        u.check_shape({"TILE": 32}, 1024, 1024, 777)
    with pytest.raises(ConfigError, match="M=7 must be a multiple of 8.*N=13 must be a multiple of 8"):
        u.check_shape({"TILE": 8}, 7, 13, 8)
    get("smem_tiling").check_shape({"TILE": 32, "SWAP": 1}, 7, 13, 5)   # the guarded kernel takes anything


def test_sweep_covers_tiles_sizes_and_the_guard_cost():
    from helpers.specs import smem_tiling as mod

    sweep = mod.SWEEP
    assert len(sweep) <= 30
    for n in (1024, 2048, 4096):
        assert ("smem_tiling", {"TILE": 32, "SWAP": 1}, (n, n, n)) in sweep
    n4096 = (4096, 4096, 4096)
    assert {p["TILE"] for k, p, s in sweep if k == "smem_tiling_unguarded" and s == n4096} == {8, 16, 32}
    assert {p["TILE"] for k, p, s in sweep if k == "smem_tiling" and s == n4096 and p["SWAP"] == 1} == {8, 16, 32}
    for k, p, (M, N, K) in sweep:
        spec = get(k)
        spec.check_shape(spec.validate(p), M, N, K)


@pytest.mark.parametrize("tile", (8, 16, 32))
@pytest.mark.parametrize("swap", (0, 1))
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (127, 129, 65), (33, 70, 40)],
                         ids=lambda s: "x".join(map(str, s)))
def test_guarded_kernel_emulated_is_exact_and_in_bounds(tile, swap, shape):
    A, B = rand(*shape)
    em = emulate_smem_tiling(A, B, tile, swap, guarded=True)
    assert (em.writes == 1).all() and not em.stray.any()
    assert em.reads["A_reads_past_end"] == em.reads["B_reads_past_end"] == 0
    np.testing.assert_allclose(em.C, A.astype(np.float64) @ B, rtol=0, atol=1e-9)


def test_unguarded_kernel_is_exact_on_multiples():
    A, B = rand(64, 96, 32)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    assert all(v == 0 for v in em.reads.values())
    np.testing.assert_allclose(em.C, A.astype(np.float64) @ B, rtol=0, atol=1e-9)


def test_unguarded_kernel_fails_on_other_shapes():
    # K not a multiple: the last step reads rows of B past its end, for every element
    A, B = rand(32, 32, 40)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    cat = em.categories(A.astype(np.float64) @ B, 40)
    assert em.reads["B_reads_past_end"] > 0 and em.reads["A_reads_wrong_element"] > 0
    assert (cat == UNDEFINED).all()
    # N not a multiple: threads right of C store into the next row of C and past its end
    A, B = rand(40, 40, 32)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    cat = em.categories(A.astype(np.float64) @ B, 32)
    assert em.reads["stores_past_end_of_C"] > 0 and em.reads["stray_stores_into_C"] > 0
    assert (cat == CLOBBERED).sum() == em.reads["stray_stores_into_C"]
    assert (cat == CORRECT).any()
    # counts in a 40 x 40 C, TILE 32: row r < 39 receives the 24 stray columns of row r - 1 ...
    assert em.reads["stray_stores_into_C"] == 39 * 24


def test_failure_map_has_a_menu_of_shapes():
    fig = failure_map(shapes=((40, 40, 32), (32, 32, 40)))
    assert len(fig.layout.updatemenus[0].buttons) == 2
    assert "overwritten" in fig.layout.title.text


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.bindings")
    from helpers.resources import ToolMissing, tool

    try:
        tool("cuobjdump")
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_resources_no_spills_and_declared_shared_memory(nvrtc):
    from helpers.occupancy import declared_smem
    from helpers.resources import resources

    for name in ("smem_tiling", "smem_tiling_unguarded"):
        for tile in (8, 16, 32):
            res = resources(name, {"TILE": tile})
            assert not res.spills and res.registers <= 32, str(res)
            assert declared_smem(res) == 2 * tile * tile * 4


def test_inner_loop_reads_a_with_128_bit_broadcasts(nvrtc):
    from helpers.access_counts import sass_counts

    c = sass_counts("smem_tiling", {"TILE": 32})
    assert c.counts["FFMA"] == 32 and c.counts["LDS"] == 32 and c.counts["LDS.128"] == 8
    assert c.counts["BAR"] == 2 and c.counts["LDG"] == 2
