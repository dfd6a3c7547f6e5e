"""The shared-memory tiling models and figures: the emulated index math of the unguarded and the
guarded kernel, the tables and the failure map built from it, and the real kernels on the CPU."""
import sys
import types

import numpy as np
import pytest

from helpers.figures import tiling as tiling_figures
from helpers.hardware import Device
from helpers.models import tiling
from helpers.models.tiling import CLOBBERED, CORRECT, UNDEFINED, emulate_smem_tiling
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import get

H200 = Device.from_datasheet("NVIDIA H200")


def rand(M, N, K, seed=0):
    return tiling.operands(M, N, K, seed)


# ------------------------------------------------------------------ emulation
def test_unguarded_kernel_refuses_shapes_that_are_not_tile_multiples():
    u = get("smem_tiling_unguarded")
    u.check_shape({"TILE": 32}, 64, 4096, 32, H200)
    with pytest.raises(ConfigError, match=r"K=777 must be a multiple of TILE=32"):
        u.check_shape({"TILE": 32}, 1024, 1024, 777, H200)
    get("smem_tiling").check_shape({"TILE": 32, "SWAP": 1}, 7, 13, 5, H200)   # the guarded kernel takes anything


def test_shape_verdict_is_one_sentence():
    refused = str(tiling.shape_verdict("smem_tiling_unguarded", 1000, 3000, 777, H200, TILE=32))
    assert refused.startswith("**Refused.**") and "K=777 must be a multiple of TILE=32" in refused
    assert "Traceback" not in refused and "\n" not in refused
    assert str(tiling.shape_verdict("smem_tiling_unguarded", 64, 64, 64, H200, TILE=32)).startswith("**Allowed:**")


@pytest.mark.parametrize("tile", (8, 32))
@pytest.mark.parametrize("swap", (0, 1))
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (33, 70, 40)], ids=lambda s: "x".join(map(str, s)))
def test_guarded_kernel_emulated_is_exact_and_in_bounds(tile, swap, shape):
    A, B = rand(*shape)
    em = emulate_smem_tiling(A, B, tile, swap, guarded=True)
    assert (em.writes == 1).all() and not em.stray.any()
    assert em.reads["A_reads_past_end"] == em.reads["B_reads_past_end"] == 0
    np.testing.assert_allclose(em.C, A.astype(np.float64) @ B, rtol=0, atol=1e-9)


def test_unguarded_kernel_is_exact_on_multiples():
    A, B = rand(64, 96, 32)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    assert all(v == 0 for v in em.reads.values())
    np.testing.assert_allclose(em.C, A.astype(np.float64) @ B, rtol=0, atol=1e-9)


def test_unguarded_kernel_fails_on_other_shapes():
    # K not a multiple: the last step reads rows of B past its end, for every element
    A, B = rand(32, 32, 40)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    cat = em.categories(A.astype(np.float64) @ B, 40)
    assert em.reads["B_reads_past_end"] > 0 and em.reads["A_reads_wrong_element"] > 0
    assert (cat == UNDEFINED).all()
    # N not a multiple: threads right of C store into the next row of C and past its end
    A, B = rand(40, 40, 32)
    em = emulate_smem_tiling(A, B, 32, guarded=False)
    cat = em.categories(A.astype(np.float64) @ B, 32)
    assert em.reads["stores_past_end_of_C"] > 0 and em.reads["stray_stores_into_C"] > 0
    assert (cat == CLOBBERED).sum() == em.reads["stray_stores_into_C"]
    assert (cat == CORRECT).any()
    # in a 40 x 40 C with TILE 32, row r < 39 receives the 24 stray columns of row r - 1
    assert em.reads["stray_stores_into_C"] == 39 * 24


def test_failure_table_counts():
    t = tiling.failure_table([(64, 96, 32), (40, 40, 32), (32, 32, 40)], TILE=32)
    ok, n_bad, k_bad = t.rows
    assert ok["elements correct"] == "6144 of 6144" and ok["stray stores into C"] == 0
    assert n_bad["stray stores into C"] == 39 * 24 and n_bad["stores past the end of C"] > 0
    assert k_bad["elements correct"] == "0 of 1024" and k_bad["reads past the end of A or B"] > 0
    assert "Emulated index math" in t.caption


def test_guarded_table():
    t = tiling.guarded_table([(40, 40, 32), (7, 13, 5)])
    assert all(r["every element written once"] and r["reads past the end"] == 0 for r in t.rows)
    assert all(r["largest error"] < 1e-9 for r in t.rows)


