"""1D thread tiles: load counts per result, spec rules, the kernel's index math
emulated on the CPU, and the compiled inner loop (offline sm_90 SASS)."""
import numpy as np
import pytest

from helpers import model
from helpers.access_counts import as_fraction_of_K, per_result
from helpers.registry import ConfigError, get
from helpers.tiling import emulate_thread_tile_1d, thread_tile_1d_owner

K = 4096
SEEDS_1D = {"BM": 64, "BN": 64, "BK": 8, "TM": 8}


def test_loads_per_result_match_the_articles_counts():
    t = per_result("thread_tile_1d", SEEDS_1D, K)
    s = per_result("smem_tiling", {"TILE": 32}, K)
    assert (t["global"], t["shared"]) == (K / 32, 9 * K / 8)
    assert (s["global"], s["shared"]) == (K / 16, 2 * K)
    assert [as_fraction_of_K(x, K) for x in (t["global"], t["shared"], s["global"], s["shared"])] == \
        ["K/32", "9K/8", "K/16", "2K"]


def test_loads_per_result_follow_the_tile_sizes():
    c = per_result("thread_tile_1d", {"BM": 128, "BN": 64, "BK": 32, "TM": 16}, K)
    assert c["global"] == K * (128 + 64) / (128 * 64) == 3 * K / 128
    assert c["shared"] == 17 * K / 16
    assert per_result("thread_tile_1d", {"TM": 1, "BM": 32, "BN": 32}, K)["shared"] == 2 * K
    # BK changes how often the block synchronises, not how much it loads
    assert per_result("thread_tile_1d", {"BK": 4}, K) == per_result("thread_tile_1d", {"BK": 64}, K)


def test_dot_product_order_as_written_reads_b_for_every_result():
    assert per_result("thread_tile_1d", dict(SEEDS_1D, LOOP=0), K, as_written=True)["shared"] == 2 * K
    assert per_result("thread_tile_1d", dict(SEEDS_1D, LOOP=1), K, as_written=True)["shared"] == 9 * K / 8


def test_agrees_with_the_roofline_model():
    for params in (SEEDS_1D, {"BM": 128, "BN": 32, "BK": 16, "TM": 4}):
        ours = per_result("thread_tile_1d", params, K)
        theirs = model.loads_per_result("thread_tile_1d", params, K)
        assert (ours["global"], ours["shared"]) == (theirs["global"], theirs["shared"])
        M = N = 1024
        assert model.kernel_bytes("thread_tile_1d", params, M, N, K) == pytest.approx(4 * ours["global"] * M * N + 4 * M * N)


# ------------------------------------------------------------------ rules
def test_rules_name_the_problem_and_a_fix():
    spec = get("thread_tile_1d")
    with pytest.raises(ConfigError, match="TM=32 must divide BM=16"):
        spec.validate(BM=16, TM=32)
    with pytest.raises(ConfigError, match=r"BM\*BN/TM = 128\*128/8 = 2048 threads.*raise TM to 16"):
        spec.validate(BM=128, BN=128, TM=8)
    with pytest.raises(ConfigError, match="not a whole number of 32-thread warps"):
        spec.validate(BM=16, BN=16, TM=16)
    with pytest.raises(ConfigError, match=r"4\*\(BM\+BN\)\*BK = 65536 B .* lower BK"):
        spec.validate(BM=128, BN=128, BK=64, TM=16)
    with pytest.raises(ConfigError, match="A valid alternative"):
        spec.validate(BM=128, BN=128, TM=8)


