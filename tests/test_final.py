"""CPU tests for the final kernel: spec rules, the per-shape choice, and a NumPy
emulation of kernels/10_final.cu's index math (copies, fragments, rasterisation,
split-K, epilogue) on shapes that are not multiples of any tile."""
import math

import numpy as np
import pytest

from helpers.registry import ConfigError, cdiv, get
from helpers.specs import final as fs

SPEC = get("final")


# ----------------------------------------------------------------- emulation
def raster(p, bx, by, gx, gy):
    """(tile_m, tile_n) of block (bx, by), as the kernel computes it."""
    if not p["GROUP"]:
        return by, bx
    G = p["GROUP"]
    pid = by * gx + bx
    per_group = G * gx
    g = pid // per_group
    first_m = g * G
    rows_here = min(gy - first_m, G)
    r = pid - g * per_group
    return first_m + r % rows_here, r // rows_here


def emulate(p, A, B, b_aligned=True):
    """C = A @ B computed with the kernel's index math, one block at a time.

    Every shared-memory slot of a stage must be written exactly once per tile, every
    global read must lie inside A or B, and every element of C must be written by
    exactly one thread of each split (the split blocks add in order z = 0, 1, ...).
    """
    M, K = A.shape
    N = B.shape[1]
    BM, BN, BK, WM, WN, TM, TN = (p[k] for k in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    WARPS_N = BN // WN
    T = (BM // WM) * WARPS_N * 32
    WMITER, WNITER = TM // 4, TN // 4
    WTC = WN // TN
    WSUB_M, WSUB_N = WM // WMITER, WN // WNITER
    LDA, LDB = BM + 4, BN
    A_ROWS, A_PASSES, A_KG = T // 8, BM // (T // 8), BK // 8
    B_CH, B_PASSES = BN // 4, BK * BN // 4 // T
    B_ROWS = T // B_CH
    Af, Bf = A.ravel(), B.ravel()
    C = np.full((M, N), np.nan)
    gx, gy, gz = SPEC.grid(p, M, N, K)
    k_tiles = cdiv(K, BK)
    per_split = cdiv(k_tiles, p["SPLITK"])
    seen_tiles = set()
    for bz in range(gz):
        for by in range(gy):
            for bx in range(gx):
                tm, tn = raster(p, bx, by, gx, gy)
                assert 0 <= tm < gy and 0 <= tn < gx
                seen_tiles.add((bz, tm, tn))
                row0, col0 = tm * BM, tn * BN
                t_begin = bz * per_split if p["SPLITK"] > 1 else 0
                n_tiles = max(0, min(k_tiles, t_begin + per_split) - t_begin) if p["SPLITK"] > 1 else k_tiles
                acc = np.zeros((BM, BN))
                b_vec = N % 4 == 0 and b_aligned
                a_inside = row0 + BM <= M
                b_inside = b_vec and col0 + BN <= N
                for t in range(n_tiles):
                    k0 = (t_begin + t) * BK
                    k_inside = k0 + BK <= K
                    As = np.full((BK, LDA), np.nan)
                    Bs = np.full((BK, LDB), np.nan)
                    wa = np.zeros((BK, LDA), int)
                    wb = np.zeros((BK, LDB), int)
                    for tid in range(T):
                        a_k, a_m = tid % 8, tid // 8
                        for pp in range(A_PASSES):
                            for h in range(A_KG):
                                kk, mm = a_k + 8 * h, a_m + pp * A_ROWS
                                if a_inside and k_inside:
                                    idx = (row0 + a_m) * K + a_k + k0 + pp * A_ROWS * K + 8 * h
                                    val = Af[idx]
                                else:
                                    row = min(row0 + mm, M - 1)
                                    k = k0 + kk
                                    idx = row * K + (k if k < K else 0)
                                    val = Af[idx] if k < K else 0.0
                                assert 0 <= idx < M * K
                                As[kk, mm] = val
                                wa[kk, mm] += 1
                        b_r, b_c = tid // B_CH, (tid % B_CH) * 4
                        for pp in range(B_PASSES):
                            r = b_r + pp * B_ROWS
                            if b_inside and k_inside:
                                idx = b_r * N + col0 + b_c + k0 * N + pp * B_ROWS * N
                                vals = [Bf[idx + j] for j in range(4)]
                                idxs = [idx + j for j in range(4)]
                            else:
                                k = k0 + r
                                base = (k if k < K else 0) * N
                                if b_vec:
                                    col = min(col0 + b_c, N - 4)
                                    idxs = [base + col + j for j in range(4)]
                                else:
                                    idxs = [base + min(col0 + b_c + j, N - 1) for j in range(4)]
                                vals = [Bf[i] if k < K else 0.0 for i in idxs]
                            for i in idxs:
                                assert 0 <= i < K * N
                            for j in range(4):
                                Bs[r, b_c + j] = vals[j]
                                wb[r, b_c + j] += 1
                    assert (wa[:, :BM] == 1).all() and (wa[:, BM:] == 0).all(), "A slots not written exactly once"
                    assert (wb == 1).all(), "B slots not written exactly once"
                    # compute: per thread, TM x TN outer products from the fragments
                    owner = np.zeros((BM, BN), int)
                    for tid in range(T):
                        lane, warp = tid % 32, tid // 32
                        wm0, wn0 = (warp // WARPS_N) * WM, (warp % WARPS_N) * WN
                        tr, tc = lane // WTC, lane % WTC
                        rows = [wm0 + i * WSUB_M + 4 * tr + a for i in range(WMITER) for a in range(4)]
                        cols = [wn0 + j * WSUB_N + 4 * tc + b for j in range(WNITER) for b in range(4)]
                        fa = As[:, rows]
                        fb = Bs[:, cols]
                        acc[np.ix_(rows, cols)] += fa.T @ fb
                        owner[np.ix_(rows, cols)] += 1
                    assert (owner == 1).all(), "a result is owned by no thread or by two"
                # epilogue (the kernel stores only rows < M, columns < N)
                rr, cc = min(BM, M - row0), min(BN, N - col0)
                if bz == 0:
                    C[row0:row0 + rr, col0:col0 + cc] = acc[:rr, :cc]
                else:
                    C[row0:row0 + rr, col0:col0 + cc] += acc[:rr, :cc]
    assert len(seen_tiles) == gx * gy * gz, "rasterisation is not a bijection"
    return C


SMALL = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=2, SPLITK=1, GROUP=0)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (65, 130, 17), (128, 64, 24), (70, 68, 40)])
@pytest.mark.parametrize("extra", [{}, {"GROUP": 4}, {"SPLITK": 3}, {"BK": 16, "SPLITK": 2, "GROUP": 4}])
def test_emulation_matches_numpy(shape, extra):
    p = SPEC.validate(dict(SMALL, **extra))
    M, N, K = shape
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K))
    B = rng.uniform(-1, 1, (K, N))
    C = emulate(p, A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(65, 132, 20), (64, 64, 16)])
