"""Occupancy: the device model's calculator against hand-computed cases (compute capability 9.0),
the chapter tables and figures built on it, the stall profile figure, and on a GPU the driver's
own calculator."""
import pytest

from helpers import hardware
from helpers.runtime.specs import get as get_spec
from helpers.figures import occupancy as occupancy_figures
from helpers.models import occupancy as occ_model

H200 = hardware.Device.from_datasheet("NVIDIA H200")
RTX3090 = hardware.Device.from_datasheet("NVIDIA GeForce RTX 3090")


def occ(threads, regs, smem, device=H200):
    return hardware.occupancy(threads, regs, smem, device)


# ------------------------------------------------------------------ the rules
def test_register_limited():
    # 128 regs * 32 = 4096 per warp; 16384 per part -> 4 warps each, 16 per SM -> 2 blocks of 8
    o = occ(256, 128, 0)
    assert (o.blocks_per_sm, o.active_warps, o.limiter, o.fraction) == (2, 16, "registers", 0.25)


def test_register_allocation_granularity_and_parts():
    o = occ(256, 33, 0)     # 1056 per warp -> 1280; 12 warps per part, 48 per SM -> 6 blocks of 8
    assert o.detail["registers_per_warp"] == 1280 and (o.blocks_per_sm, o.limiter) == (6, "registers")
    assert (occ(64, 104, 0).blocks_per_sm, occ(64, 104, 0).active_warps) == (8, 16)   # whole warps per part


def test_1024_thread_block_is_all_or_nothing():
    assert occ(1024, 32, 0).blocks_per_sm == 2
    assert occ(1024, 33, 0).blocks_per_sm == 1
    assert (occ(1024, 65, 0).blocks_per_sm, occ(1024, 65, 0).limiter) == (0, "registers")


def test_shared_memory_allocation_unit_and_reserve():
    o = occ(32, 16, 100)    # 100 B + 1024 B reserve, rounded to 128 B: 1152 B; 233472 // 1152 = 202
    assert o.detail["smem_allocated_per_block"] == 1152 and o.by_limit["shared memory"] == 202
    o = occ(128, 32, 48 * 1024)
    assert (o.blocks_per_sm, o.limiter) == (4, "shared memory")


def test_other_device_limits():
    o = occ(128, 32, 32 * 1024, RTX3090)      # 100 KB per SM, 33 KB per block -> 3
    assert (o.blocks_per_sm, o.limiter) == (3, "shared memory")


def test_register_curve_steps():
    curve = occ_model.register_curve(1024, 0, H200)
    assert len(curve) == H200.max_registers_per_thread - 15
    assert [curve[r - 16].active_warps for r in (32, 33, 64, 65)] == [64, 32, 32, 0]


# ------------------------------------------------------------------ tables
def test_limits_table():
    t = occ_model.limits_table(H200)
    by = {r["resource"]: r for r in t.rows}
    assert by["warps"]["per SM"] == 64 and by["registers"]["per SM"] == 65536
    assert by["shared memory"]["per SM"] == "228 KB" and by["shared memory"]["per block"] == "227 KB (48 KB static)"
    assert by["blocks"]["per SM"] == 32


def test_cases_table_and_step_text():
    t = occ_model.cases_table([(1024, 32, 0), (1024, 33, 0)], H200)
    assert [r["resident warps"] for r in t.rows] == ["64/64", "32/64"]
    assert [r["limited by"] for r in t.rows] == ["warps", "registers"]
    text = str(occ_model.step_text(1024, (32, 33), H200))
    assert "at 32 registers per thread 2 blocks of 1024 threads fit (64 warps" in text
    assert "at 33 registers per thread 1 block of 1024 threads fits (32 warps, limited by registers)" in text



def test_configs_of_the_smem_kernel(nvrtc):
    for tile, blocks in ((8, 32), (16, 8), (32, 2)):
        res, o = occ_model.of_config("smem_tiling", {"TILE": tile}, H200)
        assert not res.spills and res.smem == 2 * tile * tile * 4
        assert (o.blocks_per_sm, o.active_warps) == (blocks, 64)
    t = occ_model.config_table("thread_tile_2d", [{}, {"BM": 256, "BN": 128, "TM": 16, "TN": 8}], H200)
    assert t.rows[0]["spilled bytes"] == 0 and t.rows[0]["threads"] == 256
    assert "registers" in t.rows[1]["refused because"] and "A valid alternative" not in t.rows[1]["refused because"]
    marks = occ_model.marks("smem_tiling", [{"TILE": 32}], H200)
    assert list(marks) == ["TILE=32"] and marks["TILE=32"][0] == 1024 and marks["TILE=32"][2] == 8192


def test_shared_memory_text(nvrtc):
    text = str(occ_model.shared_memory_text("smem_tiling", [{"TILE": 32}], H200))
    # 8192 B + 1024 B reserve = 9216 B per block, two blocks: 18 KB of 228 KB
    assert "2 resident blocks of 9,216 B" in text and "take 18 KB, 8% of the 228 KB" in text


