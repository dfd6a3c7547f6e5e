"""The chapter "On the CPU" states facts about the machine that runs it. They are computed
there; these tests check that the sentences follow the measurements, including the cases
where a step does not gain, and that the prose itself asserts nothing about a machine."""
import re
from pathlib import Path

import pytest

from helpers.figures import cpu as figures
from helpers.models import cpu as model
from helpers.runtime import cpu
from test_cpu import YMM_SPILL_LOOP, ZMM_LOOP, rows_of

CHAPTER = Path(__file__).resolve().parents[1] / "book" / "01_cpu.md"
CACHES = {"L1": 32768, "L2": 2**19, "L3": 2**25, "line": 64, "source": "this machine"}
PLAN = {"MR": 4, "NR": 4, "KC": 512, "NC": 128}


def prose() -> str:
    """The chapter's Markdown outside code cells, fenced code and admonitions."""
    text = re.sub(r"```\{code-cell\}.*?```", "", CHAPTER.read_text(), flags=re.S)
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_prose_states_no_cache_size_speed_or_vector_width_of_a_machine():
    text = prose()
    assert not re.search(r"\d+(\.\d+)?\s*(KB|MB|KiB|MiB|GHz)\b", text), "cache sizes and clocks come from the page"
    assert not re.search(r"\d+(\.\d+)?\s*GFLOP/s", text), "speeds come from the timing rows"
    assert "1 MB L2" not in text and "AVX-512 loop" not in text


def test_the_steps_say_where_one_is_slower_and_why():
    """The reported case: at n = 512 the tiled kernel (37.8) is slower than the register block (59.8)."""
    speeds = {("4x4 register block", 256): 50.0, ("tiled, packed B", 256): 30.0,
              ("4x4 register block", 512): 59.8, ("tiled, packed B", 512): 37.8,
              ("4x4 register block", 1024): 40.0, ("tiled, packed B", 1024): 60.0}
    spills = cpu.loop_stats(YMM_SPILL_LOOP)
    at = {r["n"]: r for r in model.steps(rows_of(speeds), PLAN, CACHES, {"tile": spills})}
    assert at[1024]["verdict"] == "faster" and at[1024]["why"] == ""
    assert at[512]["verdict"] == "slower"
    assert at[512]["why"] == "its compiled loop keeps values on the stack (1 loads and 2 stores per iteration)"
    assert at[256]["verdict"] == "slower" and "already fits in the 512 KB L2" in at[256]["why"]
    assert "after only 32 iterations" in at[256]["why"]           # kc = 256 values of k, 8 floats per vector
    # the same rows from a loop that does not spill: at 512 nothing measured explains the loss, and the text says so
    clean = {r["n"]: r for r in model.steps(rows_of(speeds), PLAN, CACHES, {"tile": cpu.loop_stats(ZMM_LOOP)})}
    assert clean[512]["why"].startswith("nothing this page measures explains it")


def test_the_text_never_says_every_n_when_one_is_slower():
    speeds = {("ikj (reordered)", n): 10.0 for n in (64, 128)} | {("ikj, k unrolled x4", 64): 20.0,
                                                                   ("ikj, k unrolled x4", 128): 8.0}
    text = str(figures.steps_text(rows_of(speeds)))
    assert "at every n" not in text
    assert "at n = 64, but not everywhere" in text and "at n = 128 it is slower (10 → 8 GFLOP/s)" in text
    busy = {("tiled, packed B", n): 10.0 for n in (128, 256)} | {("tiled, parallel", n): 8.0 for n in (128, 256)}
    grouped = str(figures.steps_text(rows_of(busy), {"cores": 2, "parallel_overhead_s": 1e-9, "load_average": 50.0}))
    assert "at n = 128, 256 it is slower (10 → 8; 10 → 8 GFLOP/s): the machine had other work" in grouped
    speeds[("ikj, k unrolled x4", 128)] = 20.0
    assert "at every n timed (2× to 2×)" in str(figures.steps_text(rows_of(speeds)))


def test_spills_are_named_as_the_reason():
    speeds = {("4x4 register block", 2048): 50.0, ("tiled, packed B", 2048): 30.0}
    tile = cpu.loop_stats(YMM_SPILL_LOOP)
    (step,) = model.steps(rows_of(speeds), PLAN, CACHES, {"tile": tile})
    assert step["verdict"] == "slower" and "1 loads and 2 stores per iteration" in step["why"]


