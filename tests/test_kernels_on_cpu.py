"""Every kernel of kernels/ run on the CPU (helpers/runtime/cpu_cuda.py): g++, the threads
of a block one at a time to each barrier (and, for some configs, as free-running
std::threads), shared memory poisoned with NaN, cp.async copies that land only at
cp_async_wait, exact-size arrays under AddressSanitizer and UBSan.

Each config (the specs' defaults and test configs) runs on small odd shapes plus a shape
of whole tiles, with the matrices 16-byte aligned and 4 bytes off (as views into a
bigger array are), and is compared element by element with a float64 reference within
the rounding bound (K + 2) u (|A| |B|). C starts as NaN, so an element no thread wrote
is caught; a read or write outside A, B, C or shared memory aborts the run, and A and B
must come back unchanged. (A second write of the same value to an element of C cannot
be seen this way.)

Launch geometry comes from the kernel headers' formulas, written out here.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers.runtime import cpu_cuda

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
U = 2.0 ** -24  # unit roundoff of float32


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- configs
# Each entry: (file, expression, launch(M, N, K) -> (grid, block, dynamic shared bytes),
# a shape of 2 x 2 whole block tiles and two k-steps, for the kernels' no-edge paths).
def _naive(bx, by):
    return ("02_naive.cu", f"sgemm_naive<{bx}, {by}>",
            lambda M, N, K: ((cdiv(M, bx), cdiv(N, by)), (bx, by), 0), (2 * bx, 2 * by, 8))


def _coalescing(bx, by, swap):
    def launch(M, N, K):
        cols, rows = cdiv(N, bx), cdiv(M, by)
        return ((rows, cols) if swap else (cols, rows)), (bx, by), 0
    return "03_coalescing.cu", f"sgemm_coalescing<{bx}, {by}, {swap}>", launch, (2 * by, 2 * bx, 8)


def _smem(tile, swap):
    def launch(M, N, K):
        rows, cols = cdiv(M, tile), cdiv(N, tile)
        return ((rows, cols) if swap else (cols, rows)), (tile, tile), 0
    return "04_smem_tiling.cu", f"sgemm_smem_tiling<{tile}, {swap}>", launch, (2 * tile, 2 * tile, 2 * tile)


def _unguarded(tile):
    return ("04_smem_tiling.cu", f"sgemm_smem_tiling_unguarded<{tile}>",
            lambda M, N, K: ((cdiv(M, tile), cdiv(N, tile)), (tile, tile), 0), (2 * tile, 2 * tile, 2 * tile))


def _tiled(file, fn, bm, bn, rest, threads):
    args = ", ".join(str(x) for x in (bm, bn, *rest))
    return (file, f"{fn}<{args}>", lambda M, N, K: ((cdiv(N, bn), cdiv(M, bm)), (threads,), 0),
            (2 * bm, 2 * bn, 2 * rest[0]))


def _tt1d(bm, bn, bk, tm, loop):
    return _tiled("05_thread_tile_1d.cu", "sgemm_thread_tile_1d", bm, bn, (bk, tm, loop), bm * bn // tm)


def _tt2d(bm, bn, bk, tm, tn):
    return _tiled("06_thread_tile_2d.cu", "sgemm_thread_tile_2d", bm, bn, (bk, tm, tn), (bm // tm) * (bn // tn))


def _vec(bm, bn, bk, tm, tn):
    return _tiled("07_vectorized.cu", "sgemm_vectorized", bm, bn, (bk, tm, tn), (bm // tm) * (bn // tn))


def _bank(bk, split, pad, swz):
    return ("08_bank_conflicts.cu", f"sgemm_bank_conflicts<{bk}, {split}, {pad}, {swz}>",
            lambda M, N, K: ((cdiv(N, 128), cdiv(M, 128)), (256,), 0), (256, 256, 2 * bk))


def _db(bk, fixed, fast=0):
    return ("09_double_buffering.cu", f"sgemm_double_buffering<{bk}, {fixed}, {fast}>",
            lambda M, N, K: ((cdiv(N, 128), cdiv(M, 128)), (256,), 0), (256, 256, 2 * bk))


def _cp_async(bk, stages):
    return ("09_cp_async.cu", f"sgemm_cp_async<{bk}, {stages}>",
            lambda M, N, K: ((cdiv(N, 128), cdiv(M, 128)), (256,), stages * (128 * bk + bk * 128) * 4),
            (256, 256, 2 * bk))


def _warp(bm, bn, bk, wm, wn, tm, tn):
    threads = (bm // wm) * (bn // wn) * 32
    return ("10_warptiling.cu", f"sgemm_warptiling<{bm}, {bn}, {bk}, {wm}, {wn}, {tm}, {tn}>",
            lambda M, N, K: ((cdiv(N, bn), cdiv(M, bm)), (threads,), 2 * (bk * (bm + 4) + bk * bn) * 4),
            (2 * bm, 2 * bn, 2 * bk))


def _final(bm, bn, bk, wm, wn, tm, tn, stages, splitk, group, ku=0):
    """A and B row-major (A_T = B_T = 0), no stream-K: the layouts, alpha and beta and
    stream-K are tests/test_final_on_cpu.py's."""
    threads = (bm // wm) * (bn // wn) * 32
    expr = f"sgemm_final<{bm}, {bn}, {bk}, {wm}, {wn}, {tm}, {tn}, {stages}, {splitk}, {group}, {ku}, 0, 0, 0>"
    return ("12_final.cu", expr, lambda M, N, K: ((cdiv(N, bn), cdiv(M, bm), splitk), (threads,),
                                                 stages * (bk * (bm + 4) + bk * bn) * 4),
            (2 * bm, 2 * bn, 2 * bk * splitk))


def final_params(expr: str) -> dict:
    names = ("BM", "BN", "BK", "WM", "WN", "TM", "TN", "STAGES", "SPLITK", "GROUP", "KU", "STREAMK", "A_T", "B_T")
    return dict(zip(names, map(int, re.findall(r"\d+", expr))))


# Where the matrices are in a kernel's argument list: (A, B, C, split-K counters or None).
# The final kernel takes (M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partials, arrivals).
def positions(file: str) -> tuple:
    return (4, 6, 9, 12) if file == "12_final.cu" else (3, 4, 5, None)


# The defaults and TEST_CONFIGS of the kernel specs, plus split-K 2 and 3 with GROUP > 0.
LAYOUTS = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (1, 2, 0), (1, 4, 0), (1, 0, 1)]   # SPLIT, PAD, SWIZZLE
CONFIGS = (
    [_naive(32, 32)]
    + [_coalescing(*c) for c in [(64, 4, 1), (8, 8, 1), (32, 8, 0), (256, 1, 0)]]
    + [_smem(*c) for c in [(32, 1), (8, 1), (16, 0), (32, 0)]]
    + [_tt1d(*c) for c in [(64, 64, 32, 8, 1), (64, 64, 32, 8, 0), (64, 64, 8, 8, 1), (128, 32, 16, 4, 1),
                           (32, 16, 4, 16, 1)]]
    + [_tt2d(*c) for c in [(128, 128, 16, 8, 8), (64, 64, 16, 4, 4), (128, 64, 8, 8, 4), (64, 64, 8, 2, 2),
                           (128, 128, 32, 16, 8)]]
    + [_vec(*c) for c in [(128, 128, 16, 8, 8), (64, 64, 4, 4, 4), (128, 64, 16, 8, 4), (128, 128, 8, 8, 8),
                          (128, 128, 32, 16, 8)]]
    + [_bank(bk, *layout) for bk in (8, 16) for layout in LAYOUTS]
    + [_db(8, 1), _db(16, 1)]
    + [_cp_async(*c) for c in [(16, 3), (8, 2), (32, 4)]]
    + [_warp(*c) for c in [(128, 128, 8, 64, 64, 16, 8), (128, 128, 16, 64, 64, 16, 8), (256, 128, 8, 64, 64, 16, 8),
                           (128, 128, 8, 64, 32, 8, 8), (64, 64, 16, 32, 32, 4, 8), (32, 64, 16, 16, 32, 4, 4)]]
    + [_final(*c) for c in [(128, 256, 32, 64, 64, 16, 8, 2, 1, 8), (128, 128, 8, 64, 64, 16, 8, 4, 1, 8),
                            (128, 256, 16, 64, 64, 8, 16, 3, 1, 0), (64, 64, 16, 32, 32, 4, 8, 2, 1, 8),
                            (128, 128, 8, 64, 32, 8, 8, 4, 3, 8), (128, 128, 32, 64, 64, 16, 8, 2, 8, 8),
                            (64, 64, 16, 32, 32, 4, 8, 2, 2, 4), (128, 256, 32, 64, 64, 16, 8, 2, 1, 8, 4),
                            (128, 128, 16, 64, 64, 16, 8, 4, 2, 8, 4)]]
)
UNGUARDED = [_unguarded(32), _unguarded(8)]

