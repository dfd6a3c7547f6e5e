"""float4 kernel (06) and the bank-conflict layouts (07): rules, alignment paths,
machine code and the NumPy emulation of their index math (CPU only)."""
import numpy as np
import pytest

from helpers import register_tiles as rt
from helpers.registry import ConfigError, get
from helpers.resources import inner_loop, sass
from helpers.specs import bank_conflicts as bc_mod
from helpers.specs import vectorized as vec_mod

VEC = get("vectorized")
BC = get("bank_conflicts")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 65), (33, 260, 30), (130, 131, 37), (129, 132, 68)]


def _run(kernel, params, shape, seed=0):
    M, N, K = shape
    rng = np.random.default_rng(seed + M)
    A, B = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    e = rt.emulate(kernel, A, B, params)
    assert (e.writes == 1).all()
    np.testing.assert_allclose(e.C, A @ B, rtol=1e-12, atol=1e-12)
    return e


# ------------------------------------------------------------------ rules
def test_float4_granularity_is_enforced_by_allowed_values():
    with pytest.raises(ConfigError, match="TM=2 is not allowed"):
        VEC.validate(TM=2)


def test_vector_register_rule_counts_float4_in_flight():
    with pytest.raises(ConfigError, match="registers"):
        VEC.validate(BM=64, BN=64, BK=32, TM=16, TN=8)     # 32 threads, 32 float4 in flight each
    VEC.validate(BK=32, TM=16, TN=8)


def test_vector_load_rule():
    with pytest.raises(ConfigError, match="BN/4=64 float4 must not exceed them"):
        VEC.validate(BM=32, BN=256, TM=16, TN=16)


def test_bank_conflict_rules():
    with pytest.raises(ConfigError, match="pick one"):
        BC.validate(PAD=4, SWIZZLE=1)
    d = BC.validate({})
    assert d == {"BK": 16, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}


def test_sweeps_valid_and_small():
    for mod, spec in ((vec_mod, VEC), (bc_mod, BC)):
        for params, _ in mod.SWEEP:
            spec.validate(params)
        for params in mod.TEST_CONFIGS:
            spec.validate(params)
        assert len(mod.SWEEP) <= 30
        sizes = {s[0] for p, s in mod.SWEEP if p == spec.defaults() and len(set(s)) == 1}
        assert {1024, 2048} <= sizes
    assert len(bc_mod.TEST_CONFIGS) == 11                   # every layout but the default


# ---------------------------------------------------------- alignment paths
def test_aligned_shapes_use_float4_only():
    e = _run("vectorized", {}, (256, 256, 256))
    # 4 blocks, each reads a 128 x 256 panel of A and a 256 x 128 panel of B, 4 floats at a time
    assert e.scalar_loads == 0 and e.float4_loads == 4 * (128 * 256 + 256 * 128) // 4


@pytest.mark.parametrize("shape,a_vec,b_vec", [((256, 256, 255), False, True), ((256, 255, 256), True, False),
                                               ((255, 256, 256), True, True), ((130, 131, 37), False, False)])
def test_odd_k_or_n_falls_back_to_scalar(shape, a_vec, b_vec):
    e = _run("vectorized", {}, shape)
    assert (e.float4_loads > 0) == (a_vec or b_vec)
    assert (e.scalar_loads > 0) == (not a_vec or not b_vec)


def test_misaligned_float4_is_caught_by_the_emulator():
    stats = [0, 0]
    with pytest.raises(AssertionError, match="misaligned"):
        rt._load4(np.ones((3, 6)), np.array([1]), np.array([0]), True, stats)   # word 6: not a multiple of 4


# -------------------------------------------------------------- index math
@pytest.mark.parametrize("params", [VEC.defaults()] + list(vec_mod.TEST_CONFIGS), ids=lambda p: VEC.label_of(p))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_vectorized_emulation(params, shape):
    _run("vectorized", params, shape)


@pytest.mark.parametrize("params", [BC.defaults()] + list(bc_mod.TEST_CONFIGS), ids=lambda p: BC.label_of(p))
@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 131, 37), (129, 260, 64)], ids=lambda s: "x".join(map(str, s)))
def test_bank_conflict_layouts_emulation(params, shape):
    _run("bank_conflicts", params, shape)


# ------------------------------------------------------------ machine code
def test_vectorized_sass_has_128_bit_global_and_shared_accesses():
    ops = rt.memory_ops(sass(VEC, {}))
    assert ops["LDG.E.128"] == 8 and ops["STS.128"] == 2 and ops["LDS.128"] == 64 and ops["STG.E.128"] > 0
    c = rt.slice_instructions("vectorized")
    assert c == {"FFMA": 1024, "LDS.128": 64, "LDG.E.128": 4, "STS": 8, "STS.128": 2}


@pytest.mark.parametrize("params,lds128", [({}, 64), (dict(SWIZZLE=0, PAD=4), 64), (dict(SWIZZLE=0, PAD=0), 64),
                                           (dict(SWIZZLE=0, PAD=2), 48), (dict(SWIZZLE=0, PAD=1), 56)])
def test_padding_that_breaks_alignment_loses_lds128(params, lds128):
    ops = rt.memory_ops(inner_loop(sass(BC, params)))
    assert ops["LDS.128"] == lds128
    if params.get("PAD") in (1, 2):
        assert ops["LDS.64"] > 0


@pytest.mark.parametrize("params", [BC.defaults()] + list(bc_mod.TEST_CONFIGS) + [VEC.defaults()],
                         ids=lambda p: str(p))
def test_no_spills_two_blocks_per_sm(params):
    from helpers.resources import resources

    spec = VEC if "BM" in params else BC
    res = resources(spec, params)
    assert not res.spills and res.registers <= 128, str(res)
