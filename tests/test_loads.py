"""Loads per result (model), the PTX and SASS of the 1D-tile kernel's loop (offline compile), the two
loop orders compared on timing rows, and the source article's 1080 Ti table."""
import pytest

from helpers import hardware
from helpers.models import history, loads

H200 = hardware.Device.from_datasheet("NVIDIA H200")
K = 4096



# ------------------------------------------------------------------ the model
def test_loads_per_result_match_the_articles_counts():
    smem = loads.per_result("smem_tiling", {"TILE": 32}, K)
    assert smem["global"] == K / 16 and smem["shared"] == 2 * K
    tt = loads.per_result("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 8, "TM": 8}, K)
    assert tt["global"] == K / 32 and tt["shared"] == K * 9 / 8
    assert loads.per_result("thread_tile_1d", {"LOOP": 0}, K, as_written=True)["shared"] == 2 * K
    assert loads.per_result("coalescing", None, K)["global"] == 2 * K


@pytest.mark.parametrize("x,text", [(K / 16, "K/16"), (9 * K / 8, "9K/8"), (K, "K"), (2 * K, "2K"),
                                    (3 * K / 128, "3K/128")])
def test_as_fraction_of_K(x, text):
    assert loads.as_fraction_of_K(x, K) == text


def test_per_result_table():
    t = loads.per_result_table({"a": ("smem_tiling", {"TILE": 8}), "b": ("thread_tile_1d", {"TM": 16})}, K)
    assert t.rows[0]["global loads per result"] == "K/4" and t.rows[0]["shared loads per result"] == "2K"
    assert t.rows[0]["multiply-adds per shared load"] == 0.5
    assert t.rows[1]["shared loads per result"] == "17K/16"


def test_recorded_registers_and_band():
    assert loads.recorded_registers({"registers": 64}) == 64
    assert loads.recorded_registers({"extra": {"num_regs": 74}}) == 74
    assert loads.recorded_registers({"extra": {}}) is None
    row = {"M": 1000, "N": 1000, "K": 1000, "ms_p20": 1.0, "ms_p80": 2.0}
    assert loads.tflops_band(row) == pytest.approx((1.0, 2.0))


# ------------------------------------------------------------------ offline compile
def test_ptx_keeps_one_load_of_b_per_k_in_both_orders(nvrtc):
    for loop in (0, 1):
        step = loads.ptx_step("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "LOOP": loop}, H200)
        assert step.counts["ld.shared.f32"] == 8 * 8 + 8         # TM*BK of A, BK of B
        assert step.counts["fma.rn.f32"] == 64
        assert not any(k.startswith("ld.shared.v") for k in step.counts)
    listing = loads.ptx_listing("thread_tile_1d", {"BK": 8, "LOOP": 0}, H200, limit=5)
    assert str(listing).startswith("```text\n") and str(listing).count("\n") == 6


def test_sass_merges_a_into_128_bit_loads(nvrtc):
    c = loads.loop_counts("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 8, "TM": 8}, H200)
    per = c.k_per_pass // 8
    assert (c.counts["FFMA"] // per, c.counts["LDS"] // per, c.counts["LDS.128"] // per) == (64, 8, 16)
    assert c.shared_floats // per == 72
    t = loads.written_vs_compiled({"BK": 8}, H200)
    assert [r["shared reads as written"] for r in t.rows] == [128, 72]
    assert {(r["PTX ld.shared"], r["SASS LDS"], r["SASS LDS.128"], r["SASS FFMA"]) for r in t.rows} == {(72, 8, 16, 64)}


def test_smem_loop_and_shared_bound(nvrtc):
    t = loads.loop_table("smem_tiling", {"TILE": 32}, H200)
    row = t.rows[0]
    assert (row["FFMA"], row["LDS"], row["LDS.128"], row["BAR"]) == (32, 32, 8, 2)
    # 32 FFMA per 40 shared-load instructions, out of 4 warp-FFMAs per clock
    assert loads.shared_bound("smem_tiling", {"TILE": 32}, H200) == pytest.approx(H200.fp32_tflops * 32 / 40 / 4)


def test_order_difference_of_the_two_loop_orders(nvrtc):
    d = loads.order_difference({"BK": 32}, H200)
    assert d.same_counts and d.length[0] == d.length[1]
    assert 0 <= d.moved <= d.rewritten <= d.length[0]
    assert len(d.first) == min(8, d.rewritten)
    t = loads.order_table(d)
    assert list(t.columns) == ["position in the loop", "LOOP=0", "LOOP=1"]


def _row(bk, loop, tflops, band=0.01, regs=None):
    flop = 2 * 4096 ** 3 / 1e12
    ms = flop / tflops * 1e3
    r = {"kernel": "thread_tile_1d", "params": {"BM": 64, "BN": 64, "BK": bk, "TM": 8, "LOOP": loop},
         "M": 4096, "N": 4096, "K": 4096, "tflops": tflops, "ms": ms, "ms_p20": ms * (1 - band),
         "ms_p80": ms * (1 + band), "cublas_tflops": 50.0, "ok": True}
    if regs:
        r["registers"] = regs
    return r


def test_loop_order_rows_and_text(nvrtc):
    rows = [_row(8, 0, 16.0), _row(8, 1, 16.05), _row(32, 0, 15.0), _row(32, 1, 20.0)]
    data = loads.loop_order_rows(rows, H200)
    assert [d["params"]["BK"] for d in data] == [8, 32]
    assert [d["apart"] for d in data] == [False, True]
    text = str(loads.loop_order_text(rows, H200, "recorded on X"))
    assert "differ beyond the run-to-run spread at BK = 32" in text and "k-outer order is faster at BK = 32" in text
    assert "33% at BK = 32" in text and "At BK = 8 the two orders are within each other's spread" in text
    if any(a != b for a, b in (d["registers"] for d in data)):     # offline: the rows record none
        assert "gives the two orders different register counts" in text
    else:
        assert "do not record the registers" in text
    t = loads.loop_order_result_table(rows, H200)
    assert t.rows[1]["LOOP=1 / LOOP=0"] == pytest.approx(20 / 15, abs=1e-3)


def test_loop_order_text_with_recorded_registers(nvrtc):
    rows = [_row(32, 0, 15.0, regs=74), _row(32, 1, 20.0, regs=64)]
    text = str(loads.loop_order_text(rows, H200, "recorded"))
    assert "binaries that ran had different register counts at BK = 32" in text
    d = loads.loop_order_rows(rows, H200)[0]
    assert d["registers"] == (74, 64) and d["warps"] == (16, 32)      # 74 registers: one 512-thread block
    same = [_row(32, 0, 20.0, regs=64), _row(32, 1, 20.0, regs=64)]
    assert "speeds agree within the run-to-run spread" in str(loads.loop_order_text(same, H200, "r"))


def test_bound_text(nvrtc):
    smem = [dict(_row(32, 1, 8.0), kernel="smem_tiling", params={"TILE": 32, "SWAP": 1})]
    one = [_row(32, 1, 20.0)]
    text = str(loads.bound_text(smem, one, H200))
    assert text.startswith(f"The bound is {H200.fp32_tflops * 0.2:.1f} TFLOP/s for Shared-memory tiling")


# ------------------------------------------------------------------ history
def test_history_table_values():
    assert history.speedup("smem_tiling", 2048) == pytest.approx(228681 / 59048.4)
    assert not any("TFLOP/s if" in k for k in history.beside_ours({("naive", 512): {"tflops": 1.0},
                                                                    ("smem_tiling", 512): {"tflops": 2.0}}).rows[0])
    ours = {("naive", 1024): {"tflops": 0.5}, ("smem_tiling", 1024): {"tflops": 8.0},
            ("thread_tile_1d", 1024): {"tflops": 20.0}}
    t = history.beside_ours(ours)
    assert [(r["kernel"], r["n"]) for r in t.rows] == [("shared-memory tiles", 1024), ("1D thread tiles", 1024)]
    assert t.rows[0]["ours: speed-up over naive"] == 16.0
    assert t.rows[1]["GeForce GTX 1080 Ti: speed-up over naive"] == round(28424 / 894.779, 1)
    assert "UNIVERSAL_SGEMM_CUDA" in t.caption
    text = str(history.beside_text(ours, "thread_tile_1d"))
    assert "31.8-31.8 times" in text and "40.0-40.0 times" in text