# Odd shapes (M, N, K): a single element, less than a tile, several partial tiles, K a
# multiple of 4 with M and N odd (A aligned, B and C not), N a multiple of 4 (float4
# paths for B and C); each config adds its shape of whole tiles.
SHAPES = [(1, 1, 1), (7, 13, 5), (67, 45, 33), (130, 129, 17), (131, 67, 40), (130, 132, 36)]
TILE_SHAPES = [(32, 64, 96), (64, 32, 32)]


# --------------------------------------------------------------------------- running
def _expressions() -> dict:
    out: dict = {}
    for c in CONFIGS + UNGUARDED:
        out.setdefault(c[0], []).append(c[1])
    out["09_double_buffering.cu"].append("sgemm_double_buffering<8, 0, 0>")
    out["09_double_buffering.cu"].append("sgemm_double_buffering<8, 1, 1>")
    return out


@functools.lru_cache(maxsize=None)
def binaries() -> dict:
    """One binary per kernel file with every expression used here; all objects are
    compiled in one pool (one g++ per core) and cached on disk."""
    try:
        built = cpu_cuda.build_many({KERNELS / f: e for f, e in _expressions().items()})
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))
    return {path.name: b for path, b in built.items()}


def binary(file: str) -> cpu_cuda.Binary:
    return binaries()[file]


