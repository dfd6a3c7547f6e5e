"""TF32 and the 3xTF32 split, in NumPy: what the tensor cores of chapters 14 and 15 multiply.

* :func:`to_tf32`: ``cvt.rna.tf32.f32`` bit for bit: round to nearest, ties away from zero,
  keeping 10 of float32's 23 mantissa bits (the low 13 bits of the result are zero).
  Infinities and NaN pass unchanged; a value that rounds past the largest float becomes
  infinite, as on the GPU.
* :func:`split`: ``x = big + small`` with ``big = tf32(x)`` and ``small = tf32(x - big)``.
  ``x - big`` is exact in float32 (big agrees with x in every bit it keeps), and
  ``|x - big| <= 2^-11 |x|``; rounding that to TF32 in turn loses at most 2^-11 of it, so
  ``|x - big - small| <= 2^-22 |x|`` (:data:`SPLIT_BOUND`), below float32's own rounding
  (2^-24 relative) by a factor 4 at most.
* :func:`product_terms`: the four products of a split pair and the size of each.

Taught in the chapters "Tensor cores and TF32" (book/14_tensor_cores.md) and "Float32
accuracy at tensor-core speed" (book/15_3xtf32.md).
"""
from __future__ import annotations

import math
import sys

import numpy as np

MANTISSA_BITS = 10                 # kept of float32's 23
DROPPED_BITS = 23 - MANTISSA_BITS  # 13
UNIT = 2.0 ** -(MANTISSA_BITS + 1)  # TF32's unit roundoff: 2^-11
FLOAT32_UNIT = 2.0 ** -24           # float32's
SPLIT_BOUND = UNIT * UNIT          # |x - big - small| <= 2^-22 |x|


def _module(x):
    """NumPy, or CuPy for a CuPy array (already imported by whoever made it)."""
    return sys.modules["cupy"] if hasattr(x, "__cuda_array_interface__") else np


def to_tf32(x) -> np.ndarray:
    """float32 -> TF32 (as float32 values), rounded as ``cvt.rna.tf32.f32`` rounds. NumPy or
    CuPy arrays alike (a CuPy array stays on the GPU)."""
    xp = _module(x)
    x = xp.asarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    special = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    half = np.uint32(1 << (DROPPED_BITS - 1))
    keep = np.uint32((0xFFFFFFFF << DROPPED_BITS) & 0xFFFFFFFF)
    # the sign is its own bit: adding half an ulp to the magnitude's bits rounds ties away from zero
    r = xp.where(special, u, (u + half) & keep).astype(np.uint32)
    return r.view(np.float32)


def split(x) -> tuple[np.ndarray, np.ndarray]:
    """(big, small), both TF32, with ``x ~ big + small`` to within :data:`SPLIT_BOUND` |x|."""
    xp = _module(x)
    x = xp.asarray(x, dtype=np.float32)
    big = to_tf32(x)
    return big, to_tf32(x - big)


split_parts = split                  # the name mma_chain uses (its flag is called three)


def product_terms(a: float, b: float) -> dict:
    """The four products of split a and b, exactly (float64 holds a TF32 product exactly),
    and what 3xTF32 keeps of a * b: the sum of all but small * small."""
    (ab, as_), (bb, bs) = split(np.float32(a)), split(np.float32(b))
    ab, as_, bb, bs = (float(v) for v in (ab, as_, bb, bs))
    terms = {"big * big": ab * bb, "big * small": ab * bs, "small * big": as_ * bb, "small * small": as_ * bs}
    return {**terms, "kept": ab * bb + ab * bs + as_ * bb, "exact": float(np.float32(a)) * float(np.float32(b))}


def bound(K: int) -> float:
    """Per-element bound of a TF32 product against the float32 one, over ||A[i, :]|| ||B[:, j]||.

    Rounding each operand to TF32 moves it by at most :data:`UNIT` of itself, so a product
    a*b by at most 2u |a b| (to first order) and a dot product of length K by at most
    2u sum |a_k b_k| <= 2u ||a|| ||b|| (Cauchy-Schwarz); the float32 accumulation adds the
    book's float32 bound, 8 eps sqrt(K) (helpers/runtime/check.py)."""
    return 2 * UNIT + 8 * 2.0 ** -23 * math.sqrt(K)


