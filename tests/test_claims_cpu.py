"""The chapter "On the CPU" (book/01_cpu.md) and its deep dive state facts about one recorded
machine. Its computed sentences are checked here against cases where the data would say
something else (spills, a step that does not gain, a busy machine), its prose against the
recorded ``cpu`` rows (skipped, with the command to run, until they are recorded), and the
prose itself asserts no number of a machine."""
import re
from pathlib import Path

import pytest

from helpers.figures import cpu as figures
from helpers.measure import cpu as cpu_data
from helpers.models import cpu as model
from helpers.runtime import cpu
from test_cpu import MACHINE, YMM_SPILL_LOOP, ZMM_LOOP, rows_of, run_of

BOOK = Path(__file__).resolve().parents[1] / "book"
PAGES = [BOOK / "01_cpu.md", BOOK / "01_cpu_deep_dive.md"]
CACHES = {"L1": 32768, "L2": 2**19, "L3": 2**25, "line": 64, "source": "this machine"}
PLAN = {"MR": 4, "NR": 4, "KC": 512, "NC": 128}


def prose(path: Path) -> str:
    """A page's Markdown outside code cells, fenced code and admonitions."""
    text = re.sub(r"```\{code-cell\}.*?```", "", path.read_text(), flags=re.S)
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.fixture(scope="module")
def recorded():
    import os

    os.environ.setdefault("SGEMM_BOOK_MODE", "recorded")
    run = cpu_data.recorded()
    if run is None:
        pytest.skip(f"the cpu data source is not recorded yet: run `{cpu_data.RECORD_COMMAND}` on the GPU host")
    return run


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_prose_states_no_cache_size_speed_or_vector_width_of_a_machine(page):
    text = prose(page)
    assert not re.search(r"\d+(\.\d+)?\s*(KB|MB|KiB|MiB|GHz)\b", text), "cache sizes and clocks come from the data"
    assert not re.search(r"\d+(\.\d+)?\s*GFLOP/s", text), "speeds come from the timing rows"
    assert "nothing this page measures explains it" not in text


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
    # the same rows from a loop that does not spill: at 512 none of the checked causes applies, and the text says so
    clean = {r["n"]: r for r in model.steps(rows_of(speeds), PLAN, CACHES, {"tile": cpu.loop_stats(ZMM_LOOP)})}
    assert clean[512]["why"].startswith("none of the causes checked here applies")


def test_the_text_never_says_every_n_when_one_is_slower():
    speeds = {("ikj (reordered)", n): 10.0 for n in (64, 128)} | {("ikj, k unrolled x4", 64): 20.0,
                                                                   ("ikj, k unrolled x4", 128): 8.0}
    text = str(figures.steps_text(run_of(rows_of(speeds))))
    assert "at every n" not in text
    assert "at n = 64, but not everywhere" in text and "at n = 128 it is slower (10 → 8 GFLOP/s)" in text
    busy = {("tiled, packed B", n): 10.0 for n in (128, 256)} | {("tiled, parallel", n): 8.0 for n in (128, 256)}
    grouped = str(figures.steps_text(run_of(rows_of(busy), {"parallel_overhead_s": 1e-9, "load_average": 50.0})))
    assert "at n = 128, 256 it is slower (10 → 8; 10 → 8 GFLOP/s): the machine had other work" in grouped
    speeds[("ikj, k unrolled x4", 128)] = 20.0
    assert "at every n timed (2× to 2×)" in str(figures.steps_text(run_of(rows_of(speeds))))


