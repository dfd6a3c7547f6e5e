"""CPU variants (chapter "On the CPU"): correct for any size, block sizes from the caches,
the register tile from the compiled loop, the traffic model, timing rows and figures."""
import numpy as np
import pytest

from helpers.figures import cpu as figures
from helpers.measure import cpu as cpu_data
from helpers.models import cpu as model
from helpers.runtime import cpu

SHAPES = [(1, 1, 1), (5, 3, 7), (37, 67, 45), (67, 37, 1), (130, 600, 129), (4, 513, 9)]
PLAN = {"MR": 4, "NR": 4, "KC": 512, "NC": 128}

# Two loops as LLVM compiled _dot4x4: for AVX-512 (fits) and for AVX2 (16 registers: spills).
ZMM_LOOP = """.LBB0_19:
\tvmovups\t(%rdi,%r10,4), %zmm16
\tvmovups\t(%r12,%r10,4), %zmm20
\tvmovups\t(%rbx,%r10,4), %zmm17
\tvmovups\t(%r15,%r10,4), %zmm21
\tvmovups\t(%rax,%r10,4), %zmm18
\tvmovups\t(%rcx,%r10,4), %zmm22
\tvmovups\t(%r14,%r10,4), %zmm19
\tvmovups\t(%r11,%r10,4), %zmm23
\taddq\t$16, %r10
""" + "".join(f"\tvfmadd231ps\t%zmm{20 + j}, %zmm{16 + i}, %zmm{4 * i + j}\n" for i in range(4) for j in range(4)) + \
    "\tcmpq\t%r10, %r9\n\tjne\t.LBB0_19"
YMM_SPILL_LOOP = """.LBB0_17:
\tvmovups\t%ymm0, -64(%rsp)
\tvmovups\t(%r9), %ymm10
\tvmovups\t(%rbx), %ymm13
\tvmovups\t128(%rsp), %ymm11
\tvfmadd231ps\t%ymm13, %ymm10, %ymm11
\tvmovups\t%ymm11, 128(%rsp)
\tvfmadd231ps\t(%r12), %ymm10, %ymm9
\tvfmadd231ps\t%ymm12, %ymm10, %ymm8
\taddq\t$8, %r11
\tcmpq\t%r11, %rbp
\tjne\t.LBB0_17"""


