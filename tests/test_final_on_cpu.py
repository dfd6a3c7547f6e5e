"""kernels/12_final.cu run on the CPU (helpers/runtime/cpu_cuda.py): every layout of A and B,
alpha and beta, split-K and stream-K, edge shapes, leading dimensions larger than the
rows, and matrices that start 4 bytes off a 16-byte boundary.

Each operand is handed over as its exact extent in memory ((rows - 1) * ld + cols floats),
so AddressSanitizer catches any read past the last element; C starts as NaN where beta is
0 (it must never be read then). The results are compared element by element with a float64
reference under the worst-case rounding bound of a K-term dot product. Split-K and
stream-K launches run their blocks in several orders (the last to arrive adds the parts),
and must leave their arrival counters at zero.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from helpers.runtime.reduce import pitch
from helpers.runtime.spec import cdiv
from helpers.runtime.specs.final import SPEC, smem_bytes
from helpers.settings import KERNEL_DIR

U = 2.0 ** -24                       # unit roundoff of float32
cpu_cuda = pytest.importorskip("helpers.runtime.cpu_cuda")
FILE = KERNEL_DIR / "12_final.cu"
D = SPEC.defaults()
SMALL = dict(D, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, STAGES=3, GROUP=0)   # 128 threads
NARROW = dict(D, BM=64, BN=128, WM=32, WN=64, TM=4, TN=16, BK=8, STAGES=2, GROUP=4)  # 128 threads
LAYOUTS = [(0, 0), (0, 1), (1, 0), (1, 1)]

# (name, params): each is compiled once for every layout it runs with
CONFIGS = {
    "small": SMALL,
    "small_u4": dict(SMALL, KU=4),
    "small_s5": dict(SMALL, STAGES=5, KU=2),
    "narrow": NARROW,
    "split3": dict(SMALL, SPLITK=3, GROUP=4, STAGES=2, KU=8),
    "slabs4": dict(SMALL, SPLITK=4, REDUCE=1),
    "stream": dict(SMALL, STREAMK=1, KU=4),
    "stream_g": dict(NARROW, STREAMK=1),
    "default": dict(D),
    "default_u8_sk": dict(D, KU=8, STREAMK=1),
    "default_split2": dict(D, KU=8, SPLITK=2),          # 128 results per thread: parts from fresh registers
    "default_slabs3": dict(D, KU=8, SPLITK=3, REDUCE=1),
    "medium_sk": dict(D, BN=128, BK=16, STAGES=4, KU=2, STREAMK=1),   # 128 threads, 16 x 8 per thread
    # tiles over C's last row or column moved back to end at M or N, storing only their own part
    "shifted": dict(SMALL, EDGES=1),
    "shifted_wide_split": dict(D, BM=64, BN=128, WM=64, WN=32, TM=8, TN=8, BK=16, STAGES=4, SPLITK=3, EDGES=1),
    "shifted_stream": dict(SMALL, STREAMK=1, KU=4, EDGES=1),
    "shifted_slabs": dict(SMALL, SPLITK=4, REDUCE=1, EDGES=1),
    # the candidate micro: two warps of 16 x 32, 4 x 4 results per thread, the smallest thread tile
    "micro": dict(D, BM=32, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3, GROUP=0),
    "micro_split3_edges": dict(D, BM=32, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3, SPLITK=3, EDGES=1),
    # 128 results per thread: a row-major A copied 16 threads to a row, swizzled (wide_a), its main
    # loop in trips of 2 and 4 k-steps that each keep one swizzle, and a split of K
    "wide_a_u2": dict(D, BM=128, BN=64, WM=64, WN=64, TM=8, TN=16, BK=16, STAGES=3, KU=2),
    "wide_a_u4_split2": dict(D, BM=128, BN=64, WM=64, WN=64, TM=8, TN=16, BK=16, STAGES=4, KU=4, SPLITK=2),
}


def expr(p: dict) -> str:
    return SPEC.name_expression(SPEC.validate(p))


@functools.cache
def binary(exprs: tuple):
    return cpu_cuda.build(FILE, list(exprs))


def with_layout(p, a_t, b_t):
    return dict(p, A_T=a_t, B_T=b_t)


SPLIT4 = dict(SMALL, SPLITK=4)      # slabs4 without slabs: the same sums, added by the last block (NN only)


def all_exprs() -> tuple:
    return tuple(sorted({expr(with_layout(p, a, b)) for p in CONFIGS.values() for a, b in LAYOUTS
                         if SPEC.is_valid(with_layout(p, a, b))} | {expr(SPLIT4)}))


def kernels_of():
    try:
        return binary(all_exprs())
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kernels():
    return kernels_of()


def stored(rng, rows, cols, ld, transposed):
    """(op matrix (rows, cols) as float64, the exact memory holding it, its ld)."""
    r, c = (cols, rows) if transposed else (rows, cols)      # the matrix as stored, row-major
    mem = rng.uniform(-1, 1, size=(r - 1) * ld + c).astype(np.float32)
    view = np.lib.stride_tricks.as_strided(mem, (r, c), (4 * ld, 4))
    op = view.T if transposed else view
    return op.astype(np.float64), mem


def launch_geometry(p, M, N, K, g=None, waves=0):
    """(grid, partial floats, counters), split-K or stream-K as the config says."""
    tiles = cdiv(M, p["BM"]) * cdiv(N, p["BN"])
    if p["STREAMK"]:
        return (g, 1 + waves, 1), 2 * g * p["BM"] * p["BN"], tiles - g * waves
    grid = (cdiv(N, p["BN"]), cdiv(M, p["BM"]), p["SPLITK"])
    if p["REDUCE"]:
        return grid, p["SPLITK"] * M * pitch(N), 0       # a slab of M x N (rows padded) per split, no counters
    return grid, tiles * p["SPLITK"] * p["BM"] * p["BN"], tiles


class Runs:
    """Launches of the final kernel gathered with :meth:`add`, then run by :meth:`check` in one
    process of the binary (and one of the slabs' second kernel): a process of an instrumented
    binary per launch would spend more time starting than computing. Each launch is checked
    element by element; ``check`` returns each C.

    Schedules (helpers/runtime/cpu_cuda.py): unless a launch names one, the first launch of a
    batch runs its threads free (one std::thread each, interleaved by the OS) and the others
    one at a time to each barrier, thread 0 first (deterministic, and a missing barrier shows
    every time); free threads cost about twice as much."""

    def __init__(self, kernels):
        self.kernels, self.items = kernels, []

    def add(self, p, M, N, K, *, alpha=1.0, beta=0.0, pad=(0, 0, 0), offset=0, g=None, waves=0,
            schedule=None, block_order="linear", seed=0):
        schedule = schedule or ("serial" if self.items else "free")
        rng = np.random.default_rng(seed)
        a_t, b_t = p["A_T"], p["B_T"]
        lda = (M if a_t else K) + pad[0]
        ldb = (K if b_t else N) + pad[1]
        ldc = N + pad[2]
        A, a_mem = stored(rng, M, K, lda, a_t)
        B, b_mem = stored(rng, K, N, ldb, b_t)
        c_mem = (rng.uniform(-1, 1, size=(M - 1) * ldc + N).astype(np.float32) if beta
                 else np.full((M - 1) * ldc + N, np.nan, np.float32))
        C0 = np.lib.stride_tricks.as_strided(c_mem, (M, N), (4 * ldc, 4)).astype(np.float64)
        grid, floats, counters = launch_geometry(p, M, N, K, g, waves)
        shared = floats > 0 and (p["SPLITK"] > 1 or p["STREAMK"])
        partials = np.full(floats, np.nan, np.float32) if shared else None
        arrivals = np.zeros(max(counters, 1), np.uint32) if shared and not p["REDUCE"] else None
        args = [np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), a_mem, np.int32(lda), b_mem, np.int32(ldb),
                np.float32(beta), c_mem, np.int32(ldc), partials, arrivals]
        offsets = [0, 0, 0, 0, offset, 0, offset, 0, 0, offset, 0, 0, 0]
        launch = dict(name_expression=expr(p), grid=grid, block=SPEC.block(p), dyn_smem_bytes=smem_bytes(p), args=args,
                      offset_floats=offsets, schedule=schedule, block_order=block_order, seed=seed)
        what = (f"{expr(p)} {M}x{N}x{K} alpha {alpha} beta {beta} pad {pad} offset {offset} g {g} waves {waves} "
                f"{schedule} {block_order}")
        self.items.append(dict(launch=launch, p=p, M=M, N=N, K=K, alpha=alpha, beta=beta, A=A, B=B, C0=C0,
                               c_mem=c_mem, ldc=ldc, offset=offset, shared=shared, what=what))

    def check(self) -> list:
        items, self.items = self.items, []
        outs = self.kernels.run_many([it["launch"] for it in items])
        slabs = [(it, out) for it, out in zip(items, outs) if it["p"]["REDUCE"]]
        if slabs:                                            # the second kernel adds the slabs into C
            from helpers.runtime import reduce

            adds = []
            for it, out in slabs:
                p, M, N = it["p"], it["M"], it["N"]
                written = out["arrays"][11].reshape(p["SPLITK"], M, pitch(N))[:, :, :N]
                assert np.isfinite(written).all(), f"{it['what']}: a split left part of its slab unwritten"
                adds.append(dict(name_expression="add_parts", grid=(3, 1, 1), block=(reduce.THREADS, 1, 1),
                                 dyn_smem_bytes=0, offset_floats=[0] * 7 + [it["offset"], 0],
                                 args=[np.int32(M), np.int32(N), np.int32(p["SPLITK"]), np.float32(it["alpha"]),
                                       out["arrays"][11], np.int32(pitch(N)), np.float32(it["beta"]),
                                       out["arrays"][9], np.int32(it["ldc"])]))
            adder = cpu_cuda.build(KERNEL_DIR / reduce.FILE, ["add_parts"])
            for (it, out), summed in zip(slabs, adder.run_many(adds)):
                out["arrays"][9] = summed["arrays"][7]
        return [self.checked(it, out) for it, out in zip(items, outs)]

    @staticmethod
    def checked(it, out):
        """C against the float64 reference within the rounding bound of a K-term dot product; the
        counters back at zero; nothing written between the rows of C."""
        M, N, K, ldc, alpha, beta, A, B, C0 = (it[k] for k in ("M", "N", "K", "ldc", "alpha", "beta", "A", "B", "C0"))
        C = np.lib.stride_tricks.as_strided(out["arrays"][9], (M, N), (4 * ldc, 4))
        ref = alpha * (A @ B) + (beta * C0 if beta else 0.0)
        bound = (K + 2) * U * (abs(alpha) * (np.abs(A) @ np.abs(B)) + abs(beta) * np.abs(C0 if beta else 0.0)) + 1e-30
        what = it["what"]
        assert np.isfinite(C).all(), f"{what}: {int((~np.isfinite(C)).sum())} elements of C not written (or NaN read)"
        worst = float((np.abs(C - ref) / bound).max())
        assert worst <= 1.0, f"{what}: error {worst:.2f} x the rounding bound"
        if it["shared"] and not it["p"]["REDUCE"]:
            assert not out["arrays"][12].any(), f"{what}: arrival counters not reset to zero"
        c_mem = it["c_mem"]
        gap = np.arange(c_mem.size) % ldc >= N               # between the rows of C: never touched
        assert np.array_equal(out["arrays"][9][gap], c_mem[gap], equal_nan=True), f"{what}: wrote between the rows of C"
        return np.array(C)


SHAPES = [(37, 45, 29), (64, 64, 16), (1, 1, 1), (70, 3, 100), (5, 130, 9)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
@pytest.mark.parametrize("name", ["small", "small_u4", "narrow", "micro", "wide_a_u2", "wide_a_u4_split2"])
def test_layouts_edges_and_views(kernels, name, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS[name], *layout)
    for i, (M, N, K) in enumerate(SHAPES):
        runs.add(p, M, N, K, seed=i)
    runs.add(p, 67, 130, 41, pad=(3, 1, 5), offset=1, seed=7)          # ld > rows, 4 bytes off
    runs.add(p, 67, 130, 41, pad=(1, 2, 2), offset=0, seed=10)         # aligned rows that end mid-float4
    runs.add(p, 128, 64, 48, pad=(4, 4, 4), offset=0, seed=8)          # aligned views, ld % 4 == 0
    runs.add(p, 128, 64, 48, pad=(4, 4, 4), offset=1, seed=9)          # the same, unaligned
    runs.check()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_alpha_and_beta(kernels, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS["small"], *layout)
    runs.add(p, 70, 66, 20, alpha=-1.5, beta=0.0, seed=1)
    runs.add(p, 70, 66, 20, alpha=0.5, beta=2.0, pad=(0, 0, 3), seed=2)
    runs.add(p, 64, 64, 16, alpha=1.0, beta=-1.0, offset=1, seed=3)
    runs.check()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_split_k_in_any_block_order(kernels, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS["split3"], *layout)
    runs.add(p, 100, 70, 200, alpha=2.0, beta=0.5, seed=4)
    runs.add(p, 100, 70, 20, seed=5, block_order="reverse")            # an empty split
    runs.add(p, 65, 129, 77, pad=(1, 2, 3), offset=1, seed=6, block_order="shuffle", schedule="serial")
    runs.check()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_split_k_slabs_added_by_a_second_kernel(kernels, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS["slabs4"], *layout)
    runs.add(p, 100, 70, 200, alpha=2.0, beta=0.5, seed=6)
    runs.add(p, 37, 45, 29, seed=7, block_order="reverse")             # empty splits: slabs of zeros
    runs.add(p, 64, 64, 128, alpha=-1.0, beta=1.0, pad=(4, 4, 3), offset=1, seed=8)
    runs.check()


def test_slabs_give_the_same_bits_as_the_last_block_adding():
    runs = Runs(kernels_of())
    runs.add(SPLIT4, 100, 70, 200, alpha=2.0, beta=0.5, seed=12)
    runs.add(CONFIGS["slabs4"], 100, 70, 200, alpha=2.0, beta=0.5, seed=12, block_order="reverse")
    last_block, slabs = runs.check()
    assert np.array_equal(last_block, slabs)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_stream_k_in_any_block_order(kernels, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS["stream"], *layout)
    # 2 x 3 tiles of 64 x 64, 7 k-tiles of 16 each: g blocks share the first 6 - g w tiles
    for g, waves, order in ((3, 0, "linear"), (4, 0, "reverse"), (5, 0, "shuffle"), (2, 1, "shuffle"),
                            (3, 1, "reverse"), (1, 2, "linear"), (6, 0, "linear")):
        runs.add(p, 100, 150, 100, alpha=0.5, beta=1.5, g=g, waves=waves, block_order=order, seed=g + 10 * waves)
    runs.add(p, 100, 150, 17, g=4, seed=3, schedule="serial", block_order="shuffle")   # 2 k-tiles per tile
    runs.add(p, 33, 20, 300, pad=(1, 1, 1), offset=1, g=5, seed=4)                     # one tile, 19 k-tiles
    q = with_layout(CONFIGS["stream_g"], *layout)
    runs.add(q, 130, 300, 70, g=5, waves=1, seed=5, block_order="shuffle")
    runs.check()


def test_more_stages_and_a_short_inner_loop(kernels):
    runs = Runs(kernels)
    for layout in LAYOUTS:
        p = with_layout(CONFIGS["small_s5"], *layout)
        runs.add(p, 64, 64, 200, seed=1)
        runs.add(p, 50, 70, 33, offset=1, seed=2)
    runs.check()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_the_default_config(kernels, layout):
    runs = Runs(kernels)
    p = with_layout(CONFIGS["default"], *layout)
    runs.add(p, 130, 260, 70, alpha=1.0, beta=0.5, seed=1)
    q = with_layout(CONFIGS["default_u8_sk"], *layout)
    if SPEC.is_valid(q):                              # stream-K with 16 x 8 per thread: NN and TT
        runs.add(q, 129, 257, 100, g=3, seed=2, block_order="reverse")
    if layout in ((0, 0), (1, 1)):                    # split-K, both ways of adding the parts
        runs.add(with_layout(CONFIGS["default_split2"], *layout), 130, 260, 100, beta=0.5, seed=3,
            block_order="reverse")
        runs.add(with_layout(CONFIGS["default_slabs3"], *layout), 130, 260, 100, alpha=-1.0, seed=4)
    runs.check()


@pytest.mark.parametrize("layout", [(0, 0), (1, 0), (1, 1)], ids=["NN", "TN", "TT"])
def test_stream_k_with_128_results_per_thread(kernels, layout):
    # their segments start their copies at the segment's first k-tile (kernels/12_final.cu, FOLD):
    # 7 k-tiles of 16 per tile, so most blocks begin and end inside a tile
    runs = Runs(kernels)
    p = with_layout(CONFIGS["medium_sk"], *layout)
    runs.add(p, 129, 257, 100, alpha=0.5, beta=1.5, g=5, seed=1, block_order="shuffle")
    runs.add(p, 200, 130, 300, pad=(1, 2, 3), offset=1, g=3, waves=1, seed=2, block_order="reverse")
    runs.check()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_edge_tiles_moved_back_store_each_element_once(kernels, layout):
    # EDGES = 1: a tile over the last row or column of C moves back to end at M or N and overlaps
    # the tile before it; each element of C is stored by one block only (beta != 0 would count a
    # second store twice), and a matrix smaller than a tile keeps the guarded copies
    runs = Runs(kernels)
    p = with_layout(CONFIGS["shifted"], *layout)
    for i, (M, N, K) in enumerate(SHAPES):
        runs.add(p, M, N, K, beta=0.5, seed=40 + i)
    runs.add(p, 130, 67, 41, beta=-1.0, pad=(3, 1, 5), offset=1, seed=46, block_order="reverse")  # unaligned
    runs.add(p, 67, 130, 41, beta=0.5, pad=(1, 2, 1), offset=0, seed=47, block_order="shuffle")   # C padded
    runs.add(p, 128, 131, 20, beta=0.5, pad=(0, 1, 0), seed=48)          # moved back by 3 columns, rows whole
    runs.add(with_layout(CONFIGS["shifted_wide_split"], *layout), 70, 200, 300, beta=0.5, seed=49,
             block_order="shuffle")
    runs.add(with_layout(CONFIGS["shifted_stream"], *layout), 100, 150, 100, beta=0.5, g=4, seed=50,
             block_order="reverse")
    runs.add(with_layout(CONFIGS["shifted_slabs"], *layout), 99, 70, 300, beta=0.5, seed=51)
    runs.add(with_layout(CONFIGS["micro_split3_edges"], *layout), 185, 70, 89, beta=0.5, seed=52,
             block_order="shuffle")
    runs.check()


# ---------------------------------------------------------------- packing (kernels/12_pack.cu)
@pytest.mark.parametrize("along_k", [1, 0])
@pytest.mark.parametrize("R,K,ld_pad", [(1, 1, 0), (37, 70, 3), (64, 33, 0), (5, 200, 1)])
def test_pack_writes_each_element_once_in_place(along_k, R, K, ld_pad):
    # the source and the destination handed over at their exact extents: AddressSanitizer
    # catches a read or write past either; the destination's padding stays NaN
    from helpers.runtime import pack

    rng = np.random.default_rng(R * K)
    ld = (K if along_k else R) + ld_pad
    rows, cols = (R, K) if along_k else (K, R)
    src = rng.uniform(-1, 1, (rows - 1) * ld + cols).astype(np.float32)
    ldd = pack.row_floats(R)
    dst = np.full(K * ldd, np.nan, np.float32)
    out = cpu_cuda.run(KERNEL_DIR / pack.FILE, f"pack_kmajor<{along_k}>", pack.grid(R, K), pack.BLOCK, 0,
                       [np.int32(R), np.int32(K), src, np.int32(ld), dst, np.int32(ldd)])
    got = out["arrays"][4].reshape(K, ldd)
    full = np.concatenate([src, np.zeros(rows * ld - src.size, np.float32)]).reshape(rows, ld)[:, :cols]
    X = full if along_k else full.T                        # X(r, k)
    assert np.array_equal(got[:, :R], X.T)
    assert np.isnan(got[:, R:]).all()
    assert np.array_equal(out["arrays"][2], src), "the source must come back unchanged"


# ---------------------------------------------------------------- a batch in one launch (sgemm_final_batched)
BATCHED = {"small": SMALL, "split3": CONFIGS["split3"], "micro_edges": dict(CONFIGS["micro"], EDGES=1)}


@functools.cache
def batched_binary():
    from helpers.runtime.specs.final import batched_expression

    exprs = [batched_expression(SPEC.validate(with_layout(p, a, b))) for p in BATCHED.values() for a, b in LAYOUTS]
    try:
        return cpu_cuda.build(FILE, exprs)
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))


def run_batched(p, M, N, K, batch, *, broadcast="", alpha=1.0, beta=0.0, gap=3, seed=0, block_order="linear"):
    """A batch of products in one launch: each operand's products ``gap`` floats apart beyond their
    extent (never touched), or one matrix for every product (``broadcast`` names A and/or B); C's
    gaps must come back as they went in."""
    from helpers.runtime.specs.final import batched_expression

    rng = np.random.default_rng(seed)
    a_t, b_t = p["A_T"], p["B_T"]
    lda, ldb, ldc = (M if a_t else K) + 1, (K if b_t else N) + 2, N + 3

    def batch_of(count, rows, cols, ld, transposed):
        r, c = (cols, rows) if transposed else (rows, cols)
        extent = (r - 1) * ld + c
        stride = extent + gap if count > 1 else 0
        mem = rng.uniform(-1, 1, size=(count - 1) * stride + extent).astype(np.float32)
        ops = [np.lib.stride_tricks.as_strided(mem[i * stride:], (r, c), (4 * ld, 4)) for i in range(count)]
        return mem, stride, [(o.T if transposed else o).astype(np.float64) for o in ops]

    a_mem, sa, As = batch_of(1 if "A" in broadcast else batch, M, K, lda, a_t)
    b_mem, sb, Bs = batch_of(1 if "B" in broadcast else batch, K, N, ldb, b_t)
    c_mem, sc, C0 = batch_of(batch, M, N, ldc, False)
    if not beta:
        c_mem = np.where(np.arange(c_mem.size) % sc % ldc < N, np.nan, c_mem).astype(np.float32) if sc else \
            np.full_like(c_mem, np.nan)
    before = c_mem.copy()
    grid, floats, counters = launch_geometry(p, M, N, K)
    grid = grid[:2] + (p["SPLITK"] * batch,)
    split = p["SPLITK"] > 1
    partials = np.full(batch * floats, np.nan, np.float32) if split else None
    arrivals = np.zeros(batch * counters, np.uint32) if split else None
    args = [np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), a_mem, np.int32(lda), b_mem, np.int32(ldb),
            np.float32(beta), c_mem, np.int32(ldc), partials, arrivals, np.int64(sa), np.int64(sb), np.int64(sc)]
    out = batched_binary().run(batched_expression(SPEC.validate(p)), grid, SPEC.block(p), smem_bytes(p), args,
                               block_order=block_order, seed=seed)
    c_out = out["arrays"][9]
    for z in range(batch):
        A, B = As[min(z, len(As) - 1)], Bs[min(z, len(Bs) - 1)]
        C = np.lib.stride_tricks.as_strided(c_out[z * sc:], (M, N), (4 * ldc, 4))
        ref = alpha * (A @ B) + (beta * C0[z] if beta else 0.0)
        bound = (K + 2) * U * (abs(alpha) * (np.abs(A) @ np.abs(B)) + abs(beta) * np.abs(C0[z] if beta else 0.0)) + 1e-30
        assert np.isfinite(C).all(), f"product {z}: elements of C not written"
        assert float((np.abs(C - ref) / bound).max()) <= 1.0, f"product {z}: error over the rounding bound"
    inside = np.zeros(c_mem.size, bool)
    for z in range(batch):
        rows = z * sc + np.arange(M)[:, None] * ldc + np.arange(N)[None, :]
        inside[rows.ravel()] = True
    assert np.array_equal(c_out[~inside], before[~inside], equal_nan=True), "wrote outside the products of C"
    if split:
        assert not out["arrays"][12].any(), "arrival counters not reset to zero"


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_a_batch_in_one_launch_reads_and_writes_each_product_its_own(layout):
    run_batched(with_layout(BATCHED["small"], *layout), 70, 45, 29, 3, alpha=1.5, seed=1)
    run_batched(with_layout(BATCHED["small"], *layout), 37, 66, 20, 3, broadcast="A", beta=0.5, seed=2,
                block_order="reverse")
    run_batched(with_layout(BATCHED["micro_edges"], *layout), 40, 70, 33, 2, broadcast="B", beta=-1.0, seed=3)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: "NT"[l[0]] + "NT"[l[1]])
def test_a_batch_split_along_k_keeps_each_products_parts_apart(layout):
    # blockIdx.z = product * SPLITK + split: each product has its own partial tiles and counters
    run_batched(with_layout(BATCHED["split3"], *layout), 100, 70, 90, 3, beta=0.5, seed=4, block_order="shuffle")
    run_batched(with_layout(BATCHED["split3"], *layout), 65, 40, 20, 2, broadcast="AB", seed=5)   # an empty split
