"""Packing: an operand rewritten k-major with 16-byte aligned rows before the final kernel runs.

The final kernel copies an operand 16 bytes at a time only when it runs along M (or N) in
memory with 16-byte aligned rows; otherwise 4 bytes at a time, which costs it up to a
quarter of its speed. :func:`pack` copies op(A) (R = M) or op(B) (R = N) into
``dst[k * ld + r]``, ld the row length R rounded up to 4 floats (kernels/12_pack.cu). The final kernel then reads A as a transposed view and
B as a row-major one: the layout "TN", with aligned rows.

Whether a product packs an operand is the dispatcher's call (``PACK_A``, ``PACK_B`` in
:mod:`helpers.runtime.specs.final`); the copy is timed with the product it serves.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import hardware, settings
from ..hardware import INT32_LIMIT, MAX_GRID_YZ, Device
from .layout import layout
from .spec import cdiv, inline_includes

FILE = "12_pack.cu"
BLOCK = (32, 8, 1)


def row_floats(R: int) -> int:
    """Floats per k-row of a packed operand with R elements per row: a multiple of 4 (16 bytes)."""
    return cdiv(R, 4) * 4


def floats(R: int, K: int) -> int:
    """Floats a packed R x K operand occupies."""
    return K * row_floats(R)


def grid(R: int, K: int) -> tuple[int, int, int]:
    return cdiv(R, 32), min(cdiv(K, 32), MAX_GRID_YZ), 1


def source_layout(X, operand: str) -> tuple[int, int]:
    """(ALONG_K, ld) of operand ``X`` ("A": op(A), M x K; "B": op(B), K x N): ALONG_K is 1
    when its elements run along K in memory (A row-major, B transposed)."""
    lay = layout(X, operand)
    return int(lay.transposed if operand == "B" else not lay.transposed), lay.ld


# The compiler, handed over by helpers.runtime.launch: the specs (which pack) sit below the
# compiler in the package's layers, so this module may not import it.
COMPILE = None


@functools.lru_cache(maxsize=None)
def _kernel(along_k: int, device: Device):
    if COMPILE is None:
        raise RuntimeError("packing needs helpers.runtime.launch imported (it hands over the compiler)")
    # read once per process: a pack runs once per product, and its host time counts
    return COMPILE(inline_includes(settings.KERNEL_DIR / FILE), FILE, f"pack_kmajor<{along_k}>", device)


def pack(X, operand: str, dst, offset: int = 0) -> int:
    """Copy operand ``X`` ("A": op(A), M x K; "B": op(B), K x N, as views in any layout)
    k-major into ``dst`` (a float32 CuPy array) from element ``offset`` on (a multiple of 4):
    ``dst[offset + k * ld + r] = X(r, k)`` with r = m (A) or n (B). Returns ld, the packed
    row length: A then reads as a transposed view with lda = ld, B as a row-major one with
    ldb = ld."""
    R, K = X.shape if operand == "A" else X.shape[::-1]
    ld_dst = row_floats(R)
    if offset % 4 or offset + K * ld_dst > dst.size:
        raise ValueError(f"packing {operand} needs {K * ld_dst} floats at a multiple of 4; the buffer holds "
                         f"{dst.size} and the copy starts at {offset}")
    if max(R, K, ld_dst) >= INT32_LIMIT:
        raise ValueError(f"{operand} ({R} x {K}) does not fit the packing kernel's int arguments")
    along_k, ld = source_layout(X, operand)
    _kernel(along_k, hardware.current())(grid(R, K), BLOCK, (np.int32(R), np.int32(K), X, np.int32(ld),
                                                             np.uint64(dst.data.ptr + 4 * offset), np.int32(ld_dst)))
    return ld_dst


def packed_view(operand: str, dst, R: int, K: int, offset: int = 0):
    """The operand as the final kernel reads it after :func:`pack` (op(A) M x K, op(B) K x N)."""
    ld = row_floats(R)
    rows = dst[offset:offset + K * ld].reshape(K, ld)[:, :R]
    return rows.T if operand == "A" else rows
