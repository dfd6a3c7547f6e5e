"""helpers.sgemm without a GPU: layout detection, the operands the kernel gets, the errors
that name the fix, the kernel's argument tuple, the dispatcher's choices on every device
the book emulates, and the calibration scripts on a table the model itself wrote.

NumPy arrays stand in for CuPy ones: only shapes, strides and dtypes are read before the
launch. What needs a GPU is in tests/test_gpu_final.py.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import re

import numpy as np
import pytest

import helpers
from helpers.hardware import Device
from helpers.measure import dispatch_fit, final_experiments as experiments, final_tuning
from helpers.runtime.gemm import plan_call, sgemm
from helpers.runtime.layout import Layout, layout, leading_dimension
from helpers.runtime.spec import ConfigError, cdiv
from helpers.runtime.specs import final
from helpers.runtime.specs.final import SPEC, choose_config
from helpers.shapes import SUITE, broad_suite

REFERENCE = Device.from_datasheet("NVIDIA H200")
H100 = Device.from_datasheet("NVIDIA H100 80GB HBM3")
EMULATED = [Device.emulating(a) for a in ("sm_80", "sm_86", "sm_89", "sm_90")]


def f32(*shape):
    return np.zeros(shape, np.float32)


# ------------------------------------------------------------------ layouts
def test_row_major_views_and_their_leading_dimension():
    X = f32(6, 8)
    assert layout(X) == Layout(False, 8)
    assert layout(X[:, :5]) == Layout(False, 8)          # a column slice keeps the row stride
    assert layout(X[2:, 1:]) == Layout(False, 8)
    assert layout(X[::2]) == Layout(False, 16)           # every other row: a longer stride, still rows


def test_transposed_views_are_column_major():
    X = f32(6, 8)
    assert layout(X.T) == Layout(True, 8)
    assert layout(X[:, :5].T) == Layout(True, 8)
    assert layout(np.asfortranarray(f32(5, 7))) == Layout(True, 5)


def test_single_rows_and_columns_are_read_either_way():
    X = f32(6, 8)
    assert layout(X[:1]) == Layout(False, 8)
    assert layout(X[:, :1]) == Layout(False, 8)
    assert layout(X.T[:1]) == Layout(True, 8)            # a row of a transposed view: stride 8 along it
    assert layout(f32(1, 1)) == Layout(False, 1)
    assert leading_dimension(f32(6, 1), "X", True) == 6         # a contiguous column, read as a transposed view
    with pytest.raises(ValueError, match="cannot be read as a transposed view"):
        leading_dimension(X[:, :1], "X", True)                  # its elements are 8 floats apart


@pytest.mark.parametrize("bad,match", [
    (f32(6, 8)[::-1], "negative stride"),
    (f32(6, 8)[:, ::-1], "negative stride"),
    (f32(6, 8)[::2, ::2], "two non-unit strides"),
    (np.broadcast_to(f32(1, 8), (6, 8)), "overlap"),
    (np.lib.stride_tricks.as_strided(f32(6, 8), (6, 8), (8, 4)), "overlap"),
    (np.zeros((6, 8)), "float32"),
    (f32(8), "2-D"),
    (f32(0, 8), "empty"),
])
def test_unreadable_layouts_name_the_fix(bad, match):
    with pytest.raises((ValueError, TypeError), match=match) as exc:
        layout(bad, "A")
    assert "ascontiguousarray" in str(exc.value) or "float32" in str(exc.value) or match in ("2-D", "empty")


def test_leading_dimension_refuses_the_wrong_orientation():
    with pytest.raises(ValueError, match="cannot be read as a transposed view"):
        leading_dimension(f32(6, 8), "A", True)
    with pytest.raises(ValueError, match="cannot be read as row-major"):
        leading_dimension(f32(6, 8).T, "B", False)


# ------------------------------------------------------------------ what the kernel gets
def test_layouts_become_flags_without_copies():
    A, B, C = f32(8, 5), f32(7, 5).T, f32(8, 7)
    call = plan_call(A, B, C)
    assert (call.M, call.N, call.K, call.a_t, call.b_t, call.swapped) == (8, 7, 5, 0, 1, False)
    assert call.A is A and call.B is B and call.C is C


def test_a_column_major_c_swaps_the_operands():
    A, B = f32(8, 5), f32(5, 7)
    C = np.asfortranarray(f32(8, 7))
    call = plan_call(A, B, C, beta=1.0)
    assert call.swapped and (call.M, call.N, call.K) == (7, 8, 5)
    assert (call.a_t, call.b_t) == (1, 1)                 # B^T and A^T are transposed views of row-major data
    assert call.C.shape == (7, 8) and call.C.flags.c_contiguous
    assert np.shares_memory(call.A, B) and np.shares_memory(call.B, A)
    A2 = f32(5, 8).T                                      # A itself transposed: A^T is row-major
    assert plan_call(A2, B, C).b_t == 0


@pytest.mark.parametrize("A,B,C,kw,err,match", [
    (f32(8, 5), f32(6, 7), None, {}, ValueError, "inner dimensions differ"),
    (f32(8, 5), f32(5, 7), f32(7, 8), {}, ValueError, r"pass a C of shape \(8, 7\)"),
    (f32(8, 5), f32(5, 7), None, dict(beta=0.5), ValueError, "no C was given"),
    (np.zeros((8, 5)), f32(5, 7), None, {}, TypeError, "astype"),
    (f32(8, 5), f32(5, 7)[:, ::-1], None, {}, ValueError, "negative stride"),
    (f32(8, 5), f32(10, 14)[::2, ::2], None, {}, ValueError, "two non-unit strides"),
    (f32(8, 5), f32(5, 7), f32(8, 7)[::-1], {}, ValueError, "negative stride"),
    (f32(8, 5), f32(5, 7), None, dict(alpha=float("nan")), ValueError, "finite"),
    (f32(8, 5), f32(5, 7), None, dict(alpha="2"), TypeError, "real number"),
])
def test_errors_name_the_fix(A, B, C, kw, err, match):
    with pytest.raises(err, match=match):
        plan_call(A, B, C, **kw)


def test_sgemm_refuses_numpy_arrays_before_touching_a_gpu():
    with pytest.raises(TypeError, match="cupy.asarray"):
        sgemm(f32(8, 5), f32(5, 7))
    assert helpers.sgemm is sgemm


def test_the_argument_tuple_carries_leading_dimensions_alpha_and_beta():
    p = SPEC.resolve(dict(A_T=1, B_T=0))
    A, B, C = f32(9, 8).T, f32(9, 12)[:, :7], f32(8, 10)[:, :7]
    args = final.arguments(p, 8, 7, 9, A, B, C, (), alpha=2.0, beta=0.5)
    M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, part, arr = args
    assert (int(M), int(N), int(K), int(lda), int(ldb), int(ldc)) == (8, 7, 9, 8, 12, 10)
    assert (float(alpha), float(beta)) == (2.0, 0.5) and a is A and b is B and c is C
    assert int(part) == 0 and int(arr) == 0
    with pytest.raises(ValueError, match="cannot be read as row-major"):
        final.arguments(SPEC.resolve({}), 8, 7, 9, A, B, C)           # the config says A is row-major
    plain = SPEC.arguments(p, 8, 7, 9, A, B, C)
    assert len(plain) == 13 and float(plain[3]) == 1.0 and float(plain[8]) == 0.0


def test_other_kernels_keep_their_plain_arguments():
    from helpers.runtime.specs import get

    spec = get("naive")
    args = spec.arguments(spec.defaults(), 4, 5, 6, "A", "B", "C")
    assert [int(x) for x in args[:3]] == [4, 5, 6] and args[3:] == ("A", "B", "C")


# ------------------------------------------------------------------ the dispatcher
SHAPES = [(4096,) * 3, (8192,) * 3, (1, 1, 1), (1, 5000, 3), (5000, 1, 70000), (33, 4100, 300)] + list(SUITE)


def choices_to_check(device) -> list:
    """(shape, layout) pairs: SHAPES in every layout, and each shape of the broad suite in two of
    the four, turned by the device's place in the default run: each layout on half of the broad
    suite on every device, and every pair of a broad shape and a layout on one of the three
    devices of the default run (each choice ranks hundreds of options: about 20 ms)."""
    layouts = list(final.LAYOUTS.values())
    turn = {REFERENCE.name: 0, H100.name: 1}.get(device.name, 2)
    return [(shape, lay) for shape in SHAPES for lay in layouts] + \
        [(shape, layouts[(i + turn + j) % 4]) for i, shape in enumerate(broad_suite()) for j in (0, 2)]


def test_the_broad_suite_is_checked_in_every_layout_across_the_devices_of_a_run():
    devices = [REFERENCE, H100, next(d for d in EMULATED if d.cc == "8.6")]
    pairs = {pair for d in devices for pair in choices_to_check(d)}
    assert pairs == {(shape, lay) for shape in SHAPES + broad_suite() for lay in final.LAYOUTS.values()}
    for d in devices:
        checked = choices_to_check(d)
        assert all(sum(lay == x for _, x in checked) >= len(SHAPES) + 24 for lay in final.LAYOUTS.values())


# the recorded GPUs and one of another generation's limits every run; the other emulated GPUs
# with the slow tests (make test-gpu)
@pytest.mark.parametrize("device", [REFERENCE, H100] + [
    d if d.cc == "8.6" else pytest.param(d, marks=pytest.mark.slow) for d in EMULATED], ids=lambda d: d.label)
def test_every_choice_is_valid_and_fits_the_shape(device):
    for shape, (a_t, b_t) in choices_to_check(device):
        p = choose_config(*shape, device, a_t, b_t)
        SPEC.validate(p, device=device)
        SPEC.check_shape(p, *shape, device)
        # the kernel reads the caller's layout, or the packed one: A transposed, B row-major
        assert (p["A_T"], p["B_T"]) == (1 if p["PACK_A"] else a_t, 0 if p["PACK_B"] else b_t)
        assert not p["PACK_A"] or a_t == 0 or shape[0] % 4, "packing an aligned A^T gains nothing"
        assert not p["PACK_B"] or b_t == 1 or shape[1] % 4, "packing an aligned B gains nothing"
        # tiles over an edge of C move back to end at it wherever C holds a whole tile that way
        M, N = shape[:2]
        edge = M % p["BM"] and M >= p["BM"] or N % p["BN"] and N >= p["BN"]
        assert p["EDGES"] == (1 if edge else 0), (shape, a_t, b_t, p)
        grid, (floats, counters) = SPEC.geometry(p, *shape, device)
        packed = sum(final.packed_floats(p, *shape))
        assert packed == (p["PACK_A"] and -(-shape[0] // 4) * 4 * shape[2] + 63) // 64 * 64 + \
            (p["PACK_B"] and -(-shape[1] // 4) * 4 * shape[2] + 63) // 64 * 64
        floats -= packed
        k_tiles = cdiv(shape[2], p["BK"])
        if p["STREAMK"]:
            g, waves = grid[0], grid[1] - 1
            shared = final.tiles_of(p, *shape[:2]) - g * waves
            assert 1 <= g and shared >= 1 and g <= shared * k_tiles, (shape, p, grid)
            assert floats == 2 * g * p["BM"] * p["BN"] and counters == shared
        elif p["SPLITK"] > 1 and p["REDUCE"]:                 # a slab of M x N per split, no counters
            assert k_tiles >= p["SPLITK"]                        # no more parts than k-tiles
            padded_n = -(-shape[1] // 4) * 4                   # slab rows 16 bytes apart
            assert floats == p["SPLITK"] * shape[0] * padded_n and counters == 0
            assert 4 * floats <= final.SLAB_BYTES
        elif p["SPLITK"] > 1:
            assert k_tiles >= p["SPLITK"]
            assert floats == final.tiles_of(p, *shape[:2]) * p["SPLITK"] * p["BM"] * p["BN"]
        else:
            assert floats == 0


def test_the_split_follows_the_shape_not_a_table():
    d = REFERENCE
    big = choose_config(8192, 8192, 8192, d)
    # enough tiles for large blocks; a split of K, if any, only evens out the last wave
    assert big["SPLITK"] <= 4 and big["BM"] * big["BN"] >= 128 * 128
    thin = choose_config(128, 128, 65536, d)                               # one or two tiles, very long K
    assert thin["SPLITK"] > big["SPLITK"] or thin["STREAMK"]
    # more SMs never make the choice slower in the model: the time estimate falls with the SM count
    small = dataclasses.replace(d, sm_count=d.sm_count // 2)
    for shape in [(4096,) * 3, (1000, 3000, 777), (128, 8192, 8192)]:
        fast = final.estimate(choose_config(*shape, d), *shape, 0.7, d).ms
        slow = final.estimate(choose_config(*shape, small), *shape, 0.7, small).ms
        assert fast <= slow


def test_the_choice_is_cached_and_returns_a_fresh_dict():
    a = choose_config(4096, 4096, 4096, REFERENCE)
    a["BM"] = 1
    assert choose_config(4096, 4096, 4096, REFERENCE)["BM"] != 1


def test_stream_k_grid_gives_every_block_work():
    p = SPEC.resolve(dict(STREAMK=1))
    for M, N, K in [(4096, 4096, 4096), (100, 100, 64), (128, 256, 32), (2000, 3000, 5000), (64, 64, 100000)]:
        g, waves = final.stream_k_grid(p, M, N, K, REFERENCE)
        shared = final.tiles_of(p, M, N) - g * waves
        iters = shared * cdiv(K, p["BK"])
        assert 1 <= g <= iters and (g == 1 or iters // g >= final.MIN_K_TILES)
        assert shared >= 1 and (waves == 0 or shared >= g)


def test_stream_k_is_offered_only_where_a_candidate_has_a_measured_factor():
    # a candidate without a stream-K factor (the 64 x 256 tile) offers no stream-K option, and
    # one with a factor offers it where K is long enough; so the dispatcher never picks an
    # unmeasured stream-K
    by = {c.name: c for c in final.CANDIDATES}
    assert by["flat"].stream_k is None and by["large"].stream_k is not None
    shape = (2048, 2048, 8192)
    assert not any(p["STREAMK"] for p in final.options(by["flat"], *shape, device=REFERENCE))
    assert any(p["STREAMK"] for p in final.options(by["large"], *shape, device=REFERENCE))
    for M, N, K in list(SUITE) + list(broad_suite()):
        c = choose_config(M, N, K, REFERENCE)
        assert not c["STREAMK"] or final.candidate_of(c).stream_k is not None, (M, N, K)


def test_the_spec_refuses_bad_combinations():
    with pytest.raises(ConfigError, match="KU=8 must divide BK=8"):
        SPEC.validate(dict(BK=8, KU=8))
    with pytest.raises(ConfigError, match="SPLITK must be 1 with STREAMK=1"):
        SPEC.validate(dict(STREAMK=1, SPLITK=2))


def test_shared_memory_counts_the_padding_of_transposed_copies():
    base = SPEC.resolve({})
    nn = final.smem_bytes(base)
    assert nn == 2 * 32 * (128 + 4 + 256) * 4
    assert final.smem_bytes(dict(base, A_T=1)) == nn - 2 * 32 * 4 * 4     # stages x BK x padding x bytes
    assert final.smem_bytes(dict(base, B_T=1)) == nn + 2 * 32 * 4 * 4


# ------------------------------------------------------------------ calibration
def test_the_tuning_plan_compiles_each_config_once_and_covers_the_broad_suite():
    tune = final_tuning
    items = tune.plan(["squares", "layouts", "broad"], REFERENCE)
    stages = {it["stage"] for it in items}
    assert stages == {"squares", "layouts", "broad"}
    broad = {it["shape"] for it in items if it["stage"] == "broad"}
    assert set(broad_suite()) <= broad and set(SUITE) <= broad
    for it in items:
        SPEC.validate(it["params"], device=REFERENCE)
    names = {it["name"] for it in items if it["stage"] == "squares"}
    assert names == set(tune.VARIANTS)


def synthetic_table(tune, device, true, true_constants, rng) -> tuple[dict, list]:
    """A table as scripts/tune_final.py would write it on ``device``, its times the model's with the
    numbers ``true`` and ``true_constants`` (1% noise)."""
    items = tune.plan(["squares", "broad"], device, quick=True)
    rows, cub = [], {}
    for it in items:
        p, (M, N, K) = SPEC.resolve(it["params"]), it["shape"]
        c = final.candidate_of(p)
        e = c and true[c.name].efficiency_on(p, M, N, K, device)
        ms = final.estimate(p, M, N, K, e or 0.6, device, true_constants).ms * (1 + rng.gauss(0, 0.01))
        cub.setdefault((M, N, K), ms * 1.05)
        rows.append(dict(stage=it["stage"], M=M, N=N, K=K, layout="NN", name=it["name"], params=p, ms=ms, ok=True,
                         label=SPEC.label(p), tflops=2e-9 * M * N * K / ms, cublas_ms=cub[(M, N, K)],
                         cublas_tflops=2e-9 * M * N * K / cub[(M, N, K)], pct=100 * cub[(M, N, K)] / ms))
    doc = dict(device=device.as_record(), rows=rows, variants=tune.VARIANTS, constants=dataclasses.asdict(final.CONSTANTS),
               candidates={c.name: dict(params=c.params, efficiency=c.efficiency) for c in final.CANDIDATES},
               cublas=[dict(M=k[0], N=k[1], K=k[2], layout="NN", ms=v) for k, v in cub.items()])
    return doc, rows


TRUE_CONSTANTS = dict(pipeline_tiles=1.0, shared_us=2.0, reduce_gbs=200.0, slab_us=5.0, slab_speed=0.5, alone=0.4,
                      launch_us=4.0, exposed=0.8, fill_hidden=0.8)


def true_numbers(rng) -> dict:
    return {c.name: dataclasses.replace(c, efficiency=rng.uniform(0.5, 0.75), stream_k=rng.uniform(0.8, 1.0),
                                        edge=rng.uniform(0.8, 1.1)) for c in final.CANDIDATES}


FIT_SHAPES = [(4096, 4096, 4096), (1000, 3000, 777), (128, 8192, 8192), (185, 320, 89), (2048, 2048, 8192),
              (8128, 100, 178), (2528, 14267, 667), (110, 422, 14493)]


def model_table(device, true, true_constants, names=("large", "medium", "narrow", "small")) -> dict:
    """A table of every option of a few candidates on FIT_SHAPES, its times the model's with the
    numbers ``true`` and ``true_constants`` (no noise)."""
    rows = []
    for M, N, K in FIT_SHAPES:
        for n in names:
            for p in final.options(true[n], M, N, K, device=device, packing=False):
                e = final.estimate(p, M, N, K, true[n].efficiency_on(p, M, N, K, device), device, true_constants)
                rows.append(dict(stage="broad", M=M, N=N, K=K, layout="NN", params=SPEC.resolve(p), ms=e.ms, ok=True))
    return dict(device=device.as_record(), rows=rows, constants=dataclasses.asdict(final.CONSTANTS),
                cublas=[dict(M=M, N=N, K=K, layout="NN", ms=1.0) for M, N, K in FIT_SHAPES])


def test_the_fit_recovers_the_numbers_of_the_model_that_wrote_the_table():
    # the fit and the dispatcher share one cost model (final.combine): times written by it with known
    # numbers, fitted from the numbers in use, give those numbers back
    true = {c.name: c for c in final.CANDIDATES}
    true["small"] = dataclasses.replace(true["small"], efficiency=0.45)
    true_constants = dataclasses.replace(final.CONSTANTS, exposed=0.8, pipeline_tiles=1.0, shared_us=2.0)
    doc = model_table(H100, true, true_constants)
    tab = dispatch_fit.Table(doc)
    cands0, constants0 = dispatch_fit.table_numbers(doc)
    assert constants0 == final.CONSTANTS and tab.spread(cands0, constants0, range(len(tab.shapes))) > 1e-4
    fitted = ("exposed", "pipeline_tiles", "shared_us")
    c1, k1, spread = dispatch_fit.fit(tab, range(len(tab.shapes)), cands0, constants0, only=(*fitted, "efficiency"),
                                      of=("small",))
    assert spread < 1e-6
    for name in fitted:
        assert math.isclose(getattr(k1, name), getattr(true_constants, name), rel_tol=0.02), name
    # the fit ranks within a shape: one candidate's efficiency against the others' (large's, as given)
    assert math.isclose(c1["small"].efficiency / c1["large"].efficiency, 0.45 / true["large"].efficiency, rel_tol=0.02)
    # --only: the named numbers move, the others stay as the table has them
    assert dataclasses.replace(k1, **{n: getattr(constants0, n) for n in fitted}) == constants0
    assert all(c1[n] == cands0[n] for n in cands0 if n != "small")
    # and the choice among the table's options is then the best one on every shape
    assert min(tab.choices(c1, k1, range(len(tab.shapes)))["ratio"]) > 0.999


@pytest.mark.slow
def test_fit_dispatch_ranks_like_the_model_that_wrote_the_table(script, tmp_path, capsys):
    tune, fitter = final_tuning, script("fit_dispatch")
    rng = random.Random(0)
    true_constants = dataclasses.replace(final.CONSTANTS, **TRUE_CONSTANTS)
    true = true_numbers(rng)
    doc, rows = synthetic_table(tune, H100, true, true_constants, rng)
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(doc))
    assert fitter.main([str(path), "--rounds", "3"]) == 0        # a coarse fit finds them too
    out = capsys.readouterr().out
    quality = float(re.search(r"fitted numbers: choice quality \(best/chosen\) ([\d.]+)%", out).group(1))
    assert quality >= 99.0, out
    assert "fitted on the other half of the shapes: choice quality" in out and "best over [4096]" in out
    lines = tune.summary(rows, H100)                  # what the tuner prints last
    assert lines[0] == "== squares (NN): % of cuBLAS" and any(line.startswith("== broad suite") for line in lines)


@pytest.mark.slow
def test_fit_dispatch_fits_two_gpus_at_once_and_keeps_what_it_is_told(script, tmp_path, capsys):
    # one set of numbers behind both tables, each GPU's terms its own (SM count, bandwidth)
    tune, fitter = final_tuning, script("fit_dispatch")
    rng = random.Random(1)
    true_constants = dataclasses.replace(final.CONSTANTS, **TRUE_CONSTANTS)
    true = true_numbers(rng)
    paths = []
    for device in (REFERENCE, H100):
        doc, _ = synthetic_table(tune, device, true, true_constants, rng)
        paths.append(tmp_path / f"{device.name}.json")
        paths[-1].write_text(json.dumps(doc))
    assert fitter.main([*map(str, paths), "--keep", "flat.efficiency", "--rounds", "5"]) == 0
    out = capsys.readouterr().out
    for device in (REFERENCE, H100):
        line = re.search(rf"fitted numbers \({re.escape(device.label)}\): choice quality \(best/chosen\) ([\d.]+)%", out)
        assert line and float(line.group(1)) >= 99.0, out
        assert f"fitted on the other half of the shapes ({device.label})" in out
    flat = next(c for c in final.CANDIDATES if c.name == "flat")
    assert f"flat: efficiency {flat.efficiency:.3f}," in out       # kept as the first table has it
    # the joint spread is the two tables' squared deviations over all their options
    tabs = fitter.Tables([fitter.Table(json.loads(p.read_text())) for p in paths])
    sums = [t.spread_sum(true, true_constants, range(len(t.shapes))) for t in tabs.tables]
    assert math.isclose(tabs.spread(true, true_constants, tabs.shapes), sum(x for x, _ in sums) / sum(n for _, n in sums))
    assert tabs.key((1, 0)) == tabs.tables[1].shapes[0]


def test_a_table_from_before_a_constant_existed_reads_as_the_model_was_then():
    fitter = dispatch_fit
    old = {k: v for k, v in dataclasses.asdict(final.CONSTANTS).items() if k not in ("exposed", "launch_us", "full_warps")}
    old["shared_us"] = 5.6                                                 # a fixed cost then
    _, constants = fitter.table_numbers(dict(constants=old, candidates={}))
    assert constants.exposed == 1.0 and constants.launch_us == 0.0        # the defaults: the terms as they were
    assert constants.alone == final.CONSTANTS.alone                       # what the table has, it keeps
    assert constants.full_warps == 0.0                                    # no cap on a lone block then
    # and its shared_us was a fixed cost: the same cost at 8 parts, per doubling
    assert math.isclose(constants.shared_us * math.log2(8), 5.6)
    now = {k: v for k, v in dataclasses.asdict(final.CONSTANTS).items()}
    assert fitter.table_numbers(dict(constants=now, candidates={}))[1].shared_us == final.CONSTANTS.shared_us
    # tune_final stores every number of every candidate; they read back as the model had them
    stored = json.loads(json.dumps({c.name: {k: v for k, v in dataclasses.asdict(c).items() if k != "name"}
                                    for c in final.CANDIDATES}))
    cands, _ = fitter.table_numbers(dict(constants=old, candidates=stored))
    for c in final.CANDIDATES:
        p = dict(c.params, A_T=1)
        assert cands[c.name].efficiency_on(p, 1000, 1001, 999) == c.efficiency_on(p, 1000, 1001, 999)
        assert (cands[c.name].edge, cands[c.name].stream_k) == (c.edge, c.stream_k)


def test_stream_k_is_only_offered_where_its_32_bit_numbering_fits():
    huge_k = (256, 256, 2**30)
    p = dict(SPEC.resolve({}), STREAMK=1)
    assert not final.stream_k_fits(p, *huge_k, REFERENCE)
    with pytest.raises(ConfigError, match="32-bit"):
        SPEC.geometry(p, *huge_k, REFERENCE)
    assert not choose_config(*huge_k, REFERENCE)["STREAMK"]
    assert final.stream_k_fits(p, 8192, 8192, 8192, REFERENCE)


H100_STALE = pytest.mark.xfail(strict=True, reason="the H100's broad-suite record predates the dispatch numbers "
                               "re-fitted on the H200's tables (shared_us): at 83x2453x7534 the dispatcher now "
                               "chooses another config; record the broad suite again on an H100")


@pytest.mark.parametrize("device", [REFERENCE, pytest.param(H100, marks=H100_STALE)], ids=lambda d: d.name)
def test_the_recorded_broad_suite_ran_the_configs_the_dispatcher_chooses_now(device):
    # final_experiments --only chosen times both where they differ: after a change to the
    # dispatcher, record the broad suite again, or these rows describe another dispatcher
    assert experiments.plan(["chosen"], experiments.Setup(device)) == []
    # and the question does find a difference where there is one
    small = SPEC.resolve(next(c for c in final.CANDIDATES if c.name == "small").params)
    work = experiments.plan(["chosen"], experiments.Setup(device, choose=lambda *a, **k: dict(small)))
    assert len(work) > len(broad_suite()) // 2
    assert all([it["name"] for it in items] == ["recorded", "chosen"] and items[1]["params"] == small
               for _, _, items, _ in work)


# The questions below plan around a dispatcher's choices: they are asked of one that ranks the options
# of three candidates only (five times faster than the dispatcher, whose own choices
# test_every_choice_is_valid_and_fits_the_shape checks), and plan the same around it.
FEW = tuple(c for c in final.CANDIDATES if c.name in ("large", "narrow", "micro"))


@functools.cache
def _few_choice(*args, **kw) -> dict:
    return choose_config(*args, candidates=FEW, **kw)


def choose_few(*args, **kw) -> dict:
    """choose_config's choice among the options of FEW (a fresh dict, like choose_config's)."""
    return dict(_few_choice(*args, **kw))


def test_the_questions_ask_the_dispatcher_unless_told_otherwise():
    assert experiments.Setup(REFERENCE).choose is choose_config
    assert final.candidate_of(choose_few(185, 320, 89, REFERENCE)).name in {c.name for c in FEW}


def test_the_holdout_question_times_the_choice_on_shapes_outside_the_broad_suite():
    # final_experiments --only holdout: broad suites of other seeds, the dispatcher's choice on each
    work = experiments.plan(["holdout"], experiments.Setup(REFERENCE, choose=choose_few))
    shapes = [shape for _, shape, _, _ in work]
    assert len(shapes) == 48 * len(experiments.HOLDOUT_SEEDS) == len(set(shapes))
    assert not set(shapes) & set(broad_suite())
    assert all(items == [dict(name=items[0]["name"], params=choose_few(*shape, REFERENCE))]
               for _, shape, items, _ in work)


def test_the_fill_question_times_what_each_version_of_the_model_ranks_first():
    # final_experiments --only fill: the first FILL_TOP options of each version in FILL_MODELS, once
    # each, so that the dispatcher's choice with and without fill_hidden are both in the table
    shapes = [(12068, 6648, 249), (185, 320, 89)]
    work = experiments.fill(experiments.Setup(REFERENCE), shapes)
    assert [shape for _, shape, _, _ in work] == shapes
    assert experiments.FILL_MODELS["none"].fill_hidden == 0 and experiments.FILL_MODELS["hidden"].fill_hidden == 1
    for _, shape, items, _ in work:
        timed = [SPEC.resolve(it["params"]) for it in items]
        assert len(timed) == len(set(map(str, timed))) >= experiments.FILL_TOP
        for constants in experiments.FILL_MODELS.values():
            assert SPEC.resolve(final._choose(*shape, REFERENCE, 0, 0, final.CANDIDATES, constants)) in timed


def test_the_unseen_question_times_another_dispatchers_choice_where_it_differs(tmp_path):
    # final_experiments --only unseen: suites of seeds no fit uses; --write-choices writes the
    # dispatcher's choices there for every datasheet GPU (here on a few of them), --choices reads
    # another version's
    shapes = experiments.unseen_shapes()
    fitted = set(broad_suite()) | {s for seed in experiments.HOLDOUT_SEEDS for s in broad_suite(seed=seed)}
    assert len(shapes) == 48 * len(experiments.UNSEEN_SEEDS) and not set(shapes) & fitted
    path = tmp_path / "choices.json"
    experiments.write_choices(path, [REFERENCE, H100], shapes=shapes[:3])
    written = json.loads(path.read_text())
    assert set(written) == {REFERENCE.name, H100.name}
    assert all(written[d.name]["x".join(map(str, s))] == choose_config(*s, d) for d in (REFERENCE, H100)
               for s in shapes[:3])
    # the same dispatcher (its choices through the file's JSON): nothing to time beside the choice
    other = json.loads(json.dumps({REFERENCE.name: {"x".join(map(str, s)): choose_few(*s, REFERENCE) for s in shapes}}))
    work = experiments.plan(["unseen"], experiments.Setup(REFERENCE, choose=choose_few, other=other))
    assert [shape for _, shape, _, _ in work] == shapes
    assert all([it["name"] for it in items] == ["chosen"] for _, _, items, _ in work)
    # another one: both, wherever they differ
    small = SPEC.resolve(next(c for c in final.CANDIDATES if c.name == "small").params)
    work = experiments.plan(["unseen"], experiments.Setup(REFERENCE, choose=lambda *a, **k: dict(small), other=other))
    differ = [items for _, _, items, _ in work if len(items) == 2]
    assert len(differ) > len(shapes) // 2
    assert all(items[1]["name"] == "other" and items[1]["params"] != small for items in differ)
    with pytest.raises(SystemExit, match="no choices for"):
        experiments.plan(["unseen"], experiments.Setup(REFERENCE, choose=choose_few, other={"another GPU": {}}))


def test_the_tiles_question_times_each_tile_beside_the_choice(monkeypatch):
    # on the broad and holdout suites (here the first shapes of them) and n = 4096, 8192
    assert len(experiments.broad_and_holdout()) == 48 * (1 + len(experiments.HOLDOUT_SEEDS))
    some = experiments.broad_and_holdout()[:6]
    monkeypatch.setattr(experiments, "broad_and_holdout", lambda: some)
    work = experiments.plan(["tiles"], experiments.Setup(REFERENCE, choose=choose_few))
    assert [shape for _, shape, _, _ in work] == some + [(4096,) * 3, (8192,) * 3]
    for _, shape, items, _ in work:
        names = {it["name"].split()[0] for it in items}
        assert names == {"chosen", "narrow", "wide", "small", *experiments.TILES}
        assert items[0]["params"] == choose_few(*shape, REFERENCE, packing=False)
    # --tiles: some of them
    picked = experiments.plan(["tiles"], experiments.Setup(REFERENCE, choose=choose_few, tiles=("pair.64x128",)))
    assert {it["name"].split()[0] for it in picked[0][2]} == {"chosen", "narrow", "wide", "small", "pair.64x128"}


def test_the_edges_question_times_each_choice_also_at_whole_tiles():
    # final_experiments --only edges: the choice on every broad and holdout shape, and on the broad
    # suite the same config at the shape rounded up to its tiles (the rows of B and C then aligned)
    work = experiments.plan(["edges"], experiments.Setup(REFERENCE, choose=choose_few))
    suites = 48 * (1 + len(experiments.HOLDOUT_SEEDS))
    assert [shape for _, shape, _, _ in work[:suites]] == experiments.broad_and_holdout()
    for _, (M, N, K), items, _ in work[:suites]:
        chosen = choose_few(M, N, K, REFERENCE)
        guarded = [dict(name="chosen EDGES=0", params=dict(chosen, EDGES=0))] if chosen["EDGES"] else []
        assert [dict(name=it["name"], params=it["params"]) for it in items] == [dict(name="chosen", params=chosen)] + guarded
    rounded = work[suites:]
    assert rounded and len(rounded) <= 48
    for _, (M, N, K), (item,), _ in rounded:
        (shape,) = [s for s in experiments.broad_suite() if item["name"] == f"chosen for {'x'.join(map(str, s))}"]
        p = item["params"]
        assert p == dict(choose_few(*shape, REFERENCE), EDGES=0)
        assert (M % p["BM"], N % p["BN"], N % 4, K) == (0, 0, 0, shape[2]) and (M, N) != shape[:2]
        assert M - shape[0] < p["BM"] and N - shape[1] < p["BN"]


def test_the_unaligned_question_times_each_choice_packed_and_at_aligned_rows():
    # final_experiments --only unaligned: where N % 4 leaves B's rows unaligned, the choice as is,
    # with only B's or only C's rows padded, with B packed first, and at N rounded up to a multiple of 4
    work = experiments.plan(["unaligned"], experiments.Setup(REFERENCE, choose=choose_few))
    pairs = list(zip(work[::2], work[1::2]))
    assert len(pairs) > 48 and len(work) % 2 == 0
    for (_, (M, N, K), items, _), (_, aligned, (at_aligned,), _) in pairs:
        assert N % 4 and aligned == (M, N + 4 - N % 4, K)
        chosen = choose_few(M, N, K, REFERENCE)
        unpacked, pad_b, pad_c, packed = (it["params"] for it in items)
        assert [it["name"] for it in items] == ["unpacked", "unpacked, B rows aligned", "unpacked, C rows aligned",
                                                "packB"]
        assert [it.get("pad") for it in items] == [None, "B", "C", None]
        assert pad_b == pad_c == unpacked
        assert (unpacked["PACK_B"], packed["PACK_B"]) == (0, 1)
        assert packed["EDGES"] == unpacked["EDGES"] == final.edges(chosen, M, N)
        assert dict(unpacked, PACK_B=chosen["PACK_B"], EDGES=chosen["EDGES"]) == chosen
        assert at_aligned["name"] == f"unpacked for {M}x{N}x{K}"
        assert at_aligned["params"] == dict(unpacked, EDGES=final.edges(unpacked, *aligned[:2]))


def test_the_small_question_times_every_option_of_the_smallest_tiles():
    # final_experiments --only small: the smallest products only; every option of tiny and small
    work = experiments.plan(["small"], experiments.Setup(REFERENCE))
    shapes = [shape for _, shape, _, _ in work]
    assert shapes and all(2 * m * n * k <= experiments.SMALL_GFLOP * 1e9 for m, n, k in shapes)
    assert (118, 70, 201) in shapes and (185, 320, 89) in shapes and (4208, 9281, 2423) not in shapes
    by_shape = {shape: items for _, shape, items, _ in work}
    items = by_shape[(118, 70, 201)]
    assert items[0] == dict(name="chosen", params=choose_config(118, 70, 201, REFERENCE, packing=False))
    tiny = next(c for c in final.CANDIDATES if c.name == "tiny")
    offered = list(final.options(tiny, 118, 70, 201, device=REFERENCE, packing=False))
    assert len(offered) > 1
    assert [it["params"] for it in items if it["name"].startswith("tiny ")] == \
        [p for _, p in experiments.ranked_by_model(tiny, (118, 70, 201), REFERENCE, packing=False)]
    assert sum(it["name"].startswith("narrow ") for it in items) <= 3


def test_the_micro_question_times_every_micro_option_beside_the_model_with_and_without_it():
    # final_experiments --only micro: on the smallest products, every option of the 32 x 32 tile, and
    # the first options of the model with it and without it (the table its efficiency is fitted on)
    work = experiments.plan(["micro"], experiments.Setup(REFERENCE))
    shapes = [shape for _, shape, _, _ in work]
    assert all(2 * m * n * k <= experiments.MICRO_GFLOP * 1e9 for m, n, k in shapes)
    assert (185, 320, 89) in shapes and (4208, 9281, 2423) not in shapes
    items = {shape: items for _, shape, items, _ in work}[(185, 320, 89)]
    micro = next(c for c in final.CANDIDATES if c.name == "micro")
    labels = [SPEC.label(SPEC.resolve(it["params"])) for it in items]
    assert len(labels) == len(set(labels))                                  # each config once
    for p in final.options(micro, 185, 320, 89, device=REFERENCE, packing=False):
        assert SPEC.label(SPEC.resolve(p)) in labels
    without = tuple(c for c in final.CANDIDATES if c is not micro)
    for cands in (final.CANDIDATES, without):
        first = final.ranked_options(185, 320, 89, REFERENCE, candidates=cands)[0].params
        assert SPEC.label(SPEC.resolve(first)) in labels
    assert all(final.candidate_of(it["params"]).name != "micro" for it in items if "without" in it["name"])


def test_the_smallest_products_take_the_smallest_thread_tiles():
    # a product of a few MFLOP is the chain of multiply-adds of its blocks: 4 x 4 results per thread
    # (candidate micro) beat 4 x 8 there on an H100 (final_experiments --only micro); the model takes
    # them there on both GPUs, and big products keep the big tiles
    for device in (REFERENCE, H100):
        assert final.candidate_of(choose_config(185, 320, 89, device)).name == "micro"
        assert final.candidate_of(choose_config(4096, 4096, 4096, device)).name != "micro"


def test_the_big_question_times_the_squares_choice_in_every_layout():
    # final_experiments --only big --before OLD.cu: the dispatcher's choice at n = 4096 and 8192 in
    # each layout, beside the other version of the kernel
    specs = {"now": SPEC, "before": SPEC}
    work = experiments.plan(["big"], experiments.Setup(REFERENCE, specs))
    assert [(shape, lay) for _, shape, _, _, lay in work] == [
        ((n, n, n), lay) for n in (4096, 8192) for lay in ("NN", "NT", "TN", "TT")]
    for _, (M, N, K), items, _, lay in work:
        a_t, b_t = final.LAYOUTS[lay]
        assert [it["name"] for it in items] == ["chosen:now", "chosen:before"]
        assert all(it["params"] == choose_config(M, N, K, REFERENCE, a_t, b_t) for it in items)


def test_padded_operands_are_the_same_values_with_rows_16_bytes_apart():
    # tune_final.Tuner.padded (question unaligned): B's or C's rows moved apart to a multiple of 4
    # floats, the values unchanged; A and the other operand untouched
    tune = final_tuning
    host = type("Host", (), {"cupy": np})()
    rng = np.random.default_rng(0)
    A, B, C = (rng.random(s, dtype=np.float32) for s in ((5, 7), (7, 6), (5, 6)))
    ((a, b, c),) = tune.Tuner.padded(host, [(A, B, C)], "B")
    assert a is A and c is C and np.array_equal(b, B) and b.strides == (4 * 8, 4)
    ((a, b, c),) = tune.Tuner.padded(host, [(A, B, C)], "C")
    assert b is B and np.array_equal(c, C) and c.strides == (4 * 8, 4)
