"""Validate, allocate C, derive grid, block and shared memory, launch: one kernel call.

:func:`prepare` checks a config against the device and the shape *before* compiling,
and returns a :class:`Launcher`; calling it checks the operands (a float64 array, a
wrong shape or a strided view is refused with a message, never handed to the kernel).

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import cupy
import numpy as np

from .. import hardware
from ..hardware import Device
from . import pack, reduce
from .compile import compile_function, compile_kernel
from .spec import ConfigError, KernelSpec
from .specs import get, wgmma

NULL = np.uint64(0)      # a null pointer argument
pack.COMPILE = compile_function   # the final kernel's packing compiles its kernel through this
reduce.COMPILE = compile_function # and so does its second kernel for split-K slabs
wgmma.COMPILE = compile_function  # and the wgmma kernels' pre-pass


def check_operand(name: str, X, shape: tuple[int, int], contiguous: bool = True) -> None:
    """One operand: a float32 CuPy matrix of the expected shape, C-contiguous unless the
    kernel reads strided views itself (``contiguous=False``: its spec's ``args`` checks them)."""
    if not isinstance(X, cupy.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(X).__name__} "
                        "(cupy.asarray copies a NumPy array over)")
    if X.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got {X.dtype} (use {name}.astype(cupy.float32))")
    if X.shape != shape:
        raise ValueError(f"{name} has shape {X.shape}, expected {shape}")
    if contiguous and not X.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major, no strides); "
                         f"use cupy.ascontiguousarray({name}), or helpers.sgemm for transposed views")
    if X.device.id != cupy.cuda.Device().id:
        raise ValueError(f"{name} lives on GPU {X.device.id}, the kernel runs on GPU {cupy.cuda.Device().id}")


def operand_shapes(A, B) -> tuple[int, int, int]:
    """(M, N, K) of A @ B, with clear errors for the usual mistakes."""
    for name, X in (("A", A), ("B", B)):
        if getattr(X, "ndim", None) != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {getattr(X, 'shape', None)}")
        if 0 in X.shape:
            raise ValueError(f"{name} is empty (shape {X.shape}); every dimension must be >= 1")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}; "
                         f"A's columns ({A.shape[1]}) must equal B's rows ({B.shape[0]})")
    return A.shape[0], B.shape[1], A.shape[1]


@dataclass
class Launcher:
    """A compiled kernel bound to one config and one problem shape."""

    spec: KernelSpec
    params: dict
    M: int
    N: int
    K: int
    kernel: object
    grid: tuple
    block: tuple
    smem: int
    ws_sizes: tuple | None = None     # (floats, counters) of the per-launch workspace; None: the kernel takes none
    # Workspaces of launches recorded into a CUDA graph: a replay reuses them, so they live as long as this.
    captured: list = field(default_factory=list, repr=False)
    # Arrival counters, one array per stream, reused from launch to launch: the kernel leaves
    # them zero, and launches on one stream run one after another. Zeroing new ones each time
    # would add a second launch, which costs as much host time as a small product.
    counters: dict = field(default_factory=dict, repr=False)

    def __call__(self, A, B, C) -> None:
        M, N, K = self.M, self.N, self.K
        plain = self.spec.args is None
        check_operand("A", A, (M, K), contiguous=plain)
        check_operand("B", B, (K, N), contiguous=plain)
        check_operand("C", C, (M, N), contiguous=plain)
        if self.spec.aligned_operands(self.params):
            for name, X in (("A", A), ("B", B)):
                if X.data.ptr % 16:
                    raise ConfigError(f"{self.spec.name} {self.spec.label(self.params)} reads {name} as float4 with no "
                                      f"alignment check, but {name} starts {X.data.ptr % 16} bytes past a 16-byte "
                                      f"boundary (a view into a bigger array?); pass a copy ({name}.copy() is aligned) "
                                      "or a config that checks alignment")
        self.launch(self.spec.arguments(self.params, M, N, K, A, B, C, self.workspace()))

    def launch(self, args: tuple) -> None:
        """One launch with a ready argument tuple (:meth:`KernelSpec.arguments`), and what the
        spec launches after it (``KernelSpec.after``)."""
        self.kernel(self.grid, self.block, args, shared_mem=self.smem)
        if self.spec.after is not None:
            self.spec.after(self.params, self.M, self.N, self.K, args)

    def workspace(self) -> tuple:
        """The per-launch workspace arguments a kernel asks for (split-K partial tiles).

        Every launch gets its own partial tiles, allocated on the current stream, so
        launches on any number of streams never share them. The arrival counters are the
        stream's own (zeroed once; the kernel leaves them zero), or new ones for a launch
        recorded into a CUDA graph, since a replay may run beside later launches.
        """
        if self.ws_sizes is None:
            return ()
        floats, counters = self.ws_sizes
        if not floats:
            return NULL, NULL
        partials, stream = cupy.empty(floats, dtype=cupy.float32), cupy.cuda.get_current_stream()
        if not counters:
            return partials, NULL
        if stream.is_capturing():
            ws = partials, cupy.zeros(counters, dtype=cupy.uint32)
            self.captured.append(ws)
            return ws
        if stream.ptr not in self.counters:
            self.counters[stream.ptr] = cupy.zeros(counters, dtype=cupy.uint32)
        return partials, self.counters[stream.ptr]


def prepare(name: str | KernelSpec, M: int, N: int, K: int, params: dict | None = None,
            device: Device | None = None, geometry: dict | None = None, expression: str | None = None,
            **kw) -> Launcher:
    """Validate a config against the device and the shape, compile it, return a launcher.
    ``geometry``: options of the spec's launch plan (:meth:`KernelSpec.geometry`); ``expression``:
    another instantiation of the spec's file to compile for the config (the final kernel's batched one)."""
    spec = get(name)
    device = device or hardware.current()
    full = spec.validate(params, device=device, **kw)
    spec.check_shape(full, M, N, K, device)
    kernel = (compile_kernel(spec, full, device) if expression is None
              else compile_function(spec.source(), spec.file, expression, device))
    smem = spec.smem_bytes(full)
    static = kernel.attributes.get("shared_size_bytes", 0)
    if static + smem > device.smem_per_block_static:
        kernel.max_dynamic_shared_size_bytes = smem   # beyond 48 KB in all, a block must opt in
    if static + smem > device.smem_per_block:
        raise ConfigError(f"{spec.name} {spec.label(full)}: {static + smem:,} B of shared memory (static and "
                          f"dynamic) exceed the {device.smem_per_block:,} B a block may use on {device.label}")
    fits = kernel.attributes.get("max_threads_per_block", spec.threads(full))
    if spec.threads(full) > fits:
        raise ConfigError(f"{spec.name} {spec.label(full)}: the compiled kernel uses "
                          f"{kernel.attributes.get('num_regs')} registers per thread, so at most {fits} "
                          f"threads fit in a block, not {spec.threads(full)}; choose a smaller block or thread tile")
    grid, ws_sizes = spec.geometry(full, M, N, K, device, **(geometry or {}))
    return Launcher(spec, full, M, N, K, kernel, grid, spec.block(full), smem, ws_sizes)


def matmul(name: str | KernelSpec, A, B, params: dict | None = None, **kw):
    """C = A @ B with the named kernel. C starts as NaN, so unwritten elements show."""
    M, N, K = operand_shapes(A, B)
    launcher = prepare(name, M, N, K, params, **kw)
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    launcher(A, B, C)
    return C