def operands(M, N, K, seed):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    return A, B


def launch_args(file, expr, M, N, K, A, B):
    """The kernel's argument list: C prefilled with NaN; the final kernel's leading dimensions,
    alpha = 1, beta = 0 and split-K workspace."""
    C = np.full((M, N), np.nan, np.float32)
    if file != "12_final.cu":
        return [np.int32(M), np.int32(N), np.int32(K), A, B, C]
    p = final_params(expr)
    tiles = cdiv(M, p["BM"]) * cdiv(N, p["BN"])
    ws = ([np.full(tiles * p["SPLITK"] * p["BM"] * p["BN"], np.nan, np.float32), np.zeros(tiles, np.uint32)]
          if p["SPLITK"] > 1 else [None, None])
    return [np.int32(M), np.int32(N), np.int32(K), np.float32(1.0), A, np.int32(K), B, np.int32(N), np.float32(0.0),
            C, np.int32(N)] + ws


def check(out, A, B, what, file=""):
    """C against the float64 reference, element by element: |C - AB| <= (K+2) u (|A||B|)_ij."""
    M, K = A.shape
    ia, ib, ic, icount = positions(file)
    C = out["arrays"][ic]
    ref = A.astype(np.float64) @ B.astype(np.float64)
    bound = (K + 2) * U * (np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)) + 1e-30
    unwritten = int(np.isnan(C).sum())
    bad = int((np.abs(C - ref) > bound).sum())
    assert unwritten == 0 and bad == 0, f"{what}: {unwritten} elements NaN (unwritten or poisoned), {bad} wrong"
    assert np.array_equal(out["arrays"][ia], A) and np.array_equal(out["arrays"][ib], B), f"{what}: A or B changed"
    assert out["leftover_cp_async"] == 0, f"{what}: cp.async copies still in flight at the end of a block"
    if icount is not None and out["arrays"][icount] is not None:
        assert not out["arrays"][icount].any(), f"{what}: split-K counters not back to zero"


