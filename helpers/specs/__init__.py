"""One module per kernel file; importing this package registers them all.

Each module defines ``SPEC`` (a registered KernelSpec) and ``SWEEP``: the list of
(params, (M, N, K)) that ``python -m helpers record`` measures for its chapter.
"""
import importlib
import pkgutil

MODULES = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    MODULES[_info.name] = importlib.import_module(f"{__name__}.{_info.name}")


def sweeps() -> dict:
    """chapter -> list of (spec, params, shape) that `record` measures."""
    out: dict = {}
    for mod in MODULES.values():
        spec = mod.SPEC
        for params, shape in getattr(mod, "SWEEP", ()):
            out.setdefault(spec.chapter, []).append((spec, params, shape))
    return out
