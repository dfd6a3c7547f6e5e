"""The prose of the chapter "Vectorized float4 access" against the recorded data and the offline
compile: each test fails when the data (or the compiler) says otherwise."""
import pytest

from helpers.measure.results import recorded
from helpers.models import register_tiles
from helpers.runtime import offline, sass


@pytest.fixture(scope="module")
def ve():
    return recorded("vectorized")



def test_every_recorded_row_is_correct(ve):
    assert ve.all_correct


def test_a_quarter_of_the_global_loads_and_fewer_shared_stores():
    """Summary: 'the load phase needs a quarter of the global-load instructions and fewer shared stores'."""
    s, v = register_tiles.slice_instructions("thread_tile_2d"), register_tiles.slice_instructions("vectorized")
    assert 4 * v["LDG.128"] == s["LDG"]
    assert v["STS"] + v["STS.128"] < s["STS"]


def test_ffma_was_already_the_large_majority():
    """'FFMA was already the large majority of a slice's instructions before.'"""
    for name in ("thread_tile_2d", "vectorized"):
        c = register_tiles.slice_instructions(name)
        assert c["FFMA"] / sum(c.values()) > 0.9


def test_the_machine_code_has_the_wide_accesses(ve, nvrtc):
    """'Shared reads are LDS.128 in both ... The transposed store of A shows as 32-bit STS, B's as STS.128;
    C is written with STG.E.128 where aligned.'"""
    ops = {}
    for name in ("thread_tile_2d", "vectorized"):
        text = offline.sass(name, None, ve.device)
        ops[name] = (register_tiles.memory_ops(sass.inner_loop(text)), register_tiles.memory_ops(text))
    (loop2d, _), (loopv, wholev) = ops["thread_tile_2d"], ops["vectorized"]
    assert loop2d["LDS.128"] == loopv["LDS.128"] > 0 and loop2d["LDS"] == loopv["LDS"] == 0
    assert loopv["STS"] > 0 and loopv["STS.128"] > 0 and loopv["LDG.128"] > 0 and wholev["STG.128"] > 0


def test_m_never_matters_for_the_vector_paths():
    assert register_tiles.vector_paths(4095, 4096, 4096) == register_tiles.vector_paths(4096, 4096, 4096)


def test_the_picture_paragraph():
    """Chapter: 'Rows of 32 floats or more are read whole, four full segments per instruction. ... with BK = 8,
    each 128-byte segment the warp touches is only a quarter used.'"""
    from helpers.figures.pictures_mid import float4_cells
    for w in (32, 64, 128):
        c = float4_cells(w)
        assert c["segments"] == 4 and c["used"] == 1
    assert float4_cells(8)["used"] == 0.25
