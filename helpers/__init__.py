"""The Python package behind the SGEMM book.

Notebooks import what they need from here; each module's docstring names the
chapter that teaches it.
"""
from .registry import ConfigError, KernelSpec, Param, all_specs, get  # noqa: F401
from .mode import is_live, mode  # noqa: F401
