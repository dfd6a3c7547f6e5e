"""Check a kernel against cuBLAS (``cupy.matmul``, TF32 off) on fresh random data.

C starts as NaN, so an element the kernel never writes fails. Two bounds must hold:

* the whole matrix: ``||C - C_ref|| / ||C_ref|| <= 8 eps sqrt(K)`` (Frobenius norms). Two
  float32 results that add K products in different orders differ by about
  ``sqrt(K) eps`` relative; TF32 (a 10-bit mantissa) lands far above;
* every element: ``|C - C_ref|[i, j] <= 8 eps sqrt(K) ||A[i, :]|| ||B[:, j]||``. The
  rounding error of one dot product scales with its length and the sizes of the two
  vectors, so a handful of wrong elements in a large C, which a norm of the whole
  matrix would average away, fail here.

:func:`compare` takes NumPy or CuPy arrays alike.

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

import math
import os
import secrets
from dataclasses import asdict, dataclass

import cupy
import numpy as np

from .launch import matmul, operand_shapes
from .spec import KernelSpec
from .specs import get

EPS = float(np.finfo(np.float32).eps)     # 2**-23
BOUND = 8                                  # the bounds' safety factor over the typical error


def tolerance(K: int) -> float:
    """The largest relative (Frobenius) error a correct float32 result may have."""
    return BOUND * EPS * math.sqrt(K)


def require_fp32_cublas() -> None:
    """Refuse to compare with cuBLAS if CuPy was told to use TF32."""
    if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        raise RuntimeError("CUPY_TF32 is set: cupy.matmul would use TF32 tensor cores, which is not a "
                           "float32 baseline. Unset it and restart Python.")


def random_matrix(rows: int, cols: int, rng=None):
    """Uniform random float32 in [-1, 1] on the GPU (never zeros)."""
    rng = rng or cupy.random.default_rng()
    return rng.uniform(-1.0, 1.0, size=(rows, cols), dtype=cupy.float32)


@dataclass
class Comparison:
    rel_err: float         # Frobenius, relative to the reference; inf when C has NaN where C_ref has none
    worst_element: float   # largest |C - C_ref| over its per-element bound (<= 1 passes)
    wrong: int             # elements over their bound
    unwritten: int         # NaN in C where the reference has a number
    ok: bool


def compare(C, C_ref, A, B) -> Comparison:
    """C against the reference C_ref = A @ B, with both bounds (NumPy or CuPy arrays)."""
    xp = cupy.get_array_module(C)
    K = A.shape[1]
    finite = xp.isfinite(C)
    unwritten = int((~finite & xp.isfinite(C_ref)).sum())
    # float32 throughout: the differences are exact, and an M x N float64 temporary
    # would not fit a small GPU at the sizes the book times
    diff = xp.abs(xp.where(finite, C - C_ref, xp.float32(xp.inf)))
    ref_norm = float(xp.linalg.norm(C_ref))
    rel = float(xp.linalg.norm(xp.where(finite, diff, 0))) / ref_norm if ref_norm > 0 else 0.0
    if unwritten or not math.isfinite(rel):
        rel = math.inf
    bound = xp.outer(xp.linalg.norm(A, axis=1), xp.linalg.norm(B, axis=0)) * xp.float32(tolerance(K))
    ratio = diff / (bound + xp.float32(1e-30))
    worst = float(ratio.max()) if ratio.size else 0.0
    wrong = int((ratio > 1).sum())
    ok = unwritten == 0 and wrong == 0 and rel <= tolerance(K)
    return Comparison(rel, worst, wrong, unwritten, ok)


@dataclass
class CheckResult:
    kernel: str
    params: dict
    M: int
    N: int
    K: int
    seed: int
    rel_err: float
    tol: float
    worst_element: float
    wrong: int
    unwritten: int
    ok: bool

    def __str__(self):
        verdict = "PASS" if self.ok else "FAIL"
        extra = ""
        if self.wrong:
            extra += f", {self.wrong} elements over their bound"
        if self.unwritten:
            extra += f", {self.unwritten} elements never written"
        return (f"{verdict}: {self.kernel} {self.params} on {self.M}x{self.N}x{self.K} (seed {self.seed}): "
                f"relative error {self.rel_err:.2e} (tolerance {self.tol:.1e}){extra}")

    def as_dict(self):
        return asdict(self)


def check(name: str | KernelSpec, M: int, N: int, K: int, params: dict | None = None,
          seed: int | None = None, **kw) -> CheckResult:
    """Run one config on fresh random A (M x K), B (K x N); compare with cuBLAS.

    ``seed`` reproduces a run; without one a fresh seed is drawn and reported."""
    require_fp32_cublas()
    spec = get(name)
    full = spec.resolve(params, **kw)
    seed = secrets.randbits(31) if seed is None else seed
    rng = cupy.random.default_rng(seed)
    A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
    operand_shapes(A, B)
    C = matmul(spec, A, B, full)
    c = compare(C, cupy.matmul(A, B), A, B)
    return CheckResult(spec.name, full, M, N, K, seed, c.rel_err, tolerance(K), c.worst_element, c.wrong,
                       c.unwritten, c.ok)
