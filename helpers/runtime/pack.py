"""Packing: an operand rewritten k-major with 16-byte aligned rows before the final kernel runs.

The final kernel copies an operand 16 bytes at a time only when it runs along M (or N) in
memory with 16-byte aligned rows; otherwise 4 bytes at a time, which costs it up to a
quarter of its speed. :func:`pack` copies ``X`` (an R x K view: op(A), or op(B) transposed)
into ``dst[k, r]`` with a row length rounded up to 4 floats (kernels/12_pack.cu), and
returns the R x K view of the copy. The final kernel then reads A as a transposed view and
B as a row-major one: the layout "TN", with aligned rows.

Whether a product packs an operand is the dispatcher's call (``PACK_A``, ``PACK_B`` in
:mod:`helpers.runtime.specs.final`); the copy is timed with the product it serves.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import hardware, settings
from ..hardware import INT32_LIMIT, Device
from .layout import layout
from .spec import cdiv, inline_includes

FILE = "12_pack.cu"
BLOCK = (32, 8, 1)
MAX_GRID_Y = 65535


def row_floats(R: int) -> int:
    """Floats per k-row of a packed operand with R elements per row: a multiple of 4 (16 bytes)."""
    return cdiv(R, 4) * 4


def floats(R: int, K: int) -> int:
    """Floats a packed R x K operand occupies."""
    return K * row_floats(R)


def grid(R: int, K: int) -> tuple[int, int, int]:
    return cdiv(R, 32), min(cdiv(K, 32), MAX_GRID_Y), 1


def source_layout(X) -> tuple[int, int]:
    """(ALONG_K, ld) of an R x K view: 1 when its rows (along K) are contiguous, else 0."""
    lay = layout(X, "the operand to pack")
    return (0 if lay.transposed else 1), lay.ld


@functools.lru_cache(maxsize=None)
def _kernel(along_k: int, device: Device, source: str):
    from .compile import compile_function

    return compile_function(source, FILE, f"pack_kmajor<{along_k}>", device)


def kernel(along_k: int):
    """The compiled packing kernel (cached: a pack runs once per product, its host time counts)."""
    return _kernel(along_k, hardware.current(), _source())


@functools.lru_cache(maxsize=1)
def _source_at(mtime_ns: int) -> str:
    return inline_includes(settings.KERNEL_DIR / FILE)


def _source() -> str:
    return _source_at((settings.KERNEL_DIR / FILE).stat().st_mtime_ns)


def pack(X, dst):
    """Copy the R x K view ``X`` into ``dst`` (a float32 CuPy array of at least
    :func:`floats` elements, 16-byte aligned) k-major; returns the R x K view of the copy."""
    R, K = X.shape
    ld_dst = row_floats(R)
    if K * ld_dst > dst.size:
        raise ValueError(f"the packing buffer holds {dst.size} floats, {K * ld_dst} needed")
    if max(R, K, ld_dst) >= INT32_LIMIT:
        raise ValueError(f"an operand of {R} x {K} does not fit the packing kernel's int arguments")
    along_k, ld = source_layout(X)
    out = dst[:K * ld_dst].reshape(K, ld_dst)
    kernel(along_k)(grid(R, K), BLOCK, (np.int32(R), np.int32(K), X, np.int32(ld), out, np.int32(ld_dst)))
    return out[:, :R].T
