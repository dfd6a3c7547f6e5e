"""Compile a kernel config for the GPU with CuPy: ``RawModule`` + ``name_expressions``.

Kernels are C++ templates; ``name_expressions`` asks NVRTC to instantiate
``sgemm_x<128, 128, 8>`` and hands back the mangled symbol. Modules are cached in
this process, and CuPy caches binaries on disk, so a second compile is free.

A kernel whose spec names its own target (``target="sm_90a"``: wgmma exists only in code
built for exactly compute capability 9.0) is compiled by NVRTC to a cubin for that target
and loaded from it: CuPy would add its own ``-arch`` for the GPU present.

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
    return compile_function(spec.source(), spec.file, spec.name_expression(params), device, spec.target)


def compile_function(source: str, file: str, expr: str, device: Device | None = None, target: str | None = None):
    """A ``cupy.RawKernel`` for the template instantiation ``expr`` of ``source`` (kernels/``file``),
    built for ``target`` where one is named (``"sm_90a"``)."""
    device = device or hardware.current()
    options = LIVE_OPTIONS + (("-lineinfo",) if settings.lineinfo() else ())
    key = (source, expr, options, target or (device.arch if device.emulated else "native"))
    if key not in _CACHE:
        if target:
            _CACHE[key] = _compile_for_target(source, file, expr, target, options)
        elif device.emulated:
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


def _compile_for_target(source: str, file: str, expr: str, target: str, options: tuple):
    """NVRTC (CuPy's binding) straight to a cubin for ``target``, loaded as a RawKernel."""
    from cupy_backends.cuda.libs import nvrtc   # noqa: PLC0415  (CuPy's own NVRTC binding)

    prog = nvrtc.createProgram(source, file, [], [])
    try:
        nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, list(options) + ["--device-as-default-execution-space", f"-arch={target}"])
        except nvrtc.NVRTCError:
            raise CompileError(f"NVRTC could not compile {expr} from kernels/{file} for {target}:\n"
                               f"{nvrtc.getProgramLog(prog)}") from None
        cubin, lowered = nvrtc.getCUBIN(prog), nvrtc.getLoweredName(prog, expr)
    finally:
        nvrtc.destroyProgram(prog)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return cupy.RawModule(path=f.name).get_function(lowered)