def test_emulation_b_view_not_16_byte_aligned(shape):
    # B starting 4 bytes off: N % 4 == 0 but every B copy takes the 4-byte path
    p = SPEC.validate(dict(SMALL, GROUP=4))
    M, N, K = shape
    rng = np.random.default_rng(3)
    A, B = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    np.testing.assert_allclose(emulate(p, A, B, b_aligned=False), A @ B, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("params", [dict(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8, BK=8),
                                    dict(BM=64, BN=128, WM=32, WN=64, TM=8, TN=8, BK=16),
                                    dict(BM=64, BN=64, WM=64, WN=64, TM=16, TN=8, BK=8)])
def test_emulation_other_warp_layouts(params):
    p = SPEC.validate(dict(SMALL, **params))
    rng = np.random.default_rng(1)
    M, N, K = 131, 67, 19
    A, B = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    np.testing.assert_allclose(emulate(p, A, B), A @ B, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("G", [1, 3, 4, 8, 16])
@pytest.mark.parametrize("grid", [(1, 1), (5, 3), (7, 17), (33, 33), (1, 64), (64, 1)])
def test_rasterisation_is_a_bijection(G, grid):
    gx, gy = grid
    p = dict(GROUP=G)
    tiles = {raster(p, bx, by, gx, gy) for by in range(gy) for bx in range(gx)}
    assert tiles == {(m, n) for m in range(gy) for n in range(gx)}


def test_rasterisation_groups_rows():
    # consecutive blocks walk down GROUP block-rows before moving right
    p = dict(GROUP=4)
    order = [raster(p, bx, by, 8, 8) for by in range(8) for bx in range(8)]
    assert order[:5] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]


# ----------------------------------------------------------------- spec rules
def test_default_is_the_tuned_4096_choice():
    from helpers.final import choose_config

    d = SPEC.defaults()
    assert (d["BM"], d["BN"], d["BK"], d["WM"], d["WN"], d["STAGES"]) == (128, 256, 32, 64, 64, 2)
    assert SPEC.block(d) == (256, 1, 1)
    assert choose_config(4096, 4096, 4096) == d


def test_smem_formula():
    p = SPEC.defaults()
    assert SPEC.smem_bytes(p) == p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * p["BN"]) * 4


