"""CPU matrix multiply in Numba, from the textbook loop to a parallel tiled kernel.

Taught in the chapter "On the CPU". Every variant computes C = A @ B for
float32 row-major A (M, K) and B (K, N), for any sizes, and is checked against
NumPy. ``benchmark`` times them against NumPy's own float32 matmul (its BLAS).
"""
from __future__ import annotations

import os
import platform
import time

import numpy as np
from numba import njit, prange


@njit(cache=True)
def ijk(A, B, C):
    """Textbook order: the inner loop walks down a column of B (stride N)."""
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc


@njit(cache=True)
def ikj(A, B, C):
    """Loop reordering: the inner loop walks along rows of B and C (stride 1)."""
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    for i in range(M):
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]


@njit(cache=True)
def ikj_unroll4(A, B, C):
    """ikj with the k loop unrolled by 4: four rows of B stream through per pass."""
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    K4 = K - K % 4
    for i in range(M):
        for k in range(0, K4, 4):
            a0, a1, a2, a3 = A[i, k], A[i, k + 1], A[i, k + 2], A[i, k + 3]
            for j in range(N):
                C[i, j] += a0 * B[k, j] + a1 * B[k + 1, j] + a2 * B[k + 2, j] + a3 * B[k + 3, j]
        for k in range(K4, K):
            a = A[i, k]
            for j in range(N):
                C[i, j] += a * B[k, j]


@njit(cache=True, inline="always")
def _rows4(A, B, C, i, k0, k1, j0, j1):
    """C[i:i+4, j0:j1] += A[i:i+4, k0:k1] @ B[k0:k1, j0:j1], four rows at a time.

    Each B[k, j] is loaded once and feeds four multiply-adds (register reuse); the
    j loop is stride-1, so the compiler turns it into SIMD instructions.
    """
    for k in range(k0, k1):
        a0, a1, a2, a3 = A[i, k], A[i + 1, k], A[i + 2, k], A[i + 3, k]
        for j in range(j0, j1):
            b = B[k, j]
            C[i, j] += a0 * b
            C[i + 1, j] += a1 * b
            C[i + 2, j] += a2 * b
            C[i + 3, j] += a3 * b


@njit(cache=True, inline="always")
def _row1(A, B, C, i, k0, k1, j0, j1):
    for k in range(k0, k1):
        a = A[i, k]
        for j in range(j0, j1):
            C[i, j] += a * B[k, j]


@njit(cache=True)
def register_4x4(A, B, C):
    """Register blocking: four rows of C per pass, so each loaded B value is used 4 times."""
    M, K = A.shape
    N = B.shape[1]
    C[:, :] = 0
    M4 = M - M % 4
    for i in range(0, M4, 4):
        _rows4(A, B, C, i, 0, K, 0, N)
    for i in range(M4, M):
        _row1(A, B, C, i, 0, K, 0, N)


@njit(cache=True, inline="always")
def _row_block(A, B, C, i, k0, k1):
    """Row i of C += A[i, k0:k1] @ B[k0:k1, :], four k at a time, on contiguous row views."""
    c = C[i]
    k = k0
    while k + 4 <= k1:
        a0, a1, a2, a3 = A[i, k], A[i, k + 1], A[i, k + 2], A[i, k + 3]
        b0, b1, b2, b3 = B[k], B[k + 1], B[k + 2], B[k + 3]
        for j in range(c.shape[0]):
            c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]
        k += 4
    while k < k1:
        a = A[i, k]
        b = B[k]
        for j in range(c.shape[0]):
            c[j] += a * b[j]
        k += 1


TK = 128  # rows of B per block: 128 x N floats stay in L2 while every row of A uses them


@njit(cache=True)
def tiled(A, B, C):
    """Cache tiling over k: a block of TK rows of B is reused by all rows of A before moving on."""
    M, K = A.shape
    C[:, :] = 0
    for k0 in range(0, K, TK):
        for i in range(M):
            _row_block(A, B, C, i, k0, min(K, k0 + TK))


@njit(cache=True, parallel=True)
def tiled_parallel(A, B, C):
    """The tiled kernel with the rows of C spread over the cores (prange)."""
    M, K = A.shape
    C[:, :] = 0
    for k0 in range(0, K, TK):
        for i in prange(M):
            _row_block(A, B, C, i, k0, min(K, k0 + TK))


VARIANTS = {
    "ijk": ijk,
    "ikj (reordered)": ikj,
    "ikj, unrolled x4": ikj_unroll4,
    "4x4 register block": register_4x4,
    "tiled over k": tiled,
    "tiled, parallel": tiled_parallel,
}


def numpy_matmul(A, B, C):
    np.matmul(A, B, out=C)


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_label() -> str:
    return f"measured on this machine: {cpu_name()}, {os.cpu_count()} cores"


def random(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)


def check(fn, M: int = 37, N: int = 67, K: int = 45) -> float:
    """Relative error of a variant against NumPy (float64 reference) on odd sizes."""
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, dtype=np.float32)
    fn(A, B, C)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    return float(np.linalg.norm(C - ref) / np.linalg.norm(ref))


def time_variant(fn, n: int, repeats: int = 3, budget_s: float = 2.0) -> float:
    """Median seconds of C = A @ B at n x n x n (after one untimed call: JIT, caches)."""
    A, B = random(n)
    C = np.empty((n, n), dtype=np.float32)
    fn(A, B, C)
    times = []
    t_start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(A, B, C)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > budget_s:
            break
    return float(np.median(times))


def benchmark(sizes: dict, progress=print) -> list[dict]:
    """Time each variant (and NumPy) at its sizes; rows of name, n, seconds, GFLOP/s."""
    rows = []
    for name, ns in sizes.items():
        fn = numpy_matmul if name == "NumPy (BLAS)" else VARIANTS[name]
        for n in ns:
            s = time_variant(fn, n)
            rows.append({"name": name, "n": n, "s": s, "gflops": 2 * n**3 / s / 1e9})
            if progress:
                progress(f"{name:20s} n={n:5d}: {rows[-1]['gflops']:7.2f} GFLOP/s")
    return rows


def figure(rows: list[dict]):
    """GFLOP/s against n, one line per variant (click the legend to hide some)."""
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, label_source

    fig = go.Figure()
    names = list(dict.fromkeys(r["name"] for r in rows))
    for i, name in enumerate(names):
        sel = [r for r in rows if r["name"] == name]
        fig.add_trace(go.Scatter(x=[r["n"] for r in sel], y=[r["gflops"] for r in sel], name=name,
                                 mode="lines+markers", line=dict(color=PALETTE[i % len(PALETTE)],
                                                                 dash="dash" if "NumPy" in name else None)))
    fig.update_xaxes(type="log", title="n (M = N = K)", tickvals=sorted({r["n"] for r in rows}))
    fig.update_yaxes(type="log", title="GFLOP/s")
    fig.update_layout(template=TEMPLATE, height=460, title="CPU matrix multiply, float32",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return label_source(fig, machine_label())