# ------------------------------------------------------------------ figures
def test_explorer_has_one_menu_entry_per_block_size_and_the_marks():
    fig = occupancy_figures.explorer(H200, block_sizes=(256, 1024), marks={"TILE=32": (1024, 31, 8192)})
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["256 threads per block", "1024 threads per block"]
    mark = [t for t in fig.data if t.name.startswith("TILE=32")]
    assert len(mark) == 1 and mark[0].y[0] == 64 and mark[0].visible
    assert fig.layout.yaxis.range[1] > H200.max_warps_per_sm


def _smem_row(tile, tflops):
    return {"kernel": "smem_tiling", "params": {"TILE": tile, "SWAP": 1}, "M": 4096, "N": 4096, "K": 4096,
            "tflops": tflops, "cublas_tflops": 51.0, "ok": True, "ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0,
            "rel_err": 1e-7}


def test_by_config_figure(nvrtc):
    fig = occupancy_figures.by_config("smem_tiling", [_smem_row(32, 8.9), _smem_row(8, 5.1)], H200, "src", "TILE")
    assert [t.name for t in fig.data] == ["occupancy (% of the SM's warps)", "measured TFLOP/s", "cuBLAS, same run"]
    assert list(fig.data[0].x) == ["TILE=8", "TILE=32"] and list(fig.data[0].y) == [100.0, 100.0]
    assert fig.layout.yaxis.title.text == "occupancy (%)" and fig.layout.yaxis2.title.text == "TFLOP/s"


STALLS = [{"kernel": "smem_tiling", "label": "TILE=32", "issue_active": 40.0, "short_scoreboard": 1.0,
           "mio_throttle": 3.0, "barrier": 0.5, "selected": 1.0, "long_scoreboard": 0.2},
          {"kernel": "thread_tile_1d", "label": "64x64x32 TM=8", "issue_active": 55.5, "short_scoreboard": 6.0,
           "mio_throttle": 2.0, "barrier": 1.0, "selected": 1.0, "long_scoreboard": 0.5, "wait": 0.9}]


def test_stall_profile_figure_and_text():
    fig = occupancy_figures.stall_profile(STALLS, ["smem_tiling", "thread_tile_1d"], "src", top=3)
    assert [t.name.split(",")[0] for t in fig.data] == ["Shared-memory tiling", "1D thread tiles"]
    assert list(fig.data[1].y)[0].startswith("short scoreboard") and list(fig.data[1].y)[-1] == "everything else"
    assert list(fig.data[1].x) == [6.0, 2.0, 1.0, 0.9 + 0.5]
    text = str(occupancy_figures.stall_text(STALLS, "thread_tile_1d"))
    assert "issued an instruction in 56% of its active cycles" in text
    assert "a warp waited 10.4 cycles on average" in text and text.index("short scoreboard") < text.index("MIO throttle")
    assert "no row" in str(occupancy_figures.stall_text(STALLS, "vectorized"))


def test_show_stalls_without_recorded_profile(monkeypatch):
    from helpers.measure import datafile

    def missing(chapter):
        raise datafile.DataError("no stall_profile")
    monkeypatch.setattr(occupancy_figures, "results", missing)
    assert "No warp-stall profile is recorded" in str(occupancy_figures.show_stalls(["thread_tile_1d"]))


@pytest.mark.skipif(not hardware.gpu_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel,params", [("smem_tiling", {"TILE": 8}), ("smem_tiling", {"TILE": 32}),
                                           ("thread_tile_1d", {}), ("thread_tile_1d", {"BK": 64, "TM": 4})])
def test_matches_the_driver(kernel, params):
    """Our count equals cuOccupancyMaxActiveBlocksPerMultiprocessor for the kernel CuPy compiled."""
    from cupy_backends.cuda.api import driver

    from helpers.runtime.compile import compile_kernel
    from helpers.runtime.specs import get

    spec = get(kernel)
    full = spec.validate(params)
    k = compile_kernel(spec, full)
    theirs = driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, spec.threads(full), spec.smem_bytes(full))
    ours = hardware.occupancy(spec.threads(full), k.num_regs, spec.static_smem(full) + spec.smem_bytes(full),
                              hardware.current())
    assert ours.blocks_per_sm == theirs


@pytest.mark.parametrize("name", [s.name for s in __import__("helpers.runtime.specs", fromlist=["ALL"]).ALL
                                  if not s.broken])
def test_every_default_config_compiles_without_spills_and_fits_an_sm(name, nvrtc):
    res, o = occ_model.of_config(name, None, H200)
    assert 16 <= res.registers <= H200.max_registers_per_thread and not res.spills, str(res)
    assert res.arch in (H200.arch, get_spec(name).target) and o.blocks_per_sm >= 1
