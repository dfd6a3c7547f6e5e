"""Which runs `python -m helpers sanitize` makes (no GPU needed to plan them)."""
from helpers import hardware
from helpers.measure import sanitize
from helpers.runtime.specs import get
from helpers.runtime.specs import test_configs as checked_configs


def test_every_run_is_a_shape_its_config_accepts():
    for spec, params, shape, _ in sanitize.jobs():
        spec.check_shape(params, *shape, hardware.default())   # raises ConfigError on a refused shape


def test_every_checked_config_runs_under_both_tools():
    planned = {(spec.name, str(params), tool) for spec, params, _, tool in sanitize.jobs()}
    for spec, params in checked_configs():
        for tool in sanitize.TOOLS:
            assert (spec.name, str(spec.validate(params)), tool) in planned, (spec.name, params, tool)


def test_a_kernel_without_edge_handling_gets_tile_multiples():
    spec = get("smem_tiling_unguarded")
    shapes = sanitize.shapes_for(spec, {"TILE": 8}, sanitize.SHAPES, hardware.default())
    assert shapes == [(72, 48, 40), (136, 136, 24)]