def run_shapes(file, expr, launch, shapes, offsets=(0, 1), schedule="serial", runner=None, **kw):
    """Each shape, aligned and ``offsets`` floats off, checked element by element; ``runner``: a
    binary built with other instantiations than this file's (default: this file's own)."""
    launches, inputs = [], []
    for i, (M, N, K) in enumerate(shapes):
        A, B = operands(M, N, K, seed=i)
        for off in offsets:
            grid, block, smem = launch(M, N, K)
            args = launch_args(file, expr, M, N, K, A, B)
            # the matrices may be views (offset); the split-K workspace is the host's own allocation
            offset = [off if i in positions(file)[:3] else 0 for i in range(len(args))]
            launches.append(dict(name_expression=expr, grid=grid, block=block, dyn_smem_bytes=smem, args=args,
                                 offset_floats=offset, schedule=schedule, block_order="shuffle", seed=i, **kw))
            inputs.append((A, B, f"{expr} {M}x{N}x{K} offset {off}"))
    outs = (runner or binary(file)).run_many(launches)
    for out, (A, B, what) in zip(outs, inputs):
        check(out, A, B, what, file)
    return outs


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("file,expr,launch,whole", CONFIGS, ids=[c[1] for c in CONFIGS])
def test_kernel_on_cpu(file, expr, launch, whole):
    """Correct on every shape, aligned and 4 bytes off, one thread at a time to each barrier."""
    run_shapes(file, expr, launch, SHAPES + [whole])


@pytest.mark.parametrize("file,expr,launch,whole", UNGUARDED, ids=[c[1] for c in UNGUARDED])
def test_unguarded_smem_tiling_on_tile_multiples(file, expr, launch, whole):
    tile = int(re.search(r"<(\d+)>", expr).group(1))
    run_shapes(file, expr, launch, [s for s in TILE_SHAPES if all(d % tile == 0 for d in s)])


def test_double_buffering_fast_path_on_whole_tiles():
    """FAST_PATH = 1 on shapes of whole tiles and aligned operands (what its spec and launcher allow)."""
    file, expr, launch, whole = _db(8, 1, 1)
    run_shapes(file, expr, launch, [whole, (128, 384, 8), (256, 128, 40)], offsets=(0,))


def test_double_buffering_fast_path_reads_past_a_on_other_shapes():
    """Why its spec refuses other shapes: with no checks, the last column of blocks reads past B."""
    file, expr, launch, _ = _db(8, 1, 1)
    with pytest.raises(cpu_cuda.CpuCudaError, match="AddressSanitizer"):
        run_shapes(file, expr, launch, [(128, 132, 16)], offsets=(0,))


def test_unguarded_smem_tiling_reads_past_a_on_other_shapes():
    """Why its spec refuses other shapes: the last row's tile runs off the end of A."""
    file, expr, launch, _ = _unguarded(8)
    with pytest.raises(cpu_cuda.CpuCudaError, match="AddressSanitizer"):
        run_shapes(file, expr, launch, [(13, 8, 12)], offsets=(0,))


FREE = ["sgemm_smem_tiling<16, 0>", "sgemm_thread_tile_2d<128, 128, 16, 8, 8>", "sgemm_bank_conflicts<16, 1, 0, 1>",
        "sgemm_double_buffering<8, 1, 0>", "sgemm_cp_async<16, 3>", "sgemm_warptiling<128, 128, 8, 64, 64, 16, 8>",
        "sgemm_final<128, 128, 8, 64, 32, 8, 8, 4, 3, 8, 0, 0, 0, 0>"]