def test_defaults_and_sweep():
    from helpers.specs import thread_tile_1d as mod

    spec = get("thread_tile_1d")
    d = spec.defaults()
    assert d == {"BM": 64, "BN": 64, "BK": 32, "TM": 8, "LOOP": 1}
    assert spec.block(d) == (512, 1, 1)
    assert spec.grid(d, 1000, 3000, 777) == (47, 16, 1)
    sweep = mod.SWEEP
    assert len(sweep) <= 30
    for n in (1024, 2048, 4096):
        assert (d, (n, n, n)) in sweep
    at_4096 = [p for p, s in sweep if s == (4096, 4096, 4096)]
    assert {p["TM"] for p in at_4096 if p["BK"] == d["BK"]} >= {4, 8, 16}
    assert {p["BK"] for p in at_4096 if p["TM"] == d["TM"]} >= {8, 16, 32, 64}
    for p, (M, N, K_) in sweep:
        spec.check_shape(spec.validate(p), M, N, K_)


# ---------------------------------------------------------- index math on the CPU
def test_every_element_of_the_block_tile_has_one_owner():
    for BM, BN, TM in ((64, 64, 8), (32, 16, 16), (128, 32, 4), (64, 64, 1)):
        owner = thread_tile_1d_owner(BM, BN, TM)
        assert (owner >= 0).all()
        assert np.bincount(owner.ravel()).tolist() == [TM] * (BM * BN // TM)


CONFIGS = [(64, 64, 32, 8), (64, 64, 8, 8), (64, 64, 4, 8), (64, 64, 64, 4), (128, 32, 16, 4),
           (32, 16, 4, 16), (128, 64, 32, 16), (128, 128, 8, 32)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (127, 129, 65), (33, 70, 40), (64, 64, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_emulated_kernel_is_exact_and_in_bounds(cfg, shape):
    M, N, K_ = shape
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K_)).astype(np.float32)
    B = rng.uniform(-1, 1, (K_, N)).astype(np.float32)
    em = emulate_thread_tile_1d(A, B, *cfg)
    assert (em.writes == 1).all()                              # each element of C stored exactly once
    assert em.reads["A_reads_past_end"] == em.reads["B_reads_past_end"] == 0
    assert em.reads["tile_elements_not_stored_once"] == 0      # the strided loads cover each tile
    np.testing.assert_allclose(em.C, A.astype(np.float64) @ B, rtol=0, atol=1e-9)


# ------------------------------------------------------------- compiled code
@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.bindings")
    from helpers.resources import ToolMissing, tool

    try:
        tool("cuobjdump")
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_both_loop_orders_compile_to_the_same_loads(nvrtc):
    from helpers.access_counts import loop_order_table, sass_counts

    for params in (SEEDS_1D, get("thread_tile_1d").defaults()):
        BK, TM = params["BK"], params["TM"]
        dot, kouter = (sass_counts("thread_tile_1d", dict(params, LOOP=loop)).counts for loop in (0, 1))
        assert dot == kouter
        steps = kouter["FFMA"] // (TM * BK)
        assert steps >= 1
        assert kouter["LDS"] == BK * steps                # one B value per k
        assert kouter["LDS.128"] == TM * BK // 4 * steps  # four k of one row of A per load
    rows = loop_order_table(SEEDS_1D)
    assert [r["shared reads per step, as written"] for r in rows] == [128, 72]
    assert [r["shared floats fetched per step"] for r in rows] == [72, 72]


def test_sweep_and_test_configs_do_not_spill(nvrtc):
    from helpers.resources import resources
    from helpers.specs import thread_tile_1d as mod

    spec = get("thread_tile_1d")
    for p in [p for p, _ in mod.SWEEP] + list(mod.TEST_CONFIGS):
        full = spec.validate(p)
        res = resources(spec, full)
        assert not res.spills and res.stack_bytes == 0, str(res)
        if spec.block(full)[0] == 1024:
            assert res.registers <= 64, str(res)


def test_excerpt_shows_shared_loads_and_ffma(nvrtc):
    from helpers.access_counts import excerpt

    text = excerpt("thread_tile_1d", SEEDS_1D, lines=10)
    assert "LDS.128" in text and "FFMA" in text and "0x" not in text.split("\n")[0].split("*/")[0][2:]
