"""The Python package behind the SGEMM book.

Notebooks import what they need from here; each module's docstring names the
chapter that teaches it.
"""
from .registry import ConfigError, KernelSpec, Param, all_specs, get  # noqa: F401
from . import mode  # noqa: F401  (helpers.mode.banner(), helpers.mode.mode())
from .mode import is_live  # noqa: F401
