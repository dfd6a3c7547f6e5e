"""The shared-memory tiling models and figures: the emulated index math of the unguarded and the
guarded kernel, the tables and the failure map built from it, and the real kernels on the CPU."""
import sys
import types

import numpy as np
import pytest

from helpers.figures import tiling as tiling_figures
from helpers.models import tiling
from helpers.models.tiling import CLOBBERED, CORRECT, UNDEFINED, emulate_smem_tiling
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import get


def rand(M, N, K, seed=0):
    return tiling.operands(M, N, K, seed)


# ------------------------------------------------------------------ emulation
def test_unguarded_kernel_refuses_shapes_that_are_not_tile_multiples():
    u = get("smem_tiling_unguarded")
    u.check_shape({"TILE": 32}, 64, 4096, 32)
    with pytest.raises(ConfigError, match=r"K=777 must be a multiple of TILE=32"):
        u.check_shape({"TILE": 32}, 1024, 1024, 777)
    get("smem_tiling").check_shape({"TILE": 32, "SWAP": 1}, 7, 13, 5)   # the guarded kernel takes anything


def test_shape_verdict_is_one_sentence():
    refused = str(tiling.shape_verdict("smem_tiling_unguarded", 1000, 3000, 777, TILE=32))
    assert refused.startswith("**Refused.**") and "K=777 must be a multiple of TILE=32" in refused
    assert "Traceback" not in refused and "\n" not in refused
    assert str(tiling.shape_verdict("smem_tiling_unguarded", 64, 64, 64, TILE=32)).startswith("**Allowed:**")


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
    assert fig.layout.title.text == "40 x 40 x 32: 664 of 1600 elements correct"
    assert buttons[1].args[1]["title.text"] == "32 x 32 x 40: 0 of 1024 elements correct"
    assert "emulated index math" in fig.layout.title.subtitle.text
    names = {t.name for t in fig.data if t.visible}
    assert names == {"C", "correct", "overwritten by a stray store"}


def test_copies_text():
    text = str(tiling.copies_text("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 32, "TM": 8}, (1000, 3000, 777)))
    assert "512 threads" in text and "copies 4 floats of A and 4 floats of B" in text
    assert "grid is 47 x 16 blocks" in text
    small = str(tiling.copies_text("thread_tile_1d", {"BM": 64, "BN": 64, "BK": 4, "TM": 8}, (64, 64, 64)))
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
    assert g.grid({"TILE": 32, "SWAP": 1}, 1000, 3000, 777) == (32, 94, 1)   # x walks rows of C
    assert g.grid({"TILE": 32, "SWAP": 0}, 1000, 3000, 777) == (94, 32, 1)
    assert g.name_expression({"TILE": 8, "SWAP": 0}) == "sgemm_smem_tiling<8, 0>"
