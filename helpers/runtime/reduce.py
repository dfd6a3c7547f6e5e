"""Adding the parts of a split-K product in a second kernel (kernels/12_reduce.cu).

With many splits of K, the final kernel's own reduction (the block that finishes a tile
reads every part, one after another) becomes a long serial tail. With ``REDUCE=1`` each
split stores its part whole, a slab of M x N floats in the workspace, and :func:`add_parts`
adds the slabs in k order with every thread of the GPU: the same sums in the same order,
so the same bits. Whether a product splits this way is the dispatcher's call
(:mod:`helpers.runtime.specs.final`).

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import hardware, settings
from ..hardware import Device
from .spec import cdiv, inline_includes

FILE = "12_reduce.cu"
THREADS = 256
BLOCKS_PER_SM = 8          # a grid-stride loop: enough blocks to fill the GPU, no more

# The compiler, handed over by helpers.runtime.launch (the specs sit below it), as for packing.
COMPILE = None


@functools.lru_cache(maxsize=None)
def _kernel(device: Device):
    if COMPILE is None:
        raise RuntimeError("adding parts needs helpers.runtime.launch imported (it hands over the compiler)")
    return COMPILE(inline_includes(settings.KERNEL_DIR / FILE), FILE, "add_parts", device)


def grid(M: int, N: int, device: Device) -> tuple[int, int, int]:
    return min(cdiv(M * N, THREADS), BLOCKS_PER_SM * device.sm_count), 1, 1


def pitch(N: int) -> int:
    """Row stride of a slab, in floats: N rounded up to a multiple of 4, so that every row starts
    16 bytes aligned and the final kernel stores the slab float4 at a time whatever N is."""
    return cdiv(N, 4) * 4


def add_parts(M: int, N: int, parts: int, alpha, slabs, beta, C, ldc) -> None:
    """C = alpha * (sum of the ``parts`` slabs of M x N floats at ``slabs``, in order) + beta * C
    (``slabs``: a pointer, as the final kernel's arguments carry it; rows ``pitch(N)`` apart)."""
    device = hardware.current()
    _kernel(device)(grid(M, N, device), (THREADS, 1, 1),
                    (np.int32(M), np.int32(N), np.int32(parts), np.float32(alpha), slabs, np.int32(pitch(N)),
                     np.float32(beta), C, np.int32(ldc)))
