"""Warp tiling: the spec's rules, a NumPy emulation of the index math of kernels/10_warptiling.cu
(loads, transposed stores, fragments, stores), and the chapter's figures and sentences
(helpers.figures.warptiling) on synthetic counters."""
import numpy as np
import pytest

from helpers.figures import warptiling as fig
from helpers.figures.banks import titles
from helpers.hardware import Device
from helpers.measure import ncu
from helpers.measure.results import ResultSet
from helpers.models.banks import fragment_wavefronts
from helpers.runtime.spec import ConfigError, cdiv
from helpers.runtime.specs import get
from helpers.runtime.specs import warptiling as ws

SPEC = get("warptiling")
H200 = Device.from_datasheet("NVIDIA H200")


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
    gx, gy, _ = SPEC.grid(p, M, N, K, H200)
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


def test_threads_smem_and_rules():
    d = SPEC.defaults()
    assert SPEC.block(d) == (128, 1, 1) and SPEC.block(dict(d, BM=256)) == (256, 1, 1)
    assert SPEC.smem_bytes(d) == 2 * (8 * 132 + 8 * 128) * 4
    with pytest.raises(ConfigError, match="must be 32"):
        SPEC.validate(dict(TM=8, TN=8))
    with pytest.raises(ConfigError, match="float4"):
        SPEC.validate(dict(BM=32, BN=64, WM=16, WN=32, TM=4, TN=4, BK=4))
    for v in ws.VARIANTS:
        SPEC.validate(v)


# ------------------------------------------------------------ figures
def test_tiling_figure_draws_each_config_to_scale():
    f = fig.tiling_figure(ws.VARIANTS)
    assert len(f.layout.sliders[0].steps) == len(ws.VARIANTS) and len(f.data) == 4 * len(ws.VARIANTS)
    first = [t for t in f.data if t.visible]
    assert first[0].name == "4 warp tiles of 64x64" and first[2].name.startswith("lane 0: 16x8")
    xs = [x for x in first[2].x if x is not None]          # lane 0's pieces: columns 0..4 and 32..36
    assert min(xs) == 0 and max(xs) == 36
    assert f.layout.sliders[0].currentvalue.font.color == "#222"
    assert all(len(t) <= 48 for t in titles(f))