@pytest.mark.parametrize("expr", FREE)
def test_free_running_threads_agree(expr):
    """Some configs again with one std::thread per CUDA thread, interleaved by the OS, on 2 x 2
    blocks, the second row and column partial (N odd, then a multiple of 4), and K not a multiple
    of the k-step: (130, 129, 17) and (130, 132, 36) for blocks of 128 x 128. (Each block starts
    its threads anew: a grid of small blocks would cost more than it shows.)"""
    file, expr, launch, whole = next(c for c in CONFIGS if c[1] == expr)
    M, N = whole[0] // 2 + 2, whole[1] // 2
    run_shapes(file, expr, launch, [(M, N + 1, 17), (M, N + 4, 36)], offsets=(0,), schedule="free")


def test_racy_double_buffering_reads_stage_0_before_it_is_written():
    """FIXED = 0 lacks the barrier after the first tile: thread 0 computes on shared memory
    the other threads have not stored yet. Run serially (each thread to its next barrier,
    thread 0 first), that always happens, and the poison reaches C."""
    A, B = operands(130, 129, 17, seed=0)
    args = launch_args("09_double_buffering.cu", "", 130, 129, 17, A, B)
    out = binary("09_double_buffering.cu").run("sgemm_double_buffering<8, 0, 0>", (2, 2), (256,), 0, args,
                                              schedule="serial")
    assert np.isnan(out["arrays"][5]).any()
    fixed = binary("09_double_buffering.cu").run("sgemm_double_buffering<8, 1, 0>", (2, 2), (256,), 0,
                                                launch_args("09_double_buffering.cu", "", 130, 129, 17, A, B),
                                                schedule="serial")
    check(fixed, A, B, "FIXED=1")


def test_split_k_is_bitwise_reproducible_in_any_block_order():
    """The last block to arrive adds the partial tiles in the order z = 0, 1, ...: the same
    bits whichever block that is."""
    file, expr, launch, _ = _final(128, 128, 8, 64, 32, 8, 8, 4, 3, 8)
    M, N, K = 131, 260, 72
    A, B = operands(M, N, K, seed=7)
    grid, block, smem = launch(M, N, K)
    orders = [("linear", 0), ("reverse", 0), ("shuffle", 1), ("shuffle", 2)]
    outs = binary(file).run_many([dict(name_expression=expr, grid=grid, block=block, dyn_smem_bytes=smem,
                                       args=launch_args(file, expr, M, N, K, A, B), block_order=order, seed=seed)
                                  for order, seed in orders])
    for out, (order, _) in zip(outs, orders):
        check(out, A, B, f"{expr} {order}", file)
    assert all(np.array_equal(outs[0]["arrays"][9], out["arrays"][9]) for out in outs[1:])


def test_split_k_workspace_can_be_reused_by_the_next_launch():
    """The counters end at zero, so a second launch with the same workspace is correct."""
    file, expr, launch, _ = _final(64, 64, 16, 32, 32, 4, 8, 2, 2, 4)
    M, N, K = 67, 130, 40
    A, B = operands(M, N, K, seed=3)
    grid, block, smem = launch(M, N, K)
    first = binary(file).run(expr, grid, block, smem, launch_args(file, expr, M, N, K, A, B))
    args = launch_args(file, expr, M, N, K, A, B)
    args[11], args[12] = first["arrays"][11], first["arrays"][12]
    second = binary(file).run(expr, grid, block, smem, args)
    check(second, A, B, "second launch", file)
    assert np.array_equal(first["arrays"][9], second["arrays"][9])


def test_no_kernel_file_but_common_holds_inline_asm():
    for path in sorted(KERNELS.glob("*.cu")):
        assert not cpu_cuda._has_asm(path.read_text()), path.name
    assert cpu_cuda._has_asm((KERNELS / "common.cuh").read_text())