# ------------------------------------------------------------------ the accumulator of mma.sync
def to_float32_toward_zero(s):
    """float64 -> the float32 next to it on the side of zero (round toward zero), as float64."""
    r = s.astype(np.float32).astype(np.float64)
    over = np.abs(r) > np.abs(s)
    r[over] = np.nextafter(r[over].astype(np.float32), np.float32(0)).astype(np.float64)
    return r


EXTRA_BITS = 4            # bits kept below float32's last one when the terms are aligned (fitted; see mma_add)


def mma_add(c, products, truncate: bool = True, extra_bits: int = EXTRA_BITS):
    """One mma's accumulation for each element: c (n,) float32 values plus products (n, 8),
    exact products of TF32 operands, as float64.

    ``truncate=False``: the exact sum, rounded to float32 once, to nearest (what an FFMA
    does). ``truncate=True``: a model of the tensor cores' adder after Fasi, Higham, Mikaitis
    and Pranesh, "Numerical behavior of NVIDIA tensor cores" (PeerJ Computer Science, 2021):
    the products are exact, every term is aligned to the largest one and its bits below
    ``extra_bits`` past float32's last one are cut off (toward minus infinity, as a
    two's-complement shift does), and the sum is cut toward zero to float32. No rounding to
    nearest anywhere, so the cuts do not cancel: they drift. The number of kept bits is not
    documented; 4 reproduces the size of the drift 3xTF32 shows on an H200."""
    terms = np.concatenate([c[:, None], products], axis=1)
    if not truncate:
        return terms.sum(axis=1).astype(np.float32).astype(np.float64)
    big = np.abs(terms).max(axis=1, keepdims=True)
    e = np.floor(np.log2(np.where(big > 0, big, 1.0)))
    q = 2.0 ** (e - 23 - extra_bits)                      # the last bit kept at the largest term
    return to_float32_toward_zero(np.floor(terms / q).sum(axis=1) * q[:, 0])


def mma_chain(A, B, three: bool, promote: int = 0, bk: int = 16, truncate: bool = True):
    """C = A @ B as kernels/14_tf32.cu computes it, element by element in NumPy: k-steps of 8,
    each one mma (TF32) or three (3xTF32: small x big, big x small, then big x big) into a
    float32 accumulator whose additions follow :func:`mma_add`. ``promote`` > 0: the mma of
    ``promote`` k-tiles of ``bk`` go into an accumulator started at zero, which is then added
    to the result with an ordinary float32 addition (round to nearest)."""
    A, B = np.asarray(A, np.float32), np.asarray(B, np.float32)
    M, K = A.shape
    N = B.shape[1]
    (ab, as_), (bb, bs) = split_parts(A), split_parts(B)
    pairs = [(as_, bb), (ab, bs), (ab, bb)] if three else [(ab, bb)]
    Kp = -(-K // 8) * 8
    pad = lambda X, axis: np.pad(X.astype(np.float64), [(0, Kp - K) if a == axis else (0, 0) for a in (0, 1)])  # noqa: E731
    pairs = [(pad(a, 1), pad(b, 0)) for a, b in pairs]
    total = np.zeros(M * N)
    acc = np.zeros(M * N)
    every = promote * bk
    for k0 in range(0, Kp, 8):
        for a, b in pairs:
            prods = (a[:, None, k0:k0 + 8] * b.T[None, :, k0:k0 + 8]).reshape(M * N, 8)
            acc = mma_add(acc, prods, truncate)
        if every and ((k0 + 8) % every == 0 or k0 + 8 >= Kp):
            total = (total + acc).astype(np.float32).astype(np.float64)
            acc = np.zeros(M * N)
    return (total + acc if every else acc).reshape(M, N).astype(np.float32)
