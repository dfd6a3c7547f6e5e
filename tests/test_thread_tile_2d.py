"""2D thread tiles (kernel 05): the register-tile model, the spec's rules, offline
resources and the NumPy emulation of the kernel's index math (CPU only)."""
import numpy as np
import pytest

from helpers import register_tiles as rt
from helpers.registry import ConfigError, get
from helpers.specs import thread_tile_2d as mod

SPEC = get("thread_tile_2d")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (33, 260, 30), (130, 131, 37)]


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("TM,TN,ratio", [(1, 1, 0.5), (8, 1, 8 / 9), (4, 4, 2.0), (8, 8, 4.0), (16, 8, 16 / 3)])
def test_fma_per_shared_load(TM, TN, ratio):
    assert rt.fma_per_load(TM, TN) == pytest.approx(ratio)
    assert rt.shared_loads_per_fma(TM, TN) == pytest.approx(1 / ratio)


def test_live_registers():
    assert rt.live_registers(8, 8) == 80 and rt.live_registers(16, 16) == 288


@pytest.mark.parametrize("threads,budget", [(64, 255), (128, 255), (256, 128), (512, 128), (1024, 64)])
def test_register_budget(threads, budget):
    assert rt.register_budget(threads) == budget


def test_tile_cost():
    c = rt.tile_cost(128, 128, 8, 8)
    assert (c.threads, c.live, c.budget, c.fits) == (256, 80, 128, True)
    assert not rt.tile_cost(256, 128, 16, 8).fits          # 256 threads: 128 registers
    assert rt.tile_cost(128, 128, 16, 8).fits               # 128 threads: 255 registers
    assert not rt.tile_cost(128, 128, 16, 16).fits


def test_loads_per_thread():
    from helpers.specs.thread_tile_2d import loads_per_thread

    assert loads_per_thread(SPEC.defaults(), vector=False) == (8, 8)   # 2048 floats each / 256 threads
    assert loads_per_thread(SPEC.defaults(), vector=True) == (2, 2)
    # more threads than elements: one (partial) sweep
    assert loads_per_thread(dict(BM=64, BN=64, BK=8, TM=2, TN=2), vector=False) == (1, 1)


# ------------------------------------------------------------------ the rules
def test_default_is_the_128x128_8x8_tile():
    d = SPEC.validate({})
    assert (d["BM"], d["BN"], d["TM"], d["TN"]) == (128, 128, 8, 8) and SPEC.block(d) == (256, 1, 1)


def test_register_rule_refuses_big_tiles_in_big_blocks():
    with pytest.raises(ConfigError, match=r"16x8 thread tile needs about \d+ registers.*at most 128"):
        SPEC.validate(BM=256, BN=128, TM=16, TN=8)
    with pytest.raises(ConfigError, match="spill"):
        SPEC.validate(BM=128, BN=128, TM=16, TN=16)
    SPEC.validate(BM=128, BN=128, TM=16, TN=8)              # 128 threads may use 255


def test_load_rule_refuses_blocks_narrower_than_b_rows():
    with pytest.raises(ConfigError, match="the 64 threads of a block load the B tile a row at a time"):
        SPEC.validate(BM=32, BN=128, TM=8, TN=8)


def test_too_many_threads():
    with pytest.raises(ConfigError, match="exceeds the limit of 1024"):
        SPEC.validate(BM=256, BN=256, TM=4, TN=4)


def test_refusal_suggests_a_valid_config():
    with pytest.raises(ConfigError, match="A valid alternative"):
        SPEC.validate(BM=256, BN=128, TM=16, TN=8)


def test_sweep_and_tests_are_valid_and_include_the_default_sizes():
    for params, _ in mod.SWEEP:
        SPEC.validate(params)
    for params in mod.TEST_CONFIGS:
        SPEC.validate(params)
    sizes = {shape[0] for params, shape in mod.SWEEP if params == SPEC.defaults() and len(set(shape)) == 1}
    assert {1024, 2048, 4096} <= sizes
    assert len(mod.SWEEP) <= 30


# ------------------------------------------------------ offline resources
CONFIGS = [SPEC.defaults()] + [dict(p) for p in mod.TEST_CONFIGS] + [p for p, _ in mod.SWEEP]


@pytest.mark.parametrize("params", [dict(t) for t in {tuple(sorted(p.items())) for p in CONFIGS}],
                         ids=lambda p: SPEC.label_of(p))
def test_no_spills_and_two_blocks_fit(params):
    from helpers.resources import resources

    res = resources(SPEC, params)
    assert not res.spills, str(res)
    threads = SPEC.block(SPEC.validate(params))[0]
    assert res.registers <= rt.register_budget(threads), str(res)


def test_resource_table_marks_refusals():
    rows = rt.resource_table("thread_tile_2d", [{}, dict(BM=256, BN=128, TM=16, TN=8)])
    assert rows[0]["registers"] <= 128 and rows[0]["spill_bytes"] == 0 and rows[0]["blocks_per_sm"] == 2
    assert "registers" in rows[1]["refused"] and "threads" not in rows[1]


def test_compiler_vectorises_the_shared_reads():
    from helpers.resources import inner_loop, sass

    ops = rt.memory_ops(inner_loop(sass(SPEC, {})))
    assert ops["LDS.128"] == 64 and ops["LDS"] == 0          # 8 rows x 16/4 of A + 16 k x 8/4 of B
    assert ops["LDG.E.128"] == 0 and ops["LDG.E"] > 0         # scalar global loads
    c = rt.slice_instructions("thread_tile_2d")
    assert c == {"FFMA": 1024, "LDS.128": 64, "LDG.E": 16, "STS": 16}


# ----------------------------------------------------------- index math
@pytest.mark.parametrize("params", [SPEC.defaults()] + list(mod.TEST_CONFIGS), ids=lambda p: SPEC.label_of(p))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_emulated_kernel_is_correct_and_writes_each_element_once(params, shape):
    M, N, K = shape
    rng = np.random.default_rng(M * 7 + N)
    A, B = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    e = rt.emulate("thread_tile_2d", A, B, params)
    assert (e.writes == 1).all()
    np.testing.assert_allclose(e.C, A @ B, rtol=1e-12, atol=1e-12)


def test_emulation_counts_the_loads():
    A, B = np.ones((128, 16)), np.ones((16, 128))
    e = rt.emulate("thread_tile_2d", A, B)
    assert e.scalar_loads == 128 * 16 * 2 and e.float4_loads == 0