# ------------------------------------------------------------------ kernels
@pytest.mark.parametrize("name", list(cpu.VARIANTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_variant_matches_numpy(name, shape):
    err = cpu.check(cpu.VARIANTS[name], *shape)
    assert err < 1e-5, f"{name} on {shape}: relative error {err:.1e}"


@pytest.mark.parametrize("nr", [4, 2])
def test_tiled_kernels_with_either_tile_and_odd_blocks(nr):
    rng = np.random.default_rng(3)
    A = rng.uniform(-1, 1, (37, 70)).astype(np.float32)
    B = rng.uniform(-1, 1, (70, 45)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    for kernel in (cpu.tiled_kernel, cpu.tiled_parallel_kernel):
        C = np.full((37, 45), np.nan, np.float32)
        kernel(A, B, C, 32, 16, nr)                   # blocks smaller than the matrices: edges in k and n
        assert np.abs(C - ref).max() < 1e-4, (kernel.__name__, nr)


def test_variants_sum_in_the_same_order_as_ijk():
    """contract only fuses a*b+c: the first four variants agree with ijk bit for bit; the
    tiled ones reassociate (partial sums per SIMD lane) and agree with each other."""
    rows = {r["variant"]: r for r in cpu.agreement(37, 600, 1030)}
    for name in ("ikj (reordered)", "ikj, k unrolled x4", "4x4 register block"):
        assert rows[name]["bit-identical to ijk"] and rows[name]["max |C - ijk|"] == 0, name
    assert rows["tiled, packed B"]["max |C - ijk|"] < 1e-4
    assert rows["tiled, packed B"]["relative error vs float64"] < 1e-6
    rng = np.random.default_rng(7)
    A, B = rng.uniform(-1, 1, (37, 1030)).astype(np.float32), rng.uniform(-1, 1, (1030, 600)).astype(np.float32)
    C1, C2 = np.empty((37, 600), np.float32), np.empty((37, 600), np.float32)
    cpu.tiled(A, B, C1)
    cpu.tiled_parallel(A, B, C2)
    assert np.array_equal(C1, C2)


def test_pack_b_layout():
    KC, NC = 32, 16
    B = np.arange((KC + 5) * (NC + 3), dtype=np.float32).reshape(KC + 5, NC + 3)
    for Bp in (cpu.pack_b(B, KC, NC), cpu.pack_b_parallel(B, KC, NC)):
        assert Bp.shape == (2, 2, NC, KC)
        assert np.array_equal(Bp[0, 0], B[:KC, :NC].T)              # a block, transposed
        assert np.array_equal(Bp[1, 1, :3, :5], B[KC:, NC:].T)      # the corner block ...
        assert not Bp[1, 1, 3:].any() and not Bp[1, 1, :, 5:].any()  # ... padded with zeros


# ------------------------------------------------------------------ machine
def test_blocking_from_caches():
    # L1 32 KB: (4 + 4) panels of KC floats in 16 KB -> KC = 512; L2 512 KB: 512 x NC floats in 256 KB -> NC = 128
    assert {k: cpu.blocking({"L1": 32768, "L2": 2**19})[k] for k in ("KC", "NC")} == {"KC": 512, "NC": 128}
    # L1 48 KB: 24 KB / 32 B = 768 -> 512; L2 1 MB: 512 KB / 2 KB = 256
    assert {k: cpu.blocking({"L1": 49152, "L2": 2**20})[k] for k in ("KC", "NC")} == {"KC": 512, "NC": 256}
    # the 4 x 2 tile: (4 + 2) panels: 24 KB / 24 B = 1024; 512 KB / 4 KB = 128
    b = cpu.blocking({"L1": 49152, "L2": 2**20}, nr=2)
    assert (b["KC"], b["NC"], b["panels_bytes"], b["block_bytes"]) == (1024, 128, 24576, 2**19)
    nothing = cpu.blocking({"source": "not reported by this system"})
    assert (nothing["KC"], nothing["NC"], nothing["from_caches"]) == (512, 128, False)


def test_caches_and_label():
    c = cpu.caches()
    if c["source"] == "this machine":
        assert c["line"] > 0 and c["L1"] < c["L2"]
    label = cpu.machine_label()
    assert label.startswith("measured on this machine: ") and label.endswith(f"{cpu.cores()} cores")


def test_loop_stats_of_a_loop_that_fits():
    s = cpu.loop_stats(ZMM_LOOP)
    assert (s["fmas"], s["floats_per_vector"], s["vector_loads"], s["vector_stores"]) == (16, 16, 8, 0)
    assert (s["spill_loads"], s["spill_stores"], s["registers"]) == (0, 0, 24)


def test_loop_stats_of_a_loop_that_spills():
    s = cpu.loop_stats(YMM_SPILL_LOOP)
    assert s["floats_per_vector"] == 8 and s["fmas"] == 3
    assert (s["spill_loads"], s["spill_stores"]) == (1, 2)
    assert s["vector_loads"] == 4 and s["vector_stores"] == 2          # incl. the FMA that reads (%r12)


def test_innermost_loops_skip_outer_loops():
    asm = "\n".join([".LBB0_1:", "\taddq\t$1, %rax", ".LBB0_2:", "\tvfmadd231ps\t%ymm1, %ymm2, %ymm3",
                     "\tjne\t.LBB0_2", "\tjne\t.LBB0_1"])
    loops = cpu.innermost_loops(asm)
    assert len(loops) == 1 and loops[0][0] == ".LBB0_2:" and len(loops[0]) == 3


def test_micro_tile_is_the_widest_that_does_not_spill():
    t = cpu.micro_tile()
    assert (t["MR"], t["NR"]) in cpu.TILES and t["fmas"] > 0
    for tried in t["tried"][:-1]:                        # every wider tile tried before it spilled
        assert tried["spill_loads"] or tried["spill_stores"]
    assert cpu.plan()["NR"] == t["NR"]


# ------------------------------------------------------------------ model
def test_traffic_model():
    t = {v: model.traffic(v, 1024, PLAN) for v in cpu.VARIANTS}
    assert t["ijk"]["bytes_per_flop"] == 34            # (4 B of A + a 64-byte line of B) / 2 FLOP
    assert t["ikj (reordered)"]["bytes_per_flop"] == 6  # load B, load C, store C: 12 B / 2 FLOP
    assert t["ikj, k unrolled x4"]["bytes_per_flop"] == 3
    assert t["4x4 register block"]["bytes_per_flop"] == 1.5 and t["4x4 register block"]["reuse_b"] == 4
    assert t["ijk"]["reuse_bytes"] == 64 * 1024
    assert t["4x4 register block"]["reuse_bytes"] == 4 * 2**20
    assert t["tiled, packed B"]["reuse_bytes"] == 4 * 512 * 128
    assert t["tiled, packed B"]["stores_per_fma"] == 0 and t["tiled, packed B"]["bytes_per_flop"] == 1.0
    narrow = model.traffic("tiled, packed B", 100, dict(PLAN, NR=2))
    assert narrow["loads_per_fma"] == 6 / 8 and narrow["b_bytes_per_fma"] == 1 and narrow["reuse_bytes"] == 4 * 100 * 100
    with pytest.raises(KeyError):
        model.traffic("kji", 64, PLAN)


def test_cache_level():
    caches = {"L1": 49152, "L2": 2**20, "L3": 2**25, "line": 64}
    assert [model.level(b, caches) for b in (16384, 49152, 49153, 2**22, 2**26)] == ["L1", "L1", "L2", "L3", "memory"]


def test_compare_uses_the_bands():
    prev = {"gflops": 10, "gflops_p20": 9, "gflops_p80": 11}
    assert model.compare(prev, {"gflops": 13, "gflops_p20": 12, "gflops_p80": 14}) == "faster"
    assert model.compare(prev, {"gflops": 7, "gflops_p20": 6, "gflops_p80": 8}) == "slower"
    assert model.compare(prev, {"gflops": 11.5, "gflops_p20": 10.5, "gflops_p80": 12}) == "no clear difference"


# ------------------------------------------------------------------ timing, figures
def test_benchmark_rows_figure_and_ratio():
    rows = cpu.benchmark({"ikj (reordered)": [32, 64], cpu.NUMPY: [32, 64]})
    assert [r["name"] for r in rows] == ["ikj (reordered)"] * 2 + [cpu.NUMPY] * 2
    assert all(r["gflops_p20"] <= r["gflops"] <= r["gflops_p80"] and r["s"] > 0 for r in rows)
    assert rows[-1]["vs_numpy"] == 1.0 and rows[0]["vs_numpy"] == rows[0]["gflops"] / rows[2]["gflops"]
    r = cpu.ratio_to_numpy(64, rounds=2, repeats=2)
    assert r["ratio"] == r["gflops"] / r["numpy_gflops"] and r["name"] == cpu.BEST


def test_row_percentiles():
    r = cpu.row("ijk", 10, [1.0, 2.0, 3.0, 4.0, 5.0])
    assert r["s"] == 3.0 and r["gflops"] == 2e3 / 3 / 1e9
    assert r["gflops_p20"] == pytest.approx(2e3 / 4.2 / 1e9) and r["gflops_p80"] == pytest.approx(2e3 / 1.8 / 1e9)


def rows_of(speeds: dict) -> list[dict]:
    """Timing rows with a +-5% band from {(name, n): GFLOP/s}."""
    return [{"name": name, "n": n, "s": 2 * n**3 / g / 1e9, "gflops": g, "gflops_p20": 0.95 * g,
             "gflops_p80": 1.05 * g} for (name, n), g in speeds.items()]


MACHINE = {"cpu": "Test CPU 9000", "cores": 16, "flags": {"avx2": True, "fma": True, "avx512f": False,
                                                          "avx512vl": False},
           "caches": {"L1": 32768, "L2": 2**19, "L3": 2**25, "line": 64, "source": "this machine"},
           "numpy": "2.0", "numba": "0.60", "python": "3.12", "blas": "openblas", "system": "Linux"}


def run_of(rows: list[dict], facts: dict | None = None, loops: list | None = None, flags: dict | None = None):
    """A recorded CpuRun around some timing rows (the other parts made up)."""
    machine = dict(MACHINE, flags=flags or MACHINE["flags"])
    return cpu_data.CpuRun(machine=machine, plan=dict(PLAN, block_bytes=4 * 512 * 128, panels_bytes=4 * 8 * 512),
                           loops=loops or [dict(cpu.loop_stats(ZMM_LOOP), MR=4, NR=4, asm=ZMM_LOOP)], agreement=[],
                           rows=rows, ratio={}, ceiling={}, facts=dict(facts or {}), live=False, date="2026-01-02")


def test_figure_menu_has_one_step_per_pair():
    names = list(cpu.VARIANTS) + [cpu.NUMPY]
    rows = rows_of({(name, n): 10.0 * (i + 1) for i, name in enumerate(names) for n in (64, 128)})
    fig = figures.figure(run_of(rows))
    buttons = fig.layout.updatemenus[0].buttons
    assert len(buttons) == 6 and buttons[0].label == "all variants"
    assert buttons[4].label == "step 4: tiled, packed B"
    visible = buttons[4].args[0]["visible"]
    shown = [t.name for t, v in zip(fig.data, visible) if v]
    assert shown == ["4x4 register block", "tiled, packed B", cpu.NUMPY]
    assert list(fig.data[0].error_y.array) == pytest.approx([0.5, 0.5])     # the 80th percentile above 10


def test_traffic_figure_and_tables():
    rows = rows_of({(name, n): 5.0 + i for i, name in enumerate(cpu.VARIANTS) for n in (64, 128)}
                   | {("ijk", 256): 1.0})
    assert figures.common_n(rows) == 128
    fig = figures.traffic_figure(run_of(rows))
    assert [round(y, 3) for y in fig.data[0].y][:2] == [64, 4]       # a line of B per multiply-add, then 4 bytes
    assert list(fig.data[1].y) == [5.0 + i for i in range(len(cpu.VARIANTS))]
    # one-line names, turned by Plotly where they would run into each other (a phone), not wrapped into a heap
    assert fig.layout.xaxis2.tickangle is None and not any("<br>" in t for t in fig.layout.xaxis2.ticktext)
    t = figures.speeds_table(run_of(rows))
    assert t.columns[0] == "n" and t.rows[-1]["ijk"] == 1.0 and t.rows[-1]["ikj (reordered)"] is None
    assert t.rows[0]["fastest of ours"] == "tiled, parallel"


# ------------------------------------------------------------------ recorded or live
def test_a_run_round_trips_through_its_rows():
    rows = [{"what": "machine", **MACHINE}, {"what": "plan", **PLAN},
            {"what": "loop", **cpu.loop_stats(ZMM_LOOP), "MR": 4, "NR": 4, "asm": ZMM_LOOP},
            {"what": "timing", **rows_of({("ijk", 64): 2.0})[0]}, {"what": "facts", "parallel_overhead_s": 1e-5,
                                                                    "load_average": 1.0}]
    run = cpu_data.from_rows(rows, live=False, date="2026-01-02")
    assert run.source == "recorded on Test CPU 9000, 16 cores, 2026-01-02"
    assert run.tile["NR"] == 4 and run.tile["tried"][0]["asm"] == ZMM_LOOP and run.rows[0]["gflops"] == 2.0
    assert run.all_facts()["cores"] == 16 and run.all_facts()["parallel_overhead_s"] == 1e-5


def test_the_run_is_recorded_unless_asked_to_measure(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")
    assert not cpu_data.live()
    monkeypatch.setenv("SGEMM_BOOK_MODE", "live")
    assert cpu_data.live()                         # the CPU chapter needs no GPU to measure


def test_without_a_record_every_function_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")
    monkeypatch.setenv("SGEMM_BOOK_DATA_DIR", str(tmp_path))         # no data at all
    assert cpu_data.run() is None
    for fn in (figures.machine, figures.agreement, figures.figure, figures.gains_text, figures.traffic_figure,
               figures.ratio_text, figures.registers_text, figures.loop, figures.steps_text, figures.ceiling_text):
        note = fn(None)
        assert "Not recorded yet" in str(note) and cpu_data.RECORD_COMMAND in str(note), fn.__name__
    assert "SGEMM_BOOK_MODE=live" in str(figures.machine(None))      # the first note says how to measure here
    assert "Not recorded yet" in str(figures.show(figures.figure(None)))


def test_vector_registers_follow_the_flags():
    assert cpu_data.vector_registers({"avx2": True}) == {"xmm": 16, "ymm": 16, "zmm": 0}
    assert cpu_data.vector_registers({"avx2": True, "avx512f": True}) == {"xmm": 16, "ymm": 16, "zmm": 32}
    assert cpu_data.vector_registers({"avx512f": True, "avx512vl": True}) == {"xmm": 32, "ymm": 32, "zmm": 32}


def test_record_rows_are_strict_json_with_the_machine_first(monkeypatch):
    import json

    monkeypatch.setattr(cpu, "benchmark", lambda sizes, progress=None: rows_of({("ijk", 8): 1.0}))
    monkeypatch.setattr(cpu, "ratio_to_numpy", lambda n: {"name": cpu.BEST, "n": n, "ratio": 1.0})
    monkeypatch.setattr(cpu, "loop_ceiling", lambda: {"gflops": 1.0})
    rows = cpu_data.measure()
    json.dumps(rows, allow_nan=False)
    assert rows[0]["what"] == "machine" and set(rows[0]["flags"]) in (set(), set(cpu_data.FLAGS))
    assert {r["what"] for r in rows} == {"machine", "plan", "loop", "agreement", "timing", "ratio", "ceiling", "facts"}
    assert all(r["asm"] for r in rows if r["what"] == "loop")