def test_grid_has_split_in_z():
    p = SPEC.validate(dict(BM=128, BN=128, SPLITK=4))
    assert SPEC.grid(p, 8192, 128, 8192) == (1, 64, 4)


def test_lanes_rule_names_the_fix():
    with pytest.raises(ConfigError, match="must be 32"):
        SPEC.validate(dict(WM=64, WN=64, TM=8, TN=8))


def test_register_rule():
    with pytest.raises(ConfigError, match="255 registers"):
        SPEC.validate(dict(TM=16, TN=16, WM=64, WN=128, BN=128))


def test_b_copy_rule():
    # 8 warps of 32x32 in a 64x128 tile: 256 threads, but the 8x128 B tile has 256 float4: fine;
    # a 64-wide B tile with 256 threads has 128 float4: refused
    with pytest.raises(ConfigError, match="B's float4"):
        SPEC.validate(dict(BM=256, BN=64, WM=32, WN=64, TM=8, TN=8, BK=8))


def test_split_tile_limit():
    p = SPEC.validate(dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, SPLITK=2))
    with pytest.raises(ConfigError, match="65536"):
        SPEC.check_shape(p, 64 * 300, 64 * 300, 64)
    SPEC.check_shape(dict(p, SPLITK=1), 64 * 300, 64 * 300, 64)


def test_index_rule():
    with pytest.raises(ConfigError, match="32-bit"):
        SPEC.check_shape(SPEC.defaults(), 65536, 65536, 8)


@pytest.mark.parametrize("name,params", [(s.name, p) for s, p in __import__("helpers.specs", fromlist=["x"]).test_configs()
                                         if s.name in ("final", "warptiling")])
def test_test_configs_are_valid(name, params):
    get(name).validate(params)


# ----------------------------------------------------------------- choice
@pytest.mark.parametrize("shape", list(fs.SUITE) + [(n, n, n) for n in (1, 100, 1024, 4096, 8192)])
def test_choose_config_is_valid_for_shape(shape):
    from helpers.final import choose_config

    p = choose_config(*shape)
    full = SPEC.validate(p)
    SPEC.check_shape(full, *shape)


def test_sweep_is_small():
    from helpers.specs import sweeps

    assert len(sweeps()["final"]) <= 30
    assert len(sweeps()["warptiling"]) <= 30


# ----------------------------------------------------------------- offline compile
@pytest.mark.parametrize("params", [{}, dict(BM=128, BN=128, STAGES=4), dict(BM=128, BN=256, TM=8, TN=16)])
def test_no_spills(params):
    res = pytest.importorskip("helpers.resources")
    try:
        r = res.resources("final", params)
    except res.ToolMissing as exc:
        pytest.skip(str(exc))
    assert not r.spills and r.registers <= 255


def test_inner_loop_is_ffma_and_lds128():
    res = pytest.importorskip("helpers.resources")
    try:
        text = res.sass("final", {})
    except res.ToolMissing as exc:
        pytest.skip(str(exc))
    counts = res.opcode_counts(text)
    loop = res.opcode_counts(res.inner_loop(text))
    assert loop["FFMA"] >= 1024          # BK=8 x 16x8 per thread, unrolled
    assert loop["LDS.128"] >= 48          # 6 per k step
    assert counts["LDS.64"] == 0
    assert not math.isnan(loop["FFMA"] / max(1, sum(loop.values())))


def test_square_row_picks_the_chosen_config_and_refuses_a_missing_size():
    from helpers import final as fin
    from helpers.data import ResultSet

    chosen = fin.choose_config(4096, 4096, 4096)
    other = dict(chosen, STAGES=chosen["STAGES"] + 1)
    rows = [dict(kernel="final", params=p, M=4096, N=4096, K=4096, tflops=t, cublas_tflops=50.0)
            for p, t in ((other, 49.0), (chosen, 47.0))]
    rs = ResultSet(rows, "recorded on test", False)
    assert fin.square_row(rs, 4096)["params"] == chosen   # the choice, not the fastest row
    with pytest.raises(KeyError, match="n=8192"):
        fin.square_row(rs, 8192)                          # recorded data never stands in for another size