def test_unrolling_is_explained_by_where_b_lives():
    speeds = {("ikj (reordered)", 1024): 30.0, ("ikj, k unrolled x4", 1024): 29.0}
    (step,) = model.steps(rows_of(speeds), PLAN, CACHES)
    assert step["verdict"] == "no clear difference"
    assert "all of B (4 MB) does not fit in the 32 KB L1: B comes from the L3" in step["why"]


def test_parallel_overhead_and_load_are_reasons_only_when_measured():
    speeds = {("tiled, packed B", 64): 30.0, ("tiled, parallel", 64): 10.0}
    rows = rows_of(speeds)
    (cheap,) = model.steps(rows, PLAN, CACHES, {"cores": 2, "parallel_overhead_s": 1e-4})
    assert "costs 100 µs per call" in cheap["why"]
    (busy,) = model.steps(rows, PLAN, CACHES, {"cores": 2, "parallel_overhead_s": 1e-9, "load_average": 9.5})
    assert "load average was 9.5" in busy["why"]
    (unknown,) = model.steps(rows, PLAN, CACHES, {"cores": 2, "parallel_overhead_s": 1e-9, "load_average": 0.5})
    assert unknown["why"].startswith("nothing this page measures explains it")
    # a small fixed cost does not explain a call a thousand times slower: the load does, or nothing
    far = rows_of({("tiled, packed B", 64): 10.0, ("tiled, parallel", 64): 0.01})
    (step,) = model.steps(far, PLAN, CACHES, {"cores": 2, "parallel_overhead_s": 1.4e-6, "load_average": 100.0})
    assert "load average was 100.0" in step["why"]


def test_noisy_but_higher_median_is_called_noise():
    rows = [{"name": "ijk", "n": 64, "s": 1, "gflops": 1.0, "gflops_p20": 0.8, "gflops_p80": 1.2},
            {"name": "ikj (reordered)", "n": 64, "s": 1, "gflops": 1.1, "gflops_p20": 0.5, "gflops_p80": 3.0}]
    (step,) = model.steps(rows, PLAN, CACHES)
    assert step["verdict"] == "no clear difference" and "bands overlap (0.8-1.2 and 0.5-3 GFLOP/s)" in step["why"]


@pytest.mark.parametrize("loop, words", [
    (ZMM_LOOP, ["16 fused multiply-adds on zmm (AVX-512, 16 floats)", "8 vector loads", "no spills"]),
    (YMM_SPILL_LOOP, ["ymm (AVX2, 8 floats)", "1 loads and 2 stores go to the stack"]),
])
def test_the_loop_sentence_follows_the_instructions(loop, words):
    text = figures._loop_sentence(cpu.loop_stats(loop))
    for w in words:
        assert w in text


def test_ratio_text_says_when_the_table_ranks_the_two_the_other_way():
    def ratio(ours, numpy):
        side = lambda g: {"gflops": g, "gflops_p20": g - 1, "gflops_p80": g + 1}  # noqa: E731
        return {"name": "tiled, parallel", "n": 512, "gflops": ours, "numpy_gflops": numpy, "ratio": ours / numpy,
                "ours": side(ours), "numpy": side(numpy)}
    rows = rows_of({("tiled, parallel", 512): 80.0, (cpu.NUMPY, 512): 100.0})
    agree, disagree = str(figures.ratio_text(ratio(90.0, 100.0), rows)), str(figures.ratio_text(ratio(120.0, 100.0), rows))
    assert "**90% of NumPy**" in agree and "other way round" not in agree
    assert "**120% of NumPy**" in disagree and "had 80 against 100 (80%): the two runs rank them the other way round" in disagree


def test_ceiling_text_uses_the_cores_and_the_rows():
    rows = rows_of({("tiled, packed B", 512): 50.0, ("tiled, parallel", 512): 80.0})
    text = str(figures.ceiling_text({"gflops": 90.0, "gflops_p20": 80.0, "gflops_p80": 95.0, "gflops_best": 100.0,
                                     "calls": 7, "MR": 4, "NR": 2}, rows))
    assert "4 × 2 loop runs at **100 GFLOP/s on one core** (the fastest of 7 calls; median 90" in text
    assert "tiled, packed B reached 50 GFLOP/s, 50% of one core's ceiling" in text
    assert f"{100 * 80 / (cpu.cores() * 100):.0f}% of the {cpu.cores()} cores' ceiling" in text
