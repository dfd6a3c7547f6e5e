"""kernels/14_tf32.cu on the CPU (helpers/runtime/cpu_cuda.py), with the two tensor-core
instructions of kernels/tensor_core.cuh replaced by emulations that follow the PTX ISA:

* ``to_tf32``: cvt.rna.tf32.f32, round to nearest with ties away from zero, 10 mantissa bits
  kept (the same rule as helpers.models.tf32.to_tf32, which the NumPy tests pin down);
* ``mma_tf32``: each lane leaves its fragments in a per-thread slot, the warp meets at
  ``__syncwarp()`` (a block barrier in the emulation), and each lane computes its four
  elements of D from the 32 lanes' slots through the fragment layout of "Matrix Fragments
  for mma.m16n8k8" (.tf32). An operand with any of its low 13 bits set aborts the run: the
  kernel must round every float it feeds the tensor cores.

So the kernel's index math, the fragment layout it assumes, its pipeline (copies that land
only at the wait, shared memory poisoned with NaN), the zero fill past K and the edge
checks are all exercised without a GPU; the result is compared with an exact product of the
rounded (TF32) or split (3xTF32) operands.
"""
from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers.models import tf32
from helpers.runtime import cpu_cuda

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

KERNELS = Path(__file__).resolve().parent.parent / "kernels"

EMULATION = r'''// tensor_core.cuh on the CPU: emulations of cvt.rna.tf32.f32 and mma.sync.m16n8k8 (tf32)
#pragma once
#include <cstring>
inline unsigned to_tf32(float x)
{
    unsigned u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;          // inf, NaN: unchanged
    return (u + 0x1000u) & 0xffffe000u;                      // magnitude: ties away from zero
}
inline float __uint_as_float(unsigned u)
{
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
inline float tf32_value(unsigned u)
{
    if (u & 0x1fffu) ::cpu_cuda::fatal("mma_tf32: an operand that is not TF32 (low bits %x)", u & 0x1fffu);
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
inline void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    static unsigned sa[1024][4], sb[1024][2];
    static float sc[1024][4];
    const int tid = threadIdx.x, lane = tid % 32, base = tid - lane;
    for (int r = 0; r < 4; ++r) { sa[tid][r] = a[r]; sc[tid][r] = d[r]; }
    for (int r = 0; r < 2; ++r) sb[tid][r] = b[r];
    __syncwarp();
    const int g = lane / 4, t = lane % 4;
    float out[4];
    for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r / 2), col = 2 * t + r % 2;
        double s = 0.0;
        for (int k = 0; k < 8; ++k) {
            const unsigned av = sa[base + (row % 8) * 4 + k % 4][(row / 8) + 2 * (k / 4)];
            const unsigned bv = sb[base + col * 4 + k % 4][k / 4];
            s += (double)tf32_value(av) * (double)tf32_value(bv);
        }
        const float c = sc[base + (row % 8) * 4 + col / 2][2 * (row / 8) + col % 2];
        out[r] = (float)(s + (double)c);
    }
    __syncwarp();
    for (int r = 0; r < 4; ++r) d[r] = out[r];
}
'''

# (BM, BN, BK, WM, WN, STAGES): a small tile of 4 warps, and the chapter's default shape.
CONFIGS = [(32, 32, 16, 16, 16, 2), (64, 32, 16, 32, 16, 3), (128, 128, 16, 64, 32, 4)]
SHAPES = [(1, 1, 1), (7, 13, 5), (33, 17, 29), (70, 36, 40)]


def expr(cfg, split):
    """TF32 without promotion; 3xTF32 promoted every k-tile (the specs' defaults), or every
    2 k-tiles for the configs of 3 stages, so that a promotion also falls on a last, odd k-tile."""
    promote = 0 if not split else (2 if cfg[5] == 3 else 1)
    return "sgemm_tf32<{}, {}, {}, {}, {}, {}, {}, {}>".format(*cfg, split, promote)


def smem_bytes(cfg):
    bm, bn, bk, _, _, stages = cfg
    return stages * (bm * (bk + 4) + bk * (bn + 8)) * 4


@functools.lru_cache(maxsize=None)
def binary(tmp_root: str):
    root = Path(tmp_root)
    shutil.copy(KERNELS / "14_tf32.cu", root / "14_tf32.cu")
    shutil.copy(KERNELS / "common.cuh", root / "common.cuh")
    (root / "tensor_core.cuh").write_text(EMULATION)
    exprs = [expr(c, s) for c in CONFIGS for s in (0, 1)]
    try:
        return cpu_cuda.build(root / "14_tf32.cu", exprs)
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return binary(str(tmp_path_factory.mktemp("tf32_cpu")))