def test_gains_text_names_the_steps_that_did_not_gain_once():
    names = list(cpu.VARIANTS)
    speeds = {(name, n): 2.0 ** i for i, name in enumerate(names) for n in (64, 128)}
    text = str(figures.gains_text(run_of(rows_of(speeds))))
    assert "At n = 128" in text and "from 1 to 32 GFLOP/s, 32× faster" in text and "Every step is faster" in text
    speeds[("tiled, packed B", 64)] = 1.0
    text = str(figures.gains_text(run_of(rows_of(speeds))))
    assert text.count("**tiled, packed B**") == 1 and "**tiled, parallel**" not in text.split("Not every")[1] \
        or "**tiled, parallel**" in text            # parallel may lose too against a slower previous step


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
    assert unknown["why"].startswith("none of the causes checked here applies")
    # a small fixed cost does not explain a call a thousand times slower: the load does, or nothing
    far = rows_of({("tiled, packed B", 64): 10.0, ("tiled, parallel", 64): 0.01})
    (step,) = model.steps(far, PLAN, CACHES, {"cores": 2, "parallel_overhead_s": 1.4e-6, "load_average": 100.0})
    assert "load average was 100.0" in step["why"]


def test_noisy_but_higher_median_is_called_noise():
    rows = [{"name": "ijk", "n": 64, "s": 1, "gflops": 1.0, "gflops_p20": 0.8, "gflops_p80": 1.2},
            {"name": "ikj (reordered)", "n": 64, "s": 1, "gflops": 1.1, "gflops_p20": 0.5, "gflops_p80": 3.0}]
    (step,) = model.steps(rows, PLAN, CACHES)
    assert step["verdict"] == "no clear difference" and "bands overlap (0.8-1.2 and 0.5-3 GFLOP/s)" in step["why"]


AVX2 = {"avx2": True, "fma": True, "avx512f": False, "avx512vl": False}
AVX512VL = {"avx2": True, "fma": True, "avx512f": True, "avx512vl": True}
YMM24 = "".join(f"\tvfmadd231ps\t%ymm{16 + i}, %ymm{i}, %ymm{8 + i}\n" for i in range(8)) + "\tjne\t.LBB0_1"


@pytest.mark.parametrize("loop, flags, words, absent", [
    (ZMM_LOOP, AVX512VL, ["16 fused multiply-adds on zmm registers (16 floats each)", "8 vector loads", "no spills",
                          "of the 32 zmm registers AVX-512 has"], ["AVX2"]),
    (YMM_SPILL_LOOP, AVX2, ["on ymm registers (8 floats each)", "1 loads and 2 stores go to the stack"],
     ["AVX-512"]),
    # 24 ymm registers: more than AVX2 names, so the sentence says they need AVX-512VL, never "AVX2"
    (".LBB0_1:\n" + YMM24, AVX512VL, ["24 vector registers, more than the 16 of AVX2: ymm16 to ymm31 exist only with "
                                      "AVX-512VL, which this CPU has (32 ymm registers)"], ["(AVX2, 8 floats)"]),
])
def test_the_loop_sentence_follows_the_instructions_and_the_flags(loop, flags, words, absent):
    text = figures._loop_sentence(cpu.loop_stats(loop), flags)
    for w in words:
        assert w in text
    for w in absent:
        assert w not in text


def test_registers_text_follows_the_recorded_flags_and_loops():
    fits = str(figures.registers_text(run_of([], flags=AVX512VL)))
    assert "zmm registers (16 floats each); with AVX-512 and AVX-512VL the CPU has 32 of them" in fits
    assert "the 4 × 4 loop names 24:" in fits
    assert "it fits with no spill" in fits
    spill = [dict(cpu.loop_stats(YMM_SPILL_LOOP), MR=4, NR=4, asm=""), dict(cpu.loop_stats(ZMM_LOOP), MR=4, NR=2, asm="")]
    text = str(figures.registers_text(run_of([], loops=spill, flags=AVX2)))
    assert "ymm registers (8 floats each); with AVX2 and FMA the CPU has 16 of them" in text
    assert "use the 4 × 2 tile instead" in text


def test_machine_text_names_the_recorded_machine_and_date():
    text = str(figures.machine(run_of([])))
    assert "recorded on 2026-01-02 on **Test CPU 9000**, 16 cores, AVX2 and FMA" in text
    assert "NumPy 2.0 calls openblas" in text and "KC = 512 by NC = 128" in text