def test_failure_map_has_a_menu_of_shapes_and_a_legend_of_categories():
    fig = tiling_figures.failure_map(shapes=((40, 40, 32), (32, 32, 40)))
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["40x40x32", "32x32x40"]
    assert style.plain(fig.layout.title.text) == "40 x 40 x 32: 664 of 1600 elements correct"
    assert style.plain(buttons[1].args[1]["title.text"]) == "32 x 32 x 40: 0 of 1024 elements correct"
    assert "emulated index math" in fig.layout.title.subtitle.text
    names = {t.name for t in fig.data if t.visible}
    assert names == {"C", "correct", "overwritten by a stray store"}


def test_copies_text():
    text = str(tiling.copies_text("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 32, "TM": 8}, (1000, 3000, 777), H200))
    assert "512 threads" in text and "copies 4 floats of A and 4 floats of B" in text
    assert "grid is 47 x 16 blocks" in text
    small = str(tiling.copies_text("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 4, "TM": 8}, (64, 64, 64), H200))
    assert "one float for 50% of the threads" in small


# ------------------------------------------------------------------ on the CPU
@pytest.fixture
def fake_runner(monkeypatch):
    """A stand-in for helpers.runtime.cpu_cuda that computes A @ B with NumPy (the table logic, not g++)."""
    calls = []
    mod = types.ModuleType("helpers.runtime.cpu_cuda")

    class CompilerMissing(RuntimeError):
        pass

    def build(path, exprs, **kw):
        calls.append(("build", tuple(exprs)))

    def run(path, expr, grid, block, smem, args, offset_floats=0, **kw):
        M, N, K, A, B, C = args
        calls.append(("run", expr, grid, block, offset_floats))
        out = (A.astype(np.float64) @ B).astype(np.float32)
        if expr.endswith("<8, 1>"):
            out[0, 0] = np.nan          # a config that leaves an element unwritten
        threads = int(np.prod(block))
        return {"arrays": [None, None, None, A, B, out], "blocks": int(np.prod(grid)), "threads": threads,
                "barriers": 2}

    mod.CompilerMissing, mod.build, mod.run = CompilerMissing, build, run
    import helpers.runtime
    monkeypatch.setitem(sys.modules, "helpers.runtime.cpu_cuda", mod)
    monkeypatch.setattr(helpers.runtime, "cpu_cuda", mod, raising=False)
    monkeypatch.setattr(tiling, "cpu_cuda", mod)
    return calls


def test_cpu_check_table(fake_runner):
    t = tiling.cpu_check("smem_tiling", [(7, 13, 5), (33, 40, 20)], configs=[{"TILE": 16}, {"TILE": 8}])
    assert fake_runner[0] == ("build", ("sgemm_smem_tiling<16, 1>", "sgemm_smem_tiling<8, 1>"))
    run = [c for c in fake_runner if c[0] == "run"]
    assert run[0][2] == (1, 1, 1) and run[0][3] == (16, 16, 1)           # the spec's grid and block
    assert [r["correct"] for r in t.rows] == [True, True, False, False]
    assert t.rows[2]["elements never written"] == 1
    assert t.rows[1]["blocks x threads"] == "9 x 256"
    assert "kernels/04_smem_tiling.cu" in t.caption


def test_cpu_check_passes_the_offset(fake_runner):
    t = tiling.cpu_check("vectorized", [(8, 8, 8)], offset_floats=1)
    assert [c[-1] for c in fake_runner if c[0] == "run"] == [1]
    assert "4 bytes past an aligned address" in t.caption


def test_specs_and_grid_orders():
    g, u = get("smem_tiling"), get("smem_tiling_unguarded")
    assert g.defaults() == {"TILE": 32, "SWAP": 1} and u.defaults() == {"TILE": 32}
    assert g.block({"TILE": 16, "SWAP": 1}) == (16, 16, 1)
    assert g.grid({"TILE": 32, "SWAP": 1}, 1000, 3000, 777, H200) == (32, 94, 1)   # x walks rows of C
    assert g.grid({"TILE": 32, "SWAP": 0}, 1000, 3000, 777, H200) == (94, 32, 1)
    assert g.name_expression({"TILE": 8, "SWAP": 0}) == "sgemm_smem_tiling<8, 0>"


# ------------------------------------------------------------------ figures and texts from rows
from helpers import hardware  # noqa: E402
from helpers.measure.results import ResultSet  # noqa: E402
from helpers.figures import style

H200 = hardware.Device.from_datasheet("NVIDIA H200")


def row(kernel, params, n, tflops, band=0.01, cublas=50.0, shape=None):
    M, N, K = shape or (n, n, n)
    ms = 2 * M * N * K / 1e12 / tflops * 1e3
    return {"kernel": kernel, "params": params, "M": M, "N": N, "K": K, "tflops": tflops, "ms": ms,
            "ms_p20": ms * (1 - band), "ms_p80": ms * (1 + band), "cublas_tflops": cublas, "ok": True, "rel_err": 1e-7}


def smem_rows():
    out = []
    for t, g, u, c in ((8, 5.0, 5.1, 5.05), (32, 9.0, 9.3, 8.9)):
        out += [row("smem_tiling", {"TILE": t, "SWAP": 1}, 4096, g), row("smem_tiling_unguarded", {"TILE": t}, 4096, u),
                row("smem_tiling", {"TILE": t, "SWAP": 0}, 4096, c), row("smem_tiling", {"TILE": t, "SWAP": 1}, 1024, g / 2)]
    out.append(row("smem_tiling", {"TILE": 32, "SWAP": 1}, 4097, 8.1, cublas=44.0))
    return ResultSet("smem_tiling", out, H200, "recorded on X", False)


def test_largest_square_spread_and_guard_table():
    rs = smem_rows()
    assert {r["M"] for r in tiling_figures.largest_square(rs.rows)} == {4096}     # 4097 is not a round size
    assert tiling_figures.spread(rs.rows) == pytest.approx(2 / 1 * 100 * 0.01 / 1, rel=1e-9)
    t = tiling_figures.guard_table(rs)
    assert [r["TILE"] for r in t.rows] == [8, 32]
    assert t.rows[1]["cost of the guards"] == f"{100 * (1 - 9.0 / 9.3):+.1f}%"
    assert t.rows[0]["columns-first against rows-first"] == "+1.0%"
    text = str(tiling_figures.guard_text(rs))
    assert "at most 2.0%" in text and "4097 x 4097 x 4097" in text and "runs at 8.10 TFLOP/s (-10.0% against n = 4096)" in text


def test_roofline_and_ceilings_text():
    rows = [row("smem_tiling", {"TILE": 8, "SWAP": 1}, 4096, 5.0)]
    text = str(tiling_figures.roofline_text(rows, H200))
    assert f"meet at {H200.ridge:.1f} FLOP/byte" in text and "2.0 FLOP/byte, under the memory roof" in text
    pytest.importorskip("cuda.bindings")
    try:
        ceil = str(tiling_figures.ceilings_text(rows, H200))
    except Exception as exc:       # no offline tools here
        pytest.skip(str(exc))
    roof = H200.attainable(2.0)
    assert f"TILE=8: the roofline ({roof:.1f} TFLOP/s" in ceil and f"reached to {100 * 5.0 / roof:.0f}%" in ceil
    table = tiling_figures.ceilings_table(rows, H200).rows[0]
    assert table["FLOP/byte"] == 2.0 and table["roofline (TFLOP/s)"] == round(roof, 1)
    assert table["lower ceiling"] == "roofline" and table["% of the lower"] == round(100 * 5.0 / roof)


def test_roofline_configs_steps():
    rows = [row("thread_tile_1d", {"BM": 64, "BN": 64, "BK": bk, "TM": 8, "LOOP": 1}, 4096, t)
            for bk, t in ((8, 16.0), (16, 18.0), (32, 20.0), (64, 17.0))]
    rows += [row("thread_tile_1d", {"BM": 128, "BN": 128, "BK": 8, "TM": 32, "LOOP": 1}, 4096, 19.0),
             row("thread_tile_1d", {"BM": 128, "BN": 64, "BK": 16, "TM": 16, "LOOP": 1}, 4096, 17.5),
             row("thread_tile_1d", {"BM": 128, "BN": 64, "BK": 32, "TM": 16, "LOOP": 1}, 4096, 18.5)]
    fig = tiling_figures.roofline_configs(rows, H200, "src")
    # the y axis spans the ticks it was given: at least two of them show
    lo, hi = (10 ** v for v in fig.layout.yaxis.range)
    assert sum(lo <= t <= hi for t in fig.layout.yaxis.tickvals) >= 2
    steps = fig.layout.sliders[0].steps                   # 7 configs: a slider, not a menu
    assert len(steps) == 7 and not fig.layout.updatemenus
    assert fig.layout.sliders[0].active == 3              # sorted by intensity, then speed: the fastest
    assert style.plain(fig.layout.title.text).startswith("64x64x32 TM=8: 15.9 FLOP/byte, 20.0 TFLOP/s")
    assert sum(1 for t in fig.data if t.visible) == 4      # roof, the others, cuBLAS, the chosen one
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_grid_fastest_and_fill_texts():
    rows = [row("thread_tile_1d", {"BM": 64, "BN": 64, "BK": bk, "TM": tm, "LOOP": 1}, 4096, tm * bk / 10)
            for tm in (4, 8) for bk in (8, 16)]
    text = str(tiling_figures.grid_text(rows))
    assert "fastest cell is 64x64x16 TM=8 at 12.8" in text and "TM = 4 peaks at BK = 16 (6.4)" in text
    assert "Fastest at n = 4096: 64x64x16 TM=8, 12.8 TFLOP/s (26% of cuBLAS)" in str(tiling_figures.fastest_text(rows))
    slow = rows[0]["params"]                                     # 64x64x8 TM=4, the slowest
    ranked = str(tiling_figures.fastest_text(rows, default=slow))
    assert "The kernel's default, 64x64x8 TM=4, ranks 4 of 4 at 3.2 TFLOP/s, 75% behind the fastest" in ranked
    assert "default" not in str(tiling_figures.fastest_text(rows, default=rows[-1]["params"]))   # the fastest
    d = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8}
    fill = str(tiling_figures.grid_fill_text([row("thread_tile_2d", d, 1024, 12.0), row("thread_tile_2d", d, 4096, 35.0)], H200))
    assert f"n = 1024: 64 blocks ({64 / H200.sm_count:.1f} per SM)" in fill and "n = 4096: 1,024 blocks" in fill


def test_loads_figure():
    fig = tiling_figures.loads_figure({"a": ("smem_tiling", {"TILE": 32}), "b": ("thread_tile_1d", {"TM": 8})}, 4096)
    assert [t.name for t in fig.data] == ["from global memory", "from shared memory"]
    assert list(fig.data[0].text) == ["K/16", "K/32"] and list(fig.data[1].text) == ["2K", "9K/8"]
    assert fig.layout.xaxis.type == "log"


def test_params_heatmap():
    pytest.importorskip("cuda.bindings")
    rows = [row("thread_tile_1d", {"BM": 64, "BN": 64, "BK": bk, "TM": tm, "LOOP": 1}, 4096, tm + bk / 10)
            for tm in (4, 8) for bk in (8, 16)]
    try:
        fig = tiling_figures.params_heatmap(rows, H200, "src", title="t")
    except Exception as exc:
        pytest.skip(str(exc))
    assert list(fig.data[0].x) == ["8", "16"] and list(fig.data[0].y) == ["4", "8"]
    assert fig.data[0].z[1][1] == 9.6 and "warps" in fig.data[0].text[1][1]


def test_steps_at_and_previous_step(monkeypatch):
    data = {("coalescing", 4096): row("coalescing", {"BX": 64, "BY": 4, "SWAP": 1}, 4096, 6.0),
            ("smem_tiling", 4096): row("smem_tiling", {"TILE": 32, "SWAP": 1}, 4096, 9.0),
            ("smem_tiling", 1024): row("smem_tiling", {"TILE": 32, "SWAP": 1}, 1024, 8.0)}

    def fake_step(kernel, n=4096, params=None):
        if (kernel, n) not in data:
            raise KeyError(n)
        return data[(kernel, n)], "recorded on X"
    monkeypatch.setattr(tiling_figures, "step", fake_step)
    got = tiling_figures.steps_at(["smem_tiling", "naive"], (512, 1024, 4096))
    assert sorted(got) == [("smem_tiling", 1024), ("smem_tiling", 4096)]
    fig = tiling_figures.previous_step("coalescing", "smem_tiling")
    assert style.plain(fig.layout.title.text) == "n = 4096: 1.50x the previous step"
    names = [a.text for a in fig.layout.annotations]
    assert names[1] == "Shared-memory tiling, TILE=32" and names[0].startswith("Coalesced")
    assert [t.split("</b>")[0] for t in fig.data[0].text] == ["<b>6.0", "<b>9.0"]


def test_why_table():
    pytest.importorskip("cuda.bindings")
    try:
        t = tiling_figures.why_table(smem_rows(), H200)
    except Exception as exc:
        pytest.skip(str(exc))
    assert [r["config"] for r in t.rows] == ["TILE=8", "TILE=32"]
    assert [r["global loads per result"] for r in t.rows] == ["K/4", "K/16"]
    assert t.rows[0]["barriers per k"] > t.rows[1]["barriers per k"]
    assert [r["FFMA per shared-load instruction"] for r in t.rows] == [0.8, 0.8]
    assert [r["TFLOP/s"] for r in t.rows] == [5.0, 9.0]
