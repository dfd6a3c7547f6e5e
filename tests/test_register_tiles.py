"""2D register tiles: what a tile buys and costs, the heatmap that marks why a tile is ruled out,
the per-slice instruction model of kernels 06 and 07, float4 paths, and their figures."""
import pytest

from helpers import hardware
from helpers.figures import registers as register_figures
from helpers.models import register_tiles as rt
from helpers.runtime import offline
from helpers.figures import style

H200 = hardware.Device.from_datasheet("NVIDIA H200")


@pytest.mark.parametrize("TM,TN,ratio", [(1, 1, 0.5), (8, 1, 8 / 9), (4, 4, 2), (8, 8, 4), (16, 8, 128 / 24)])
def test_fma_per_shared_load(TM, TN, ratio):
    assert rt.fma_per_load(TM, TN) == pytest.approx(ratio)


def test_live_registers():
    assert rt.live_registers(8, 8) == 64 + 16


@pytest.mark.parametrize("TM,TN,why", [(1, 1, "too many threads"), (4, 4, "fits"), (8, 8, "fits"),
                                       (16, 8, "fits"), (16, 16, "needs more registers")])
def test_why_a_tile_is_ruled_out(TM, TN, why):
    c = rt.tile_cost(128, 128, TM, TN, H200)
    assert c.why == why and c.fits == (why == "fits")


def test_tile_cost_numbers():
    c = rt.tile_cost(128, 128, 8, 8, H200)
    assert (c.threads, c.live, c.budget) == (256, 80, 128)        # two 256-thread blocks per SM
    assert c.needed <= c.budget
    assert rt.tile_cost(128, 128, 16, 8, H200).budget == 255      # 128 threads: the per-thread maximum
    assert rt.tile_cost(128, 128, 1, 1, H200).budget == 0         # 16384 threads: no budget at all
    odd = rt.TileCost(1, 1, 48, 0.5, 3, 10, 100, 1024, 32)
    assert odd.why == "not whole warps"


def test_tile_cost_table():
    t = rt.tile_cost_table(128, 128, [(8, 8), (16, 16)], H200)
    assert [r["verdict"] for r in t.rows] == ["fits", "needs more registers"]
    assert t.rows[0]["FMA per shared load"] == 4.0


def test_fma_heatmap_marks_the_reason_and_keeps_its_title_short():
    fig = register_figures.fma_heatmap(128, 128, H200)
    text = [c for row in fig.data[0].text for c in row]
    assert sum("✗ threads" in c for c in text) > 0 and sum("✗ registers" in c for c in text) > 0
    assert not any("✗ registers" in c for c in fig.data[0].text[0])      # TM = 1: threads, not registers
    assert fig.data[0].text[4][4].endswith("✗ registers")                 # 16 x 16
    assert "✗" not in fig.data[0].text[3][3]                              # 8 x 8 fits
    assert len(fig.layout.title.text) <= 45


def test_slice_instructions():
    s = rt.slice_instructions("thread_tile_2d")
    assert s == {"FFMA": 1024, "LDS.128": 64, "LDG": 16, "STS": 16}
    v = rt.slice_instructions("vectorized")
    assert v == {"FFMA": 1024, "LDS.128": 64, "LDG.128": 4, "STS": 8, "STS.128": 2}
    assert "drop from 32 (2D thread tiles) to 14" in str(rt.slice_text("thread_tile_2d", "vectorized"))
    t = rt.slice_table(["thread_tile_2d", "vectorized"])
    assert [r["memory instructions"] for r in t.rows] == [96, 78]


def test_slice_figure():
    fig = register_figures.slice_figure(["thread_tile_2d", "vectorized"])
    assert [list(t.y) for t in fig.data] == [[16, 0, 16, 0, 64], [0, 4, 8, 2, 64]]
    assert "1024 FFMA each" in style.plain(fig.layout.title.text)


def test_memory_ops_counts_by_width():
    text = """
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E R8, desc[UR4][R6.64] ;
        /*0030*/                   STS.128 [R0], R4 ;
        /*0040*/                   LDS.128 R12, [R1] ;
        /*0050*/              @!P0 STG.E.128 desc[UR4][R2.64], R12 ;
    """
    ops = rt.memory_ops(text)
    assert (ops["LDG.128"], ops["LDG"], ops["STS.128"], ops["LDS.128"], ops["STG.128"]) == (1, 1, 1, 1, 1)
    assert ops["STS"] == 0


@pytest.mark.parametrize("shape,paths", [((256, 256, 256), (True, True, True)), ((256, 256, 255), (False, True, True)),
                                         ((256, 255, 256), (True, False, False)), ((255, 256, 256), (True, True, True))])
def test_vector_paths(shape, paths):
    assert tuple(rt.vector_paths(*shape).values()) == paths
    assert not any(rt.vector_paths(*shape, aligned=False).values())


def test_thread_map_table():
    t = rt.thread_map_table(None, tids=(0, 16, 255))
    assert t.rows[0]["rows of C"] == "0..7" and t.rows[1]["rows of C"] == "8..15"
    assert t.rows[2]["columns of C"] == "120..127" and t.rows[2]["loads Bs column"] == 127
    assert t.rows[0]["of rows"] == "0, 16, 32, ... 112"           # 256 threads sweep a 16-wide A tile


def _row(M, N, K, tflops, params):
    return {"kernel": "vectorized", "params": params, "M": M, "N": N, "K": K, "tflops": tflops,
            "cublas_tflops": 50.0, "ok": True, "ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0}


def test_odd_shapes_table():
    d = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8}
    rows = [_row(4096, 4096, 4096, 37, d), _row(4096, 4096, 4095, 35, d), _row(4096, 4095, 4096, 34, d),
            _row(2048, 2048, 2048, 30, d), _row(4096, 4096, 4096, 20, dict(d, BK=8))]
    t = rt.odd_shapes_table(rows, d, 4096)
    assert [r["M x N x K"] for r in t.rows] == ["4096 x 4096 x 4096", "4096 x 4096 x 4095", "4096 x 4095 x 4096"]
    assert [(r["A"], r["B and C"]) for r in t.rows] == [("float4", "float4"), ("scalar", "float4"), ("float4", "scalar")]
    assert rt.odd_shapes_table(rows, d).rows == t.rows          # the largest recorded size by default


def test_reuse_scatter():
    rows = [dict(_row(4096, 4096, 4096, 30, {"TM": tm, "TN": tn}), kernel="thread_tile_2d") for tm, tn in ((4, 4), (8, 8))]
    fig = register_figures.reuse_scatter(rows, "src", "t")
    assert list(fig.data[0].x) == [2, 4] and list(fig.data[1].y) == [50.0, 50.0]


def test_budget_text():
    text = str(rt.budget_text("thread_tile_2d", [{}], H200))
    assert "256 threads and asks for 2 blocks per SM: 128 registers per thread" in text


def test_memory_ops_of_the_compiled_kernels():
    pytest.importorskip("cuda.bindings")
    try:
        t = rt.memory_ops_table(["thread_tile_2d", "vectorized"], H200)
    except offline.ToolMissing as exc:
        pytest.skip(str(exc))
    loop2d, loopv = t.rows[1], t.rows[3]
    assert loop2d["LDG.128"] == 0 and loop2d["LDG"] > 0 and loop2d["LDS"] == 0 and loop2d["LDS.128"] > 0
    assert loopv["LDG.128"] > 0 and loopv["STS.128"] > 0 and loopv["LDS.128"] == loop2d["LDS.128"]
    assert t.rows[2]["STG.128"] > 0