def test_ratio_text_says_when_the_table_ranks_the_two_the_other_way():
    def ratio(ours, numpy):
        side = lambda g: {"gflops": g, "gflops_p20": g - 1, "gflops_p80": g + 1}  # noqa: E731
        return {"name": "tiled, parallel", "n": 512, "gflops": ours, "numpy_gflops": numpy, "ratio": ours / numpy,
                "ours": side(ours), "numpy": side(numpy)}
    rows = rows_of({("tiled, parallel", 512): 80.0, (cpu.NUMPY, 512): 100.0})
    agree, disagree = run_of(rows), run_of(rows)
    agree.ratio, disagree.ratio = ratio(90.0, 100.0), ratio(120.0, 100.0)
    agree, disagree = str(figures.ratio_text(agree)), str(figures.ratio_text(disagree))
    assert "**90% of NumPy**" in agree and "other way round" not in agree and "Test CPU 9000, 16 cores" in agree
    assert "**120% of NumPy**" in disagree and "had 80 against 100 (80%): the two runs rank them the other way round" in disagree


def test_ceiling_text_uses_the_cores_and_the_rows():
    run = run_of(rows_of({("tiled, packed B", 512): 50.0, ("tiled, parallel", 512): 80.0}))
    run.ceiling = {"gflops": 90.0, "gflops_p20": 80.0, "gflops_p80": 95.0, "gflops_best": 100.0, "calls": 7,
                   "MR": 4, "NR": 2}
    text = str(figures.ceiling_text(run))
    assert "4 × 2 loop runs at **100 GFLOP/s on one core** (the fastest of 7 calls; median 90" in text
    assert "tiled, packed B reached 50 GFLOP/s, 50% of one core's ceiling" in text
    assert "tiled, parallel reached 80 GFLOP/s, 5% of the 16 cores' ceiling" in text


# ------------------------------------------------------------------ the recorded machine
def test_recorded_machine_is_named_with_its_flags_and_versions(recorded):
    m = recorded.machine
    assert m["cpu"] and m["cores"] >= 1 and m["numpy"] and m["numba"] and m["blas"]
    assert set(m["flags"]) == set(cpu_data.FLAGS)


def test_recorded_loop_order_alone_changes_the_speed_many_times_over(recorded):
    """Summary: 'The loop order alone changes the speed many times over'."""
    at = {(r["name"], r["n"]): r["gflops"] for r in recorded.rows}
    n = max(n for name, n in at if name == "ijk")
    assert at[("ikj (reordered)", n)] / at[("ijk", n)] >= 3


def test_recorded_4x4_tile_needs_24_registers_and_the_text_matches_the_flags(recorded):
    """'The 16 sums and the 8 values loaded per step need 24 vector registers'; the sentence on the
    recorded machine names as many registers as its instruction set gives."""
    first = recorded.loops[0]
    assert (first["MR"], first["NR"]) == (4, 4)
    kind = figures.FLOATS[first["floats_per_vector"]]
    assert first["spill_loads"] or first["spill_stores"] or first["registers"] <= \
        cpu_data.vector_registers(recorded.flags)[kind]
    text = str(figures.registers_text(recorded))
    assert f"the CPU has {cpu_data.vector_registers(recorded.flags)[kind]} of them" in text


def test_recorded_register_block_reads_a_quarter_of_the_b_of_ikj(recorded):
    """'Per multiply-add the loop now loads a quarter of the B it did before'."""
    a = model.traffic("ikj (reordered)", 1024, recorded.plan)["b_bytes_per_fma"]
    b = model.traffic("4x4 register block", 1024, recorded.plan)["b_bytes_per_fma"]
    assert b == a / 4


def test_recorded_agreement_first_four_bit_identical(recorded):
    """'The first four variants ... should agree with it to the last bit.'"""
    rows = {r["variant"]: r for r in recorded.agreement}
    for name in list(cpu.VARIANTS)[:4]:
        assert rows[name]["bit-identical to ijk"], name
    assert all(r["relative error vs float64"] < 1e-5 for r in recorded.agreement)
