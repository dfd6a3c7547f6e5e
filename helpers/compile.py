"""Compile a kernel config with CuPy: ``RawModule`` + ``name_expressions``.

Kernels are real C++ templates; ``name_expressions`` asks NVRTC to instantiate
``sgemm_x<128, 128, 8>`` and hands back the mangled symbol. Modules are cached
per (source hash, expression, options) in this process, and CuPy caches the
binary on disk, so a second compile of the same config is free.

Taught in the chapter "The naive kernel" (book/03_naive.md).
"""
from __future__ import annotations

import hashlib

from .registry import KernelSpec

BASE_OPTIONS = ("-std=c++17",)
_CACHE: dict = {}


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel; the message carries the compiler log."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def compile_kernel(spec: KernelSpec, params: dict):
    """Return a ``cupy.RawKernel`` for ``spec`` instantiated with ``params``.

    ``params`` must already be validated (``spec.validate``).
    """
    import cupy

    source = spec.source()
    expr = spec.name_expression(params)
    options = BASE_OPTIONS + tuple(spec.options)
    key = (source_hash(source), expr, options)
    if key not in _CACHE:
        try:
            module = cupy.RawModule(code=source, options=options, name_expressions=[expr])
            kernel = module.get_function(expr)
        except cupy.cuda.compiler.CompileException as exc:
            raise KernelCompileError(
                f"NVRTC could not compile {expr} from kernels/{spec.file}:\n{exc.get_message()}"
            ) from None
        _CACHE[key] = kernel
    return _CACHE[key]
