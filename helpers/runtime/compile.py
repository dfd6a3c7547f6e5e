"""Compile a kernel config for the GPU with CuPy: ``RawModule`` + ``name_expressions``.

Kernels are C++ templates; ``name_expressions`` asks NVRTC to instantiate
``sgemm_x<128, 128, 8>`` and hands back the mangled symbol. Modules are cached in
this process, and CuPy caches binaries on disk, so a second compile is free.

For an emulated target (``SGEMM_BOOK_TARGET=sm_75``) the kernel is compiled to PTX for
that architecture by :mod:`helpers.runtime.offline` (CuPy would add its own ``-arch``
for the GPU present after ours) and loaded from that PTX, which the driver compiles
for the real GPU: the code is what the target's compiler would generate from the
target's instruction set.

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

import tempfile

import cupy

from .. import hardware, settings
from ..hardware import Device
from .offline import CompileError, nvrtc_compile
from .spec import KernelSpec

LIVE_OPTIONS = ("-std=c++17",)
_CACHE: dict = {}


def compile_kernel(spec: KernelSpec, params: dict, device: Device | None = None):
    """A ``cupy.RawKernel`` for ``spec`` instantiated with ``params`` (already validated)."""
    return compile_function(spec.source(), spec.file, spec.name_expression(params), device)


def compile_function(source: str, file: str, expr: str, device: Device | None = None):
    """A ``cupy.RawKernel`` for the template instantiation ``expr`` of ``source`` (kernels/``file``)."""
    device = device or hardware.current()
    options = LIVE_OPTIONS + (("-lineinfo",) if settings.lineinfo() else ())
    key = (source, expr, options, device.arch if device.emulated else "native")
    if key not in _CACHE:
        if device.emulated:
            ptx, _, lowered = nvrtc_compile(source, file, expr, device.arch, ptx=True, options=options[1:])
            with tempfile.NamedTemporaryFile(suffix=".ptx") as f:
                f.write(ptx.rstrip(b"\x00 "))
                f.flush()
                _CACHE[key] = cupy.RawModule(path=f.name).get_function(lowered)
        else:
            try:
                module = cupy.RawModule(code=source, options=options, name_expressions=[expr])
                _CACHE[key] = module.get_function(expr)
            except cupy.cuda.compiler.CompileException as exc:
                raise CompileError(f"NVRTC could not compile {expr} from kernels/{file}:\n"
                                   f"{exc.get_message()}") from None
    return _CACHE[key]