# ------------------------------------------------------------- the runner itself
BAD = r'''#include "common.cuh"
// MODE 0: fine; 1: misaligned float4; 2: a thread returns before a barrier;
// 3: no cp_async_wait; 4: read past the end of x; 5: read past the dynamic shared memory
template <int MODE>
__global__ void probe(int n, const float* __restrict__ x, float* __restrict__ y, unsigned* count)
{
    __shared__ float s[64];
    extern __shared__ __align__(16) float dyn[];
    const int t = threadIdx.x;
    if (MODE == 2 && t == 3) return;
    cp_async4(static_cast<unsigned>(__cvta_generic_to_shared(dyn + t)), x + min(t, n - 1), t < n ? 4 : 0);
    cp_async_commit();
    if (MODE != 3) cp_async_wait<0>();
    __syncthreads();
    s[t] = dyn[t] * 2.0f;
    __syncthreads();
    if (MODE == 1 && t == 0) y[0] = reinterpret_cast<const float4*>(x + 1)->x;
    if (MODE == 4 && t == 0) y[0] = x[n];
    if (MODE == 5 && t == 0) y[0] = dyn[64];
    if (t < n) y[blockIdx.x * 64 + t] = s[t];
    if (t == 0) atomicAdd(count, 1u);
}
'''


def write_if_changed(path: Path, text: str) -> None:
    """Replace the file in one step: the other test worker may be compiling it right now."""
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


@pytest.fixture(scope="module")
def probe():
    d = cpu_cuda.cache_dir() / "probe"          # a fixed place, so that the objects stay cached
    d.mkdir(exist_ok=True)
    write_if_changed(d / "common.cuh", (KERNELS / "common.cuh").read_text())
    write_if_changed(d / "probe.cu", BAD)
    try:
        b = cpu_cuda.build(d / "probe.cu", [f"probe<{m}>" for m in range(6)])
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))

    def run(mode, **kw):
        x = np.arange(64, dtype=np.float32)
        return b.run(f"probe<{mode}>", (2,), (64,), 64 * 4,
                     [np.int32(64), x, np.full(128, np.nan, np.float32), np.zeros(1, np.uint32)], **kw)
    return run


@pytest.mark.parametrize("schedule", ["free", "serial"])
def test_runner_computes_and_counts(probe, schedule):
    out = probe(0, schedule=schedule)
    assert np.array_equal(out["arrays"][2], np.tile(2 * np.arange(64, dtype=np.float32), 2))
    assert out["arrays"][3][0] == 2 and out["copies"] == 128 and out["barriers"] == 4
    assert out["leftover_cp_async"] == 0 and out["blocks"] == 2 and out["threads"] == 64


@pytest.mark.parametrize("mode,match", [
    (1, r"UndefinedBehaviorSanitizer(.|\n)*misaligned"),
    (2, r"left the kernel"),
    (4, r"AddressSanitizer(.|\n)*0 bytes to the right of argument 1"),
    (5, r"AddressSanitizer(.|\n)*dynamic shared memory"),
])
def test_runner_reports_what_went_wrong(probe, mode, match):
    with pytest.raises(cpu_cuda.CpuCudaError, match=match):
        probe(mode)


def test_runner_copies_land_only_at_the_wait(probe):
    out = probe(3)
    assert np.isnan(out["arrays"][2]).all() and out["leftover_cp_async"] == 128


def test_runner_checks_argument_types():
    with pytest.raises(cpu_cuda.CpuCudaError, match="argument 3: the kernel takes a float pointer, got a uint32"):
        cpu_cuda.run(KERNELS / "02_naive.cu", "sgemm_naive<32, 32>", (1, 1), (32, 32), 0,
                     [np.int32(1), np.int32(1), np.int32(1), np.zeros(1, np.uint32), np.zeros(1, np.float32), np.zeros(1, np.float32)])


def test_runner_compile_error_shows_the_g_plus_plus_message(tmp_path):
    (tmp_path / "broken.cu").write_text("template <int X> __global__ void k(int n) { undeclared(n); }\n")
    with pytest.raises(cpu_cuda.CpuCudaError, match="undeclared"):
        cpu_cuda.build(tmp_path / "broken.cu", ["k<1>"])
