"""Check a kernel against cuBLAS (``cupy.matmul``, TF32 off) on fresh random data.

The output starts as NaN, so an element the kernel never wrote fails the check.
The error is ``||C - C_ref|| / ||C_ref||`` (Frobenius norms). Two float32
results that sum K products in different orders differ by about
``sqrt(K) * 2**-24`` relative, so the tolerance grows with ``sqrt(K)``; TF32
(10-bit mantissa) lands near 5e-4 and fails it for any K up to ~10^5.

Taught in the chapter "The naive kernel" (book/03_naive.md).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23


def tolerance(K: int) -> float:
    return 8 * FLOAT32_EPS * math.sqrt(K)


def require_fp32_cublas():
    """Refuse to compare against cuBLAS if CuPy was told to use TF32."""
    if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        raise RuntimeError("CUPY_TF32 is set: cupy.matmul would use TF32 tensor cores, "
                           "which is not a float32 baseline. Unset it and restart Python.")


def random_matrix(rows: int, cols: int, rng=None):
    """Uniform random float32 in [-1, 1] on the GPU (never zeros)."""
    import cupy

    rng = rng or cupy.random.default_rng()
    return rng.uniform(-1.0, 1.0, size=(rows, cols), dtype=cupy.float32)


@dataclass
class CheckResult:
    kernel: str
    params: dict
    M: int
    N: int
    K: int
    rel_err: float
    tol: float
    unwritten: int  # NaN elements in C where cuBLAS has a number
    ok: bool

    def __str__(self):
        verdict = "PASS" if self.ok else "FAIL"
        extra = f", {self.unwritten} elements never written" if self.unwritten else ""
        return (f"{verdict}: {self.kernel} {self.params} on {self.M}x{self.N}x{self.K}: "
                f"relative error {self.rel_err:.2e} (tolerance {self.tol:.1e}){extra}")

    def as_dict(self):
        return asdict(self)


def compare(C, C_ref, K: int) -> tuple[float, int, bool]:
    """(relative error, unwritten count, ok) of C against the reference."""
    import cupy

    bad = ~cupy.isfinite(C) & cupy.isfinite(C_ref)
    unwritten = int(bad.sum())
    diff = cupy.where(cupy.isfinite(C), C - C_ref, cupy.float32(np.inf))
    ref_norm = float(cupy.linalg.norm(C_ref))
    err = float(cupy.linalg.norm(diff)) / ref_norm if ref_norm > 0 else float(cupy.linalg.norm(diff))
    if not math.isfinite(err):
        err = math.inf
    ok = unwritten == 0 and err <= tolerance(K)
    return err, unwritten, ok


def check(name, M: int, N: int, K: int, params: dict | None = None, seed: int | None = None, **kw) -> CheckResult:
    """Run one kernel config on fresh random A (M x K), B (K x N); compare with cuBLAS."""
    import cupy

    from .launch import matmul
    from .registry import get

    require_fp32_cublas()
    spec = get(name) if isinstance(name, str) else name
    full = spec.resolve(params, **kw)
    rng = cupy.random.default_rng(seed)
    A, B = random_matrix(M, K, rng), random_matrix(K, N, rng)
    C = matmul(spec, A, B, full)
    C_ref = cupy.matmul(A, B)
    err, unwritten, ok = compare(C, C_ref, K)
    return CheckResult(spec.name, full, M, N, K, err, tolerance(K), unwritten, ok)
