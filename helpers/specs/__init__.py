"""One module per kernel file; importing this package registers them all.

Each module defines ``SPEC`` (a registered KernelSpec) or ``SPECS`` (several, for a
file with variants), and optionally:

* ``SWEEP``: what ``python -m helpers record`` measures for the chapter, as
  ``(params, (M, N, K))`` pairs for ``SPEC`` or ``(kernel_name, params, (M, N, K))``
  triples for any spec of the module;
* ``TEST_CONFIGS``: extra configs the GPU tests check, as ``params`` dicts for
  ``SPEC`` or ``(kernel_name, params)`` pairs.
"""
import importlib
import pkgutil

from ..registry import get

MODULES = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    MODULES[_info.name] = importlib.import_module(f"{__name__}.{_info.name}")


def module_specs(mod) -> list:
    return list(getattr(mod, "SPECS", None) or [mod.SPEC])


def sweeps() -> dict:
    """chapter -> list of (spec, params, shape) that `record` measures."""
    out: dict = {}
    for mod in MODULES.values():
        for item in getattr(mod, "SWEEP", ()):
            if len(item) == 3:
                name, params, shape = item
                spec = get(name)
            else:
                (params, shape), spec = item, mod.SPEC
            out.setdefault(spec.chapter, []).append((spec, params, shape))
    return out


def test_configs() -> list:
    """(spec, params) for every spec's defaults plus each module's TEST_CONFIGS."""
    out = []
    for mod in MODULES.values():
        for spec in module_specs(mod):
            out.append((spec, spec.defaults()))
        for item in getattr(mod, "TEST_CONFIGS", ()):
            if isinstance(item, tuple):
                out.append((get(item[0]), dict(item[1])))
            else:
                out.append((mod.SPEC, dict(item)))
    return out