def run(kernels, cfg, split, A, B, offset=0):
    M, K = A.shape
    N = B.shape[1]
    bm, bn, _, wm, wn, _ = cfg
    grid = (-(-N // bn), -(-M // bm))
    block = ((bm // wm) * (bn // wn) * 32,)
    C = np.full((M, N), np.nan, np.float32)
    out = kernels.run(expr(cfg, split), grid, block, smem_bytes(cfg),
                      [np.int32(M), np.int32(N), np.int32(K), A, B, C], offset_floats=offset)
    np.testing.assert_array_equal(out["arrays"][3], A)
    np.testing.assert_array_equal(out["arrays"][4], B)
    return out["arrays"][5]


def expected(A, B, split):
    """The exact product of what the tensor cores multiply, and the float32 accumulation bound."""
    if split:
        (ab, as_), (bb, bs) = tf32.split(A), tf32.split(B)
        ref = ab.astype(np.float64) @ bb + ab.astype(np.float64) @ bs + as_.astype(np.float64) @ bb
        scale = np.abs(A).astype(np.float64) @ np.abs(B)
    else:
        ra, rb = tf32.to_tf32(A).astype(np.float64), tf32.to_tf32(B).astype(np.float64)
        ref, scale = ra @ rb, np.abs(ra) @ np.abs(rb)
    K = A.shape[1]
    return ref, (3 * K + 8) * 2.0 ** -24 * scale + 1e-30


@pytest.mark.parametrize("split", [0, 1], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_computes_the_product_of_its_tf32_operands(kernels, cfg, split, shape):
    M, N, K = shape
    rng = np.random.default_rng(M * 1000 + N * 10 + K)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = run(kernels, cfg, split, A, B)
    ref, bound = expected(A, B, split)
    assert not np.isnan(C).any(), "elements never written (or read from poisoned shared memory)"
    bad = np.argwhere(np.abs(C - ref) > bound)
    assert bad.size == 0, f"{len(bad)} wrong, first at {tuple(bad[0])}: {C[tuple(bad[0])]} vs {ref[tuple(bad[0])]}"


@pytest.mark.parametrize("split", [0, 1], ids=["tf32", "3xtf32"])
def test_whole_tiles_take_the_unchecked_copies(kernels, split):
    cfg = CONFIGS[2]
    M, N, K = 256, 128, 48                       # 2 x 1 blocks, 3 k-tiles: the 16-byte fast path
    rng = np.random.default_rng(7)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = run(kernels, cfg, split, A, B)
    ref, bound = expected(A, B, split)
    assert (np.abs(C - ref) <= bound).all()


@pytest.mark.parametrize("split", [0, 1], ids=["tf32", "3xtf32"])
def test_operands_4_bytes_off_16_byte_boundaries_take_the_checked_copies(kernels, split):
    cfg = CONFIGS[1]
    M, N, K = 64, 64, 32
    rng = np.random.default_rng(8)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = run(kernels, cfg, split, A, B, offset=1)
    ref, bound = expected(A, B, split)
    assert (np.abs(C - ref) <= bound).all()


def test_3xtf32_is_float32_accurate_where_tf32_is_not(kernels):
    M, N, K = 33, 17, 64
    rng = np.random.default_rng(9)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    err = [np.abs(run(kernels, CONFIGS[0], s, A, B) - exact).max() / np.abs(exact).max() for s in (0, 1)]
    assert err[0] > 1e-4 > 1e-5 > err[1], err


# ------------------------------------------------------------------ the accumulator's drift, in NumPy
def test_a_truncating_mma_accumulator_drifts_and_promotion_stops_it():
    """helpers.models.tf32.mma_chain with the cutting adder of mma_add: one long chain of mma
    (3xTF32, K = 4096) lands tens of times above float32's error and grows with K; plain TF32
    does not notice (its input rounding dominates); promoted every k-tile, 3xTF32 is back at
    float32's level."""
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (64, 4096)).astype(np.float32)
    B = rng.uniform(-1, 1, (4096, 4)).astype(np.float32)

    def err(K, **kw):
        exact = A[:, :K].astype(np.float64) @ B[:K].astype(np.float64)
        return np.abs(tf32.mma_chain(A[:, :K], B[:K], **kw) - exact).max() / np.abs(exact).max()

    chain, chain_1k = err(4096, three=True), err(1024, three=True)
    rounded = err(4096, three=True, truncate=False)
    promoted = err(4096, three=True, promote=1)
    plain = err(4096, three=False)
    assert 1e-5 < chain < 2e-4 and chain > 2.5 * chain_1k, (chain, chain_1k)    # grows about like K
    assert chain > 10 * rounded and chain > 10 * promoted, (chain, rounded, promoted)
    assert promoted < 2e-6 and rounded < 3e-6
    assert 1e-4 < plain < 1e-3 and abs(err(4096, three=False, truncate=False) - plain) < 0.1 * plain


def test_mma_add_cuts_where_rounding_would_not():
    c = np.array([1.0])
    p = np.zeros((1, 8))
    p[:, 0] = 0.75 * 2.0 ** -23                        # three quarters of float32's last bit at 1
    near = tf32.mma_add(c, p, truncate=False)
    cut = tf32.mma_add(c, p)
    assert near[0] == 1.0 + 2.0 ** -23 and cut[0] == 1.0     # rounding carries, cutting drops it
