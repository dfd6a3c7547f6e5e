"""How a 2-D float32 view lies in memory: row-major with a row stride, or transposed.

A kernel that reads strided operands needs, per matrix, one flag and one number:

* row-major (``transposed = False``): element (i, j) at ``X[i * ld + j]``, ``ld >= cols``;
  a C-contiguous array, or a slice of its rows and columns (``X[:, :n]``);
* transposed (``transposed = True``): element (i, j) at ``X[j * ld + i]``, ``ld >= rows``;
  the transpose of such an array (``X.T``), i.e. a column-major matrix.

Anything else (a negative stride, two non-unit strides, overlapping rows) is refused
with the fix: a contiguous copy. Only ``shape``, ``strides`` and ``dtype`` are read,
so NumPy arrays and stand-ins work as well as CuPy ones.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import hardware

ITEM = 4        # bytes of a float32


@dataclass(frozen=True)
class Layout:
    transposed: bool     # column-major: consecutive elements of a column are adjacent
    ld: int              # elements between consecutive rows (row-major) or columns (transposed)


def _check(X, name: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(shape, strides in elements) of a valid 2-D float32 matrix, or the error naming the fix."""
    shape, strides = tuple(getattr(X, "shape", ())), tuple(getattr(X, "strides", ()))
    if len(shape) != 2 or len(strides) != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {shape}")
    if np.dtype(X.dtype) != np.float32:
        raise TypeError(f"{name} must be float32, got {np.dtype(X.dtype)} (use {name}.astype(cupy.float32))")
    if 0 in shape:
        raise ValueError(f"{name} is empty (shape {shape}); every dimension must be >= 1")
    rows, cols = shape
    if (strides[0] < 0 and rows > 1) or (strides[1] < 0 and cols > 1):
        raise ValueError(f"{name} has a negative stride {strides} (a reversed view); the kernel reads "
                         f"forwards: pass cupy.ascontiguousarray({name}) instead")
    if any(s % ITEM for s in strides):
        raise ValueError(f"{name} has strides {strides} that are not whole float32 elements: "
                         f"pass cupy.ascontiguousarray({name}) instead")
    return shape, (strides[0] // ITEM, strides[1] // ITEM)


def _ld(shape, steps, transposed: bool) -> int | None:
    """The leading dimension that reads a matrix in the given orientation, None where none does."""
    (rows, cols), (e0, e1) = shape, steps
    if transposed:                          # X.T must be row-major
        rows, cols, e0, e1 = cols, rows, e1, e0
    if cols > 1 and e1 != 1:
        return None
    if rows == 1:
        return cols                         # one row: the stride between rows is never used
    return e0 if e0 >= cols else None


def leading_dimension(X, name: str, transposed: bool) -> int:
    """``ld`` for reading ``X`` row-major (``transposed=False``) or as a transposed view, or
    ValueError when its strides do not allow it."""
    shape, steps = _check(X, name)
    ld = _ld(shape, steps, transposed)
    if ld is None:
        want = "a transposed view (X.T of a row-major X)" if transposed else "row-major"
        raise ValueError(f"{name} with shape {shape} and strides {tuple(X.strides)} cannot be read as {want}; "
                         f"let helpers.sgemm pick the layout, or pass cupy.ascontiguousarray({name})")
    if ld >= hardware.INT32_LIMIT:
        raise ValueError(f"{name}'s leading dimension {ld:,} does not fit the kernel's int argument")
    return ld


def layout(X, name: str = "X") -> Layout:
    """The layout of a 2-D float32 matrix ``X`` (row-major where both would do), or a
    ValueError/TypeError naming the fix."""
    shape, steps = _check(X, name)
    for transposed in (False, True):
        if _ld(shape, steps, transposed) is not None:
            return Layout(transposed, leading_dimension(X, name, transposed))
    copy = f"pass cupy.ascontiguousarray({name}) instead"
    if 1 in steps or 0 in steps:
        raise ValueError(f"{name} has strides {tuple(X.strides)} for shape {shape}: its rows or columns "
                         f"overlap; {copy}")
    raise ValueError(f"{name} has strides {tuple(X.strides)}: neither its rows nor its columns are contiguous "
                     f"(two non-unit strides, as in X[::2, ::2]); {copy}")