def counters(n=1024, per_instruction=2.0, store_conflicts=100):
    """warptiling_ncu-like rows for the default config: the LDS.128 count the model expects."""
    p = SPEC.defaults()
    f = fragment_wavefronts("warptiling", p)
    warps = (n // p["BM"]) * (n // p["BN"]) * SPEC.threads(p) // 32
    inst = f["lds_per_thread"] * warps * n
    vals = {"load instructions": inst, "load wavefronts": int(per_instruction * inst), "load bank conflicts": 0,
            "store instructions": 1000, "store wavefronts": 1600, "store bank conflicts": store_conflicts}
    metric = {v: k for k, v in ncu.SHORT.items()}
    return [{"kernel": "warptiling", "params": p, "label": SPEC.label(p), "M": n, "N": n, "K": n,
             "metric": metric[k], "value": v} for k, v in vals.items()]


WORK = [("09 two stages", "double_buffering", {}), ("10 warp tiles", "warptiling", {})]


def test_work_rows_normalise_the_counters(monkeypatch):
    monkeypatch.setattr(fig, "results", lambda chapter: ResultSet(chapter, counters() if chapter == "warptiling_ncu"
                                                                  else [], H200, "synthetic", False))
    rows = {r["kernel"]: r for r in fig.work(WORK)}
    assert rows["10 warp tiles"]["measured"] == pytest.approx(1000 * 2.0 * 6 / 128)    # 6 LDS.128 per 128 FFMA
    assert rows["10 warp tiles"]["chunk model"] == pytest.approx(1000 * 6 / 128)
    assert rows["10 warp tiles"]["quarter-warp model"] == pytest.approx(1000 * 24 / 128)
    assert rows["09 two stages"]["measured"] is None
    assert "not recorded here for: 09 two stages" in str(fig.work_text(WORK))
    assert "0 load and 100 store wavefronts" in str(fig.conflicts_text(WORK))
    f = fig.work_figure(WORK)
    assert len(f.data) == 3 and list(f.data[2].text) == ["not profiled", "94"]


def test_work_text_compares_measured_with_both_models(monkeypatch):
    def fake(chapter):
        if chapter == "warptiling_ncu":
            return ResultSet(chapter, counters(per_instruction=2.0), H200, "synthetic", False)
        rows = []                     # kernel 08, BK = 8, split + swizzle: 3 wavefronts per LDS.128
        p = {"BK": 8, "SPLIT": 1, "PAD": 0, "SWIZZLE": 1}
        inst = 2 ** 21
        metric = {v: k for k, v in ncu.SHORT.items()}
        for k, v in {"load instructions": inst, "load wavefronts": 3 * inst, "load bank conflicts": 0,
                     "store instructions": 1, "store wavefronts": 1, "store bank conflicts": 0}.items():
            rows.append({"kernel": "bank_conflicts", "params": p, "label": "x", "M": 1024, "N": 1024, "K": 1024,
                         "metric": metric[k], "value": v})
        return ResultSet(chapter, rows, H200, "synthetic", False)

    monkeypatch.setattr(fig, "results", fake)
    text = str(fig.work_text(WORK))
    assert "**0.50x**" in text and "chunk model predicted 0.50x, the quarter-warp model 0.75x" in text
    assert "188 wavefronts per 1000 FFMA measured (3 per LDS.128)" in text
    assert "nearer the chunk model's" in text            # 0.50x measured, as the chunk model says
    assert "from 3 to 2 (0.67x), and the `LDS.128` per FFMA 0.75x: most of the saving comes from fewer wavefronts" in text


def test_best_text_and_roofline():
    def r(p, t):
        ms = 2 * 4096 ** 3 / (t * 1e12) * 1e3
        return {"kernel": "warptiling", "params": SPEC.resolve(p), "M": 4096, "N": 4096, "K": 4096, "tflops": t,
                "ms": ms, "ms_p20": ms, "ms_p80": ms, "cublas_tflops": 51.0, "ok": True, "rel_err": 0.0}
    rows = [r(ws.VARIANTS[0], 45.0), r(ws.VARIANTS[3], 44.0), r(ws.VARIANTS[5], 40.0), r(ws.VARIANTS[7], 37.0)]
    text = str(fig.best_text(ResultSet("warptiling", rows, H200, "synthetic", False)))
    assert "the fastest is **128x128x8 w64x64 t16x8**, 45.0 TFLOP/s" in text
    assert "The 2 configs with more than 64 results per thread run 44.0-45.0 TFLOP/s" in text
    f = fig.roofline_configs(rows, H200, "synthetic")
    assert len(f.layout.updatemenus[0].buttons) == 4          # few configs: a menu
    xs = sorted({t.x[0] for t in f.data if t.name and t.name.startswith(("64x64", "128x128", "256x128"))})
    assert len(xs) == 3                 # three block tiles, three intensities


@pytest.mark.parametrize("sources, said", [
    ({"warptiling_ncu": "recorded on A, day 2", "bank_conflicts_ncu": "recorded on A, day 1"},
     "counters of chapter 8 recorded on A, day 1; of chapter 10 recorded on A, day 2"),
    ({"warptiling_ncu": "recorded on A, day 2", "bank_conflicts_ncu": "recorded on A, day 2"},
     "counters recorded on A, day 2"),
    ({"warptiling_ncu": "recorded on A, day 2"}, "counters recorded on A, day 2"),
    ({}, "counters not recorded")])
def test_the_work_figure_says_which_chapter_each_record_of_counters_is(monkeypatch, sources, said):
    monkeypatch.setattr(fig, "source_of", sources.get)
    assert fig.counters_source() == said
