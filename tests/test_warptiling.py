"""CPU tests for the warptiling kernel: spec rules, and a NumPy emulation of the
index math of kernels/09_warptiling.cu (loads, transposed stores, fragments, stores)."""
import numpy as np
import pytest

from helpers.registry import ConfigError, cdiv, get
from helpers.specs import warptiling as ws

SPEC = get("warptiling")


def emulate(p, A, B):
    """C = A @ B with the kernel's index math; checks coverage and bounds on the way."""
    M, K = A.shape
    N = B.shape[1]
    BM, BN, BK, WM, WN, TM, TN = (p[k] for k in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    WARPS_N = BN // WN
    T = (BM // WM) * WARPS_N * 32
    WMITER, WNITER = TM // 4, TN // 4
    WTC = WN // TN
    WSUB_M, WSUB_N = WM // WMITER, WN // WNITER
    LDA = BM + 4
    A_LOADS, B_LOADS = BM * BK // 4 // T, BK * BN // 4 // T

    def load4(X, rows, cols, r, c):
        return [X[r, c + j] if r < rows and c + j < cols else 0.0 for j in range(4)]

    C = np.full((M, N), np.nan)
    gx, gy, _ = SPEC.grid(p, M, N, K)
    for by in range(gy):
        for bx in range(gx):
            row0, col0 = by * BM, bx * BN
            acc = np.zeros((BM, BN))
            for t in range(cdiv(K, BK)):
                k0 = t * BK
                As = np.full((BK, LDA), np.nan)
                Bs = np.full((BK, BN), np.nan)
                wa = np.zeros((BK, LDA), int)
                wb = np.zeros((BK, BN), int)
                for tid in range(T):
                    for l in range(A_LOADS):
                        i = tid + l * T
                        r, c = i // (BK // 4), (i % (BK // 4)) * 4
                        v = load4(A, M, K, row0 + r, k0 + c)
                        for j in range(4):
                            As[c + j, r] = v[j]
                            wa[c + j, r] += 1
                    for l in range(B_LOADS):
                        i = tid + l * T
                        r, c = i // (BN // 4), (i % (BN // 4)) * 4
                        v = load4(B, K, N, k0 + r, col0 + c)
                        Bs[r, c:c + 4] = v
                        wb[r, c:c + 4] += 1
                assert (wa[:, :BM] == 1).all() and (wa[:, BM:] == 0).all()
                assert (wb == 1).all()
                owner = np.zeros((BM, BN), int)
                for tid in range(T):
                    lane, warp = tid % 32, tid // 32
                    wm0, wn0 = (warp // WARPS_N) * WM, (warp % WARPS_N) * WN
                    tr, tc = lane // WTC, lane % WTC
                    rows = [wm0 + i * WSUB_M + 4 * tr + a for i in range(WMITER) for a in range(4)]
                    cols = [wn0 + j * WSUB_N + 4 * tc + b for j in range(WNITER) for b in range(4)]
                    acc[np.ix_(rows, cols)] += As[:, rows].T @ Bs[:, cols]
                    owner[np.ix_(rows, cols)] += 1
                assert (owner == 1).all()
            rr, cc = min(BM, M - row0), min(BN, N - col0)
            C[row0:row0 + rr, col0:col0 + cc] = acc[:rr, :cc]
    return C


@pytest.mark.parametrize("params", [dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16),
                                    dict(BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=16),
                                    dict(BM=64, BN=64, WM=64, WN=64, TM=16, TN=8, BK=8),
                                    dict(BM=64, BN=64, WM=32, WN=64, TM=8, TN=8, BK=4)])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (65, 70, 33)])
def test_emulation_matches_numpy(params, shape):
    p = SPEC.validate(params)
    M, N, K = shape
    rng = np.random.default_rng(0)
    A, B = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    np.testing.assert_allclose(emulate(p, A, B), A @ B, rtol=1e-10, atol=1e-10)


def test_threads_and_smem():
    d = SPEC.defaults()
    assert SPEC.block(d) == (128, 1, 1)
    assert SPEC.smem_bytes(d) == 2 * (8 * 132 + 8 * 128) * 4
    assert SPEC.block(dict(d, BM=256)) == (256, 1, 1)


def test_lanes_rule():
    with pytest.raises(ConfigError, match="must be 32"):
        SPEC.validate(dict(TM=8, TN=8))


def test_loads_rule():
    with pytest.raises(ConfigError, match="float4"):
        SPEC.validate(dict(BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=4))


def test_variants_valid_and_sweep_small():
    for v in ws.VARIANTS:
        SPEC.validate(v)
    from helpers.specs import sweeps

    assert len(sweeps()["warptiling"]) <= 30


@pytest.mark.parametrize("params", [{}, dict(BM=256, BN=128), dict(BM=128, BN=256, TM=8, TN=16)])
def test_no_spills(params):
    res = pytest.importorskip("helpers.resources")
    try:
        r = res.resources("warptiling", params)
    except res.ToolMissing as exc:
        pytest.skip(str(exc))
    assert not r.spills and r.registers <= 255
