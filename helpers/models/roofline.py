"""FLOPs, global-memory bytes and arithmetic intensity of a kernel config: the roofline's x axis.

A block that computes a BM x BN tile of C streams a BM x K panel of A and a K x BN panel
of B through it, so over the whole grid the kernel asks global memory for
``4 * M * N * K * (1/BM + 1/BN)`` bytes of operands, plus ``4 * M * N`` to write C.
Bigger tiles reuse each loaded float more often: that is the whole story of the book in
one formula. The roofs (FP32 peak, memory bandwidth) are the device's
(:class:`helpers.hardware.Device`).

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from ..shapes import flops


def min_bytes(M: int, N: int, K: int) -> int:
    """Each operand read once and C written once: the least any kernel can move."""
    return 4 * (M * K + K * N + M * N)


def tiled_bytes(M: int, N: int, K: int, BM: int, BN: int) -> float:
    """Global bytes requested by a kernel whose blocks compute BM x BN tiles of C."""
    return 4 * M * N * K * (1 / BM + 1 / BN) + 4 * M * N


def kernel_bytes(kernel: str | KernelSpec, params: dict | None, M: int, N: int, K: int) -> float:
    spec = get(kernel)
    t = spec.tiles(spec.resolve(params))
    return tiled_bytes(M, N, K, t.BM, t.BN)


def intensity(kernel: str | KernelSpec, params: dict | None, M: int, N: int, K: int) -> float:
    """FLOPs per byte of global-memory traffic for one kernel config."""
    return flops(M, N, K) / kernel_bytes(kernel, params, M, N, K)


def loads_per_result(kernel: str | KernelSpec, params: dict | None, K: int) -> dict:
    """Global and shared-memory loads (floats) per element of C, over the whole K loop.

    Taught in the chapters "Shared-memory tiling" and "1D thread tiles". A block tile of
    BM x BN results loads (BM + BN) * K floats from global memory: ``K (1/BM + 1/BN)`` per
    result. A thread with a TM x TN tile reads TM + TN floats from shared memory per k
    for TM x TN results. The naive kernels (no shared memory) are the case BM = BN = 1.
    """
    spec = get(kernel)
    t = spec.tiles(spec.resolve(params))
    shared = (t.TM + t.TN) * K / (t.TM * t.TN) if t.shared else 0.0
    return {"global": K * (t.BM + t.BN) / (t.BM * t.BN), "shared": shared}
