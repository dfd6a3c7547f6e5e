"""The final kernel as a library call: ``C = alpha * op(A) @ op(B) + beta * C``.

:func:`sgemm` takes any 2-D float32 CuPy views: row-major matrices with a row stride
(``X[:, :n]`` of a wider array) and transposed ones (``X.T``, i.e. column-major), and
hands them to the kernel as they lie in memory: the layout of A and B becomes two template
flags (``A_T``, ``B_T``) and the strides leading dimensions. The one copy it may make is
packing (:mod:`helpers.runtime.pack`): where the model says it pays, an operand whose
copies into shared memory would be 4 bytes wide is first rewritten k-major with aligned rows. A
column-major C is computed as ``C^T = op(B)^T op(A)^T`` (the operands swapped, still no
copy). Everything else (a negative stride, two non-unit strides, float64, mismatched
shapes, ``beta != 0`` without a C) is refused with an error that names the fix. With
``beta = 0`` C is never read, so it may hold anything, NaN included.

The config comes from :func:`~helpers.runtime.specs.final.choose_config` for the shape,
the layouts and the device.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .. import hardware
from ..hardware import Device
from ..shapes import SUITE
from .launch import prepare
from .layout import layout
from .specs import final
from .specs.final import choose_config
import cupy


@dataclass(frozen=True)
class Call:
    """What the kernel is handed for one ``sgemm``: operands in the kernel's order (A and B
    swapped, and all three transposed, where C is column-major), shape and layouts."""

    A: object
    B: object
    C: object
    M: int
    N: int
    K: int
    a_t: int
    b_t: int
    swapped: bool


def _scalar(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    if not math.isfinite(float(v)):
        raise ValueError(f"{name} must be finite, got {v}")
    return float(v)


def plan_call(A, B, C, alpha: float = 1.0, beta: float = 0.0) -> Call:
    """Check the operands and work out what the kernel gets (no GPU needed: only shapes,
    strides and dtypes are read, so NumPy arrays and stand-ins work too)."""
    _scalar("alpha", alpha)
    beta = _scalar("beta", beta)
    la, lb = layout(A, "A"), layout(B, "B")
    (M, K), (K2, N) = A.shape, B.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}; "
                         f"A's columns ({K}) must equal B's rows ({K2}); transpose one of them (X.T) if that "
                         "was meant")
    if C is None:
        if beta != 0:
            raise ValueError(f"beta={beta} adds beta * C, but no C was given: pass C (an {M} x {N} float32 "
                             "matrix), or beta=0")
        return Call(A, B, None, M, N, K, int(la.transposed), int(lb.transposed), False)
    lc = layout(C, "C")
    if tuple(C.shape) != (M, N):
        raise ValueError(f"C has shape {tuple(C.shape)}, but A @ B is {M} x {N}; pass a C of shape ({M}, {N})")
    if not lc.transposed:
        return Call(A, B, C, M, N, K, int(la.transposed), int(lb.transposed), False)
    # C column-major: C^T (N x M) is row-major; C^T = op(B)^T op(A)^T
    return Call(B.T, A.T, C.T, N, M, K, int(not lb.transposed), int(not la.transposed), True)


def _cupy_operand(name: str, X) -> None:

    if not isinstance(X, cupy.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(X).__name__} "
                        "(cupy.asarray copies a NumPy array over)")
    if X.device.id != cupy.cuda.Device().id:
        raise ValueError(f"{name} lives on GPU {X.device.id}, the kernel runs on GPU {cupy.cuda.Device().id}; "
                         f"use cupy.cuda.Device({X.device.id}) or copy it over")


@dataclass(frozen=True)
class _Operand:
    """What :func:`plan_call` reads of a matrix: its shape, strides and dtype (and ``.T``)."""

    shape: tuple
    strides: tuple
    dtype: object

    @property
    def T(self):
        return _Operand(self.shape[::-1], self.strides[::-1], self.dtype)


def _operand(X):
    return None if X is None else _Operand(tuple(X.shape), tuple(X.strides), X.dtype)


@functools.lru_cache(maxsize=256)
def _prepared(a: _Operand, b: _Operand, c: _Operand | None, params: tuple | None, device: Device):
    """(the call, with stand-ins for the operands; a launcher) for one combination of shapes,
    strides and dtypes: everything ``sgemm`` works out that does not depend on the data."""
    call = plan_call(a, b, c)
    p = dict(params or choose_config(call.M, call.N, call.K, device, call.a_t, call.b_t))
    # the kernel reads an operand as it lies, or its packed copy (A transposed, B row-major)
    p.update(A_T=1 if p.get("PACK_A") else call.a_t, B_T=0 if p.get("PACK_B") else call.b_t)
    return call, prepare(final.SPEC, call.M, call.N, call.K, p, device)


def sgemm(A, B, C=None, alpha: float = 1.0, beta: float = 0.0, params: dict | None = None):
    """``C = alpha * op(A) @ op(B) + beta * C`` with the final kernel; returns C.

    ``A`` (M x K) and ``B`` (K x N) may be row-major views with any row stride or
    transposed views (``X.T``); ``C`` (M x N) row-major or column-major, or None for a
    new one (then ``beta`` must be 0). ``params`` overrides the chosen config (its layout
    flags are set from the operands, or to the packed layout where it packs one).
    The checks and the choice are worked out once per shapes, strides and dtypes, and
    remembered: a call's host time counts against small products.
    """

    alpha, beta = _scalar("alpha", alpha), _scalar("beta", beta)
    if C is None and beta != 0:
        plan_call(A, B, C, alpha, beta)                 # raises: beta * C without a C
    for name, X in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        _cupy_operand(name, X)
    key = tuple(sorted(params.items())) if params else None
    call, launcher = _prepared(_operand(A), _operand(B), _operand(C), key, hardware.current())
    out = C if C is not None else cupy.empty((call.M, call.N), dtype=cupy.float32)
    a, b, c = (B.T, A.T, out.T) if call.swapped else (A, B, out)
    launcher.launch(final.arguments(launcher.params, call.M, call.N, call.K, a, b, c,
                                    launcher.workspace(), alpha=alpha, beta=beta))
    return out


def chosen(A, B, C=None) -> dict:
    """The template parameters ``sgemm(A, B, C)`` launches with (as the kernel reads the
    operands: swapped where C is column-major, the packed layout where it packs one)."""
    return dict(_prepared(_operand(A), _operand(B), _operand(C), None, hardware.current())[1].params)


def matmul(A, B, params: dict | None = None):
    """C = A @ B with the final kernel and the config :func:`choose_config` picks for the
    shape (or ``params``); C starts as NaN, so an element the kernel never writes shows."""

    M, N = A.shape[0], B.shape[1]
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    return sgemm(A, B, C, params=params)


def chapter_sweep(device: Device) -> list:
    """What the final chapter records: the default at three sizes, the choice at 4096,
    8192 and every suite shape, and one knob at a time around the 4096/8192 choices."""
    spec = final.SPEC
    c4, c8 = choose_config(4096, 4096, 4096, device), choose_config(8192, 8192, 8192, device)
    items = ([(spec.defaults(), (n, n, n)) for n in (1024, 2048, 4096)]
             + [(c4, (4096,) * 3), (c8, (8192,) * 3)]
             + [(choose_config(*s, device), s) for s in SUITE]
             + [(dict(c4, STAGES=st), (4096,) * 3) for st in (2, 3, 4) if st != c4["STAGES"]]
             + [(dict(c8, GROUP=0), (8192,) * 3)])
    out = []
    for params, shape in items:
        if (params, shape) not in out and spec.is_valid(params, device):
            out.append((params, shape))
    return [(spec, p, s) for p, s in out]
