"""Validate inputs, allocate C, derive grid/block/shared memory, launch.

Taught in the chapter "The naive kernel" (book/03_naive.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compile import compile_kernel
from .registry import KernelSpec, get


def device_limits() -> dict:
    """The current GPU's limits, in the same keys as ``registry.SM90_LIMITS``."""
    import cupy

    attrs = cupy.cuda.Device().attributes
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return {
        "max_threads_per_block": attrs["MaxThreadsPerBlock"],
        "max_smem_per_block": attrs["MaxSharedMemoryPerBlockOptin"],
        "default_smem_per_block": attrs["MaxSharedMemoryPerBlock"],
        "max_smem_per_sm": attrs["MaxSharedMemoryPerMultiprocessor"],
        "regs_per_sm": attrs["MaxRegistersPerMultiprocessor"],
        "max_regs_per_thread": 255,
        "max_threads_per_sm": attrs["MaxThreadsPerMultiProcessor"],
        "max_blocks_per_sm": props.get("maxBlocksPerMultiProcessor", 32),
        "warp_size": attrs["WarpSize"],
        "sm_count": attrs["MultiProcessorCount"],
    }


def check_operands(A, B):
    """Clear errors for the usual mistakes: dtype, rank, layout, shapes."""
    import cupy

    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(X).__name__}"
                            " (use cupy.asarray to copy it over)")
        if X.dtype != np.float32:
            raise TypeError(f"{name} must be float32, got {X.dtype} (use {name}.astype(cupy.float32))")
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {X.shape}")
        if not X.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (row-major); use cupy.ascontiguousarray({name})")
        if X.size == 0:
            raise ValueError(f"{name} is empty (shape {X.shape}); every dimension must be >= 1")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}; "
                         f"A's columns ({A.shape[1]}) must equal B's rows ({B.shape[0]})")


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

    def __call__(self, A, B, C):
        self.kernel(self.grid, self.block,
                    (np.int32(self.M), np.int32(self.N), np.int32(self.K), A, B, C),
                    shared_mem=self.smem)


def prepare(name: str | KernelSpec, M: int, N: int, K: int, params: dict | None = None, **kw) -> Launcher:
    """Validate a config against the GPU and the shape, compile it, and return a launcher."""
    spec = get(name) if isinstance(name, str) else name
    limits = device_limits()
    full = spec.validate(params, limits=limits, **kw)
    spec.check_shape(full, M, N, K)
    kernel = compile_kernel(spec, full)
    smem = spec.smem_bytes(full)
    if smem > limits["default_smem_per_block"]:
        # Beyond 48 KiB a block must opt in to more dynamic shared memory.
        kernel.max_dynamic_shared_size_bytes = smem
    static = kernel.attributes.get("shared_size_bytes", 0) if hasattr(kernel, "attributes") else 0
    if static + smem > limits["max_smem_per_block"]:
        from .registry import ConfigError
        raise ConfigError(f"{spec.name} {spec.label_of(full)}: {static + smem} bytes of shared memory "
                          f"exceed this GPU's {limits['max_smem_per_block']} per block")
    threads = spec.block(full)[0] * spec.block(full)[1] * spec.block(full)[2]
    fits = kernel.attributes.get("max_threads_per_block", threads) if hasattr(kernel, "attributes") else threads
    if threads > fits:
        from .registry import ConfigError
        raise ConfigError(f"{spec.name} {spec.label_of(full)}: the compiled kernel uses "
                          f"{kernel.attributes.get('num_regs')} registers per thread, so at most {fits} "
                          f"threads fit in a block, not {threads}; choose a smaller block or thread tile")
    return Launcher(spec, full, M, N, K, kernel, spec.grid(full, M, N, K), spec.block(full), smem)


def matmul(name: str | KernelSpec, A, B, params: dict | None = None, **kw):
    """C = A @ B with the named kernel. C starts as NaN, so unwritten elements show."""
    import cupy

    check_operands(A, B)
    (M, K), N = A.shape, B.shape[1]
    launcher = prepare(name, M, N, K, params, **kw)
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    launcher(A, B, C)
    return C
