"""Registry rules and their error messages (CPU only)."""
import pytest

from helpers.registry import REGISTRY, ConfigError, all_specs, get


def test_every_kernel_file_has_a_spec():
    from helpers.registry import KERNEL_DIR

    files = {p.name for p in KERNEL_DIR.glob("*.cu")}
    assert files == {s.file for s in all_specs()}


def test_unknown_kernel_lists_names():
    with pytest.raises(KeyError, match="registered"):
        get("no_such_kernel")


def test_too_many_threads_names_rule_and_alternative():
    with pytest.raises(ConfigError) as exc:
        get("naive").validate(BX=64, BY=32)
    msg = str(exc.value)
    assert "2048 threads per block exceeds the limit of 1024" in msg
    assert "A valid alternative" in msg


def test_disallowed_value_lists_choices():
    with pytest.raises(ConfigError, match=r"BX=3 is not allowed; choose one of \[1, 2, 4"):
        get("naive").validate(BX=3)


def test_unknown_parameter():
    with pytest.raises(ConfigError, match="unknown parameter"):
        get("naive").validate(TM=8)


def test_partial_warp_refused():
    with pytest.raises(ConfigError, match="whole number of warps"):
        get("naive").validate(BX=4, BY=4)


@pytest.mark.parametrize("shape", [(0, 4, 4), (4, -1, 4), (4, 4, 2.5)])
def test_bad_shapes_refused(shape):
    spec = get("naive")
    with pytest.raises(ConfigError, match="positive int"):
        spec.check_shape(spec.defaults(), *shape)


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_defaults_valid_and_space_nonempty(spec):
    spec.validate(spec.defaults())
    assert next(iter(spec.space()), None) is not None


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_name_expression_is_a_template_instantiation(spec):
    expr = spec.name_expression(spec.defaults())
    assert expr.startswith(spec.function)
    assert spec.source().count(spec.function) >= 1


def test_sweeps_only_use_valid_configs():
    from helpers.specs import sweeps

    for chapter, items in sweeps().items():
        for spec, params, (M, N, K) in items:
            full = spec.validate(params)
            spec.check_shape(full, M, N, K)
