"""helpers.sgemm's plans without a GPU: what a call launches (kernels, grids, arguments), that a
plan is made once per shapes, strides, params and device and found again, the BLAS edge cases
(an empty C, K = 0, alpha = 0), batches and their broadcasting, and the errors that name the fix.

CuPy's arrays, device, stream, compiler and launches are stand-ins (scripts/calls_host_profile.py,
:func:`stand_ins`): each launch is recorded, with its arguments, instead of run. Each test runs on
the three launch paths: the driver's ``cuLaunchKernel`` with the plan's parameter structures (the
values read back through the kernel's own parameter list, parsed from its signature in
kernels/12_*.cu), a graph of the call's kernels with its own copies of the structures, and
CuPy's Function call (a CuPy without ``launchKernel``). What the kernels
compute is checked on the CPU in tests/test_final_on_cpu.py and on a GPU in tests/test_gpu_calls.py.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from helpers.hardware import MAX_GRID_YZ
from helpers.runtime import gemm
from helpers.runtime.spec import ConfigError
from helpers.runtime.specs import final


@pytest.fixture(params=["driver", "cupy", "graph"])
def gpu(script, request):
    """(the stand-ins' module, the list of launches) while helpers.runtime.gemm runs on stand-ins."""
    fake = script("calls_host_profile")
    with fake.stand_ins(driver=request.param != "cupy", graphs=request.param == "graph") as launches:
        yield fake, launches


def value(arg):
    """A launch argument's value: a number as it is, a NumPy scalar's number, an array's pointer."""
    if isinstance(arg, np.generic):
        return arg.item()
    return arg.data.ptr if hasattr(arg, "data") else arg


def kernel_launches(launches, name="sgemm_final"):
    return [L for L in launches if isinstance(L[0], str) and L[0].startswith(name + "<")]


def test_a_plain_call_launches_the_kernel_with_its_leading_dimensions(gpu):
    fake, launches = gpu
    A = fake.Array((300, 200), strides=(4 * 410, 4))                 # a view with a row stride of 410
    B = fake.Array((150, 200)).T                                     # a transposed view
    C = fake.Array((300, 150), strides=(4 * 210, 4))
    plain = dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16)     # one launch
    assert gemm.sgemm(A, B, C, alpha=2.0, beta=0.5, params=plain) is C
    (name, grid, block, args, smem), = launches
    p = gemm.plan_for(A, B, C, plain).params
    assert name == final.SPEC.name_expression(final.SPEC.resolve(p)) and (p["A_T"], p["B_T"]) == (0, 1)
    M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, partials, arrivals = map(value, args)
    assert (M, N, K, lda, ldb, ldc) == (300, 150, 200, 410, 200, 210)
    assert (alpha, beta) == (2.0, 0.5) and (a, b, c) == (A.data.ptr, B.data.ptr, C.data.ptr)
    assert grid == final.plan(p, 300, 150, 200, fake.REFERENCE)[0] and smem == final.smem_bytes(p)


def test_a_column_major_c_swaps_the_pointers(gpu):
    fake, launches = gpu
    A, B = fake.Array((70, 50)), fake.Array((50, 90))
    C = fake.Array((90, 70)).T                                       # column-major 70 x 90
    gemm.sgemm(A, B, C, params=dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16))
    (_, _, _, args, _), = launches
    M, N, K, _, a, lda, b, ldb, _, c, ldc, _, _ = map(value, args)
    assert (M, N, K) == (90, 70, 50) and (a, b, c) == (B.data.ptr, A.data.ptr, C.data.ptr)
    assert (lda, ldb, ldc) == (90, 50, 70)                           # B^T, A^T transposed; C^T row-major


def test_the_plan_is_made_once_and_found_again(gpu, monkeypatch):
    fake, launches = gpu
    made = []
    plan = gemm.Plan
    monkeypatch.setattr(gemm, "Plan", lambda *a, **k: made.append(a) or plan(*a, **k))
    sets = [(fake.Array((128, 64)), fake.Array((64, 96)), fake.Array((128, 96))) for _ in range(8)]
    for _ in range(3):
        for A, B, C in sets:
            gemm.sgemm(A, B, C)
    assert len(made) == 1 and len(kernel_launches(launches)) == 24
    gemm.sgemm(*sets[0], params=dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16))
    gemm.sgemm(sets[0][0], sets[0][1])                               # no C: another key
    assert len(made) == 3
    # another device, or another emulated target: other plans
    monkeypatch.setattr(gemm, "_device_id", lambda: 1)
    A, B, C = (fake.Array(X.shape, device_id=1) for X in sets[0])
    gemm.sgemm(A, B, C)
    monkeypatch.setenv("SGEMM_BOOK_TARGET", "sm_80")
    gemm.sgemm(A, B, C)
    assert len(made) == 5
    with pytest.raises(ValueError, match="lives on GPU 0"):
        gemm.sgemm(sets[1][0], B, C)


def test_split_k_takes_the_streams_workspace(gpu):
    fake, launches = gpu
    params = dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, SPLITK=4)
    A, B, C = fake.Array((100, 3000)), fake.Array((3000, 70)), fake.Array((100, 70))
    gemm.sgemm(A, B, C, params=params)
    gemm.sgemm(A, B, C, params=params)
    (ws,) = gemm._WORKSPACES.values()
    p = gemm.plan_for(A, B, C, params).params
    floats, counters = final.plan(p, 100, 70, 3000, fake.REFERENCE)[1]
    assert ws.n_floats >= floats and ws.n_counters >= counters and ws.counters.filled == 0
    for _, grid, _, args, _ in launches:
        assert grid[2] == 4 and value(args[11]) == ws.base and value(args[12]) == ws.counters.data.ptr


def test_a_call_after_the_streams_workspace_grew_gets_the_new_one(gpu):
    # a graph keeps the workspace addresses it was given: they must follow the stream's workspace
    fake, launches = gpu
    params = dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, SPLITK=4)
    small = fake.Array((100, 3000)), fake.Array((3000, 70)), fake.Array((100, 70))
    big = fake.Array((1000, 3000)), fake.Array((3000, 700)), fake.Array((1000, 700))
    gemm.sgemm(*small, params=params)
    (first,) = gemm._WORKSPACES.values()
    gemm.sgemm(*big, params=params)
    (grown,) = gemm._WORKSPACES.values()
    assert grown is not first and grown.base != first.base and grown.lock is first.lock
    launches.clear()
    gemm.sgemm(*small, params=params)
    (_, _, _, args, _), = launches
    assert (value(args[11]), value(args[12])) == (grown.base, grown.counters.data.ptr)


def test_packing_launches_first_into_the_workspace_and_the_kernel_reads_the_copies(gpu):
    fake, launches = gpu
    A, B = fake.Array((1000, 777)), fake.Array((999, 777)).T        # A along K, B^T along K: both packable
    params = dict(final.SPEC.defaults(), PACK_A=1, PACK_B=1, A_T=1)
    gemm.sgemm(A, B, params=params)
    pa, pb, main = launches
    fa, fb = final.packed_floats(final.SPEC.resolve(dict(params, B_T=0)), 1000, 999, 777)
    (ws,) = gemm._WORKSPACES.values()
    assert (pa[0], pb[0]) == ("pack_kmajor<1>", "pack_kmajor<1>")
    assert [value(x) for x in pa[3]] == [1000, 777, A.data.ptr, 777, ws.base, 1000]
    assert [value(x) for x in pb[3]] == [999, 777, B.data.ptr, 777, ws.base + 4 * fa, 1000]
    args = [value(x) for x in main[3]]
    assert args[4:8] == [ws.base, 1000, ws.base + 4 * fa, 1000]       # A^T and B row-major, rows padded to 4
    assert args[11:] == [0, 0]                                        # no partial tiles


def test_slabs_are_added_by_a_second_launch(gpu):
    fake, launches = gpu
    params = dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16, SPLITK=8, REDUCE=1)
    A, B = fake.Array((100, 3000)), fake.Array((3000, 70))
    C = fake.Array((100, 70), strides=(4 * 72, 4))
    gemm.sgemm(A, B, C, alpha=1.5, beta=-1.0, params=params)
    main, add = launches
    (ws,) = gemm._WORKSPACES.values()
    assert add[0] == "add_parts"
    assert [value(x) for x in add[3]] == [100, 70, 8, 1.5, ws.base, 72, -1.0, C.data.ptr, 72]
    assert value(main[3][11]) == ws.base


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.5])
def test_k_zero_and_alpha_zero_scale_c_without_a_launch(gpu, beta):
    # BLAS: K = 0 or alpha = 0 leaves C = beta * C; beta = 0 writes zeros over whatever C held
    fake, launches = gpu
    for A, B in ((fake.Array((5, 0)), fake.Array((0, 7))), (fake.Array((5, 3)), fake.Array((3, 7)))):
        C = fake.Array((5, 7))
        alpha = 0.0 if A.shape[1] else 1.0
        assert gemm.sgemm(A, B, C, alpha=alpha, beta=beta) is C
        if beta == 0:
            assert C.filled == 0 and not launches
        elif beta == 1:
            assert C.filled is None and not launches
        else:
            assert launches.pop() == ("multiply", beta, C) and not launches
    out = gemm.sgemm(fake.Array((5, 0)), fake.Array((0, 7)))
    assert out.shape == (5, 7) and out.filled == 0


def test_an_empty_c_returns_at_once(gpu):
    fake, launches = gpu
    C = fake.Array((0, 7))
    assert gemm.sgemm(fake.Array((0, 3)), fake.Array((3, 7)), C, beta=2.0) is C
    assert gemm.sgemm(fake.Array((4, 3)), fake.Array((3, 0))).shape == (4, 0)
    assert gemm.sgemm(fake.Array((0, 4, 3)), fake.Array((3, 5))).shape == (0, 4, 5)
    assert not launches and C.filled is None


def test_a_batch_is_one_launch_of_the_batched_kernel(gpu):
    fake, launches = gpu
    A, B = fake.Array((6, 70, 50)), fake.Array((6, 50, 90))
    C = gemm.sgemm(A, B)
    (name, grid, _, args, _), = launches
    p = gemm.chosen(A, B)
    assert name == final.batched_expression(final.SPEC.resolve(p)) and name.startswith("sgemm_final_batched<")
    assert C.shape == (6, 70, 90) and grid[2] == 6 * p["SPLITK"]
    assert [value(x) for x in args[13:]] == [70 * 50, 50 * 90, 70 * 90]


def test_a_two_d_operand_is_broadcast_over_the_batch(gpu):
    fake, launches = gpu
    A, B = fake.Array((128, 64)), fake.Array((5, 64, 32))
    C = fake.Array((5, 128, 32), strides=(4 * 128 * 40, 4 * 40, 4))     # C[:, :, :32] of a wider array
    gemm.sgemm(A, B, C)
    (_, grid, _, args, _), = launches
    assert [value(x) for x in args[13:]] == [0, 64 * 32, 128 * 40] and value(args[10]) == 40
    gemm.sgemm(fake.Array((1, 128, 64)), B)                          # a batch of 1 broadcasts too
    assert [value(x) for x in launches[-1][3][13:]] == [0, 64 * 32, 128 * 32]


def test_a_batched_column_major_c_swaps_the_batch_strides_too(gpu):
    fake, launches = gpu
    A, B = fake.Array((3, 40, 20)), fake.Array((20, 30))             # B broadcast
    C = fake.Array((3, 30, 40)).transpose(0, 2, 1)                  # each product column-major
    gemm.sgemm(A, B, C)
    (_, _, _, args, _), = launches
    M, N, K = (value(x) for x in args[:3])
    assert (M, N, K) == (30, 40, 20) and value(args[4]) == B.data.ptr and value(args[6]) == A.data.ptr
    assert [value(x) for x in args[13:]] == [0, 40 * 20, 30 * 40]


def test_more_products_than_a_grid_holds_go_in_several_launches(gpu):
    fake, launches = gpu
    n = MAX_GRID_YZ + 100
    A, B = fake.Array((n, 8, 8)), fake.Array((8, 8))
    gemm.sgemm(A, B)
    p = gemm.chosen(A, B)
    per = MAX_GRID_YZ // p["SPLITK"]
    assert len(launches) == -(-n // per)
    firsts = [value(L[3][4]) for L in launches]
    assert firsts == [A.data.ptr + 4 * 64 * i * per for i in range(len(launches))]
    assert sum(L[1][2] for L in launches) == n * p["SPLITK"]


def test_batch_and_layout_errors_name_the_fix(gpu):
    fake, _ = gpu
    with pytest.raises(ValueError, match="cannot be paired"):
        gemm.sgemm(fake.Array((3, 4, 5)), fake.Array((2, 5, 6)))
    with pytest.raises(ValueError, match="overlap"):
        gemm.sgemm(fake.Array((3, 4, 5)), fake.Array((5, 6)), fake.Array((3, 4, 6), strides=(4 * 6, 4 * 6, 4)))
    with pytest.raises(ValueError, match=r"pass a C of shape \(3, 4, 6\)"):
        gemm.sgemm(fake.Array((3, 4, 5)), fake.Array((5, 6)), fake.Array((4, 6)))
    with pytest.raises(ValueError, match="2-D matrix or a 3-D batch"):
        gemm.sgemm(fake.Array((2, 3, 4, 5)), fake.Array((5, 6)))
    with pytest.raises(ValueError, match="no C was given"):
        gemm.sgemm(fake.Array((4, 5)), fake.Array((5, 6)), beta=1.0)
    with pytest.raises(ConfigError, match="a batch runs plain or split-K blocks"):
        gemm.sgemm(fake.Array((3, 64, 64)), fake.Array((64, 64)), params=dict(final.SPEC.defaults(), STREAMK=1))
    with pytest.raises(TypeError, match="float32"):
        gemm.sgemm(fake.Array((4, 5), dtype=np.float64), fake.Array((5, 6)))
    with pytest.raises(TypeError, match="real number"):
        gemm.sgemm(fake.Array((4, 5)), fake.Array((5, 6)), alpha=True)


def test_operands_of_two_to_the_31_elements_are_planned_with_64_bit_offsets(gpu):
    # the kernel's offsets are 64-bit; only M, N, K and the leading dimensions are 32-bit ints
    fake, launches = gpu
    M = 2**21 + 37
    A, B = fake.Array((M, 1024)), fake.Array((1024, 64))
    gemm.sgemm(A, B)
    (_, grid, _, args, _), = launches
    assert value(args[0]) == M and M * 1024 >= 2**31
    with pytest.raises(ValueError, match="does not fit the kernel's int"):
        gemm.sgemm(fake.Array((3, 5), strides=(4 * 2**31, 4)), fake.Array((5, 6)))


def test_a_grid_taller_than_65535_tiles_lays_them_along_x():
    p = final.SPEC.resolve(dict(final.SPEC.defaults(), BM=32, BN=32, WM=16, WN=32, TM=4, TN=4, BK=16, STAGES=3))
    grid, _ = final.plan(p, 32 * 70000, 64, 128, gemm.hardware.Device.from_datasheet("NVIDIA H200"))
    assert grid == (2 * 70000, 1, 1)
    grid, _ = final.plan(p, 32 * 100, 64, 128, gemm.hardware.Device.from_datasheet("NVIDIA H200"))
    assert grid == (2, 100, 1)


def test_the_dispatcher_fills_the_gpu_with_the_batch():
    # a batch is more tiles: 64 small products choose no split of K where one alone splits
    H200 = gemm.hardware.Device.from_datasheet("NVIDIA H200")
    one, many = final.choose_config(128, 128, 4096, H200), final.choose_config(128, 128, 4096, H200, batch=256)
    assert one["SPLITK"] > 1 or one["STREAMK"]
    assert many["SPLITK"] < max(one["SPLITK"], 2) and not many["STREAMK"] and not many["REDUCE"]
    for p in final.options(final.CANDIDATES[0], 1000, 1000, 1000, device=H200, batch=4):
        assert final.batch_problem(p) is None


def test_a_big_workspace_lives_for_its_call_only(gpu):
    # a stream keeps a workspace up to gemm.KEEP_BYTES; a product that needs more gets its own each call
    fake, launches = gpu
    A, B = fake.Array((9000, 8000)), fake.Array((8000, 64))
    params = dict(final.SPEC.defaults(), PACK_A=1, A_T=1)
    gemm.sgemm(A, B, params=params)
    assert 4 * gemm.plan_for(A, B, params=params).floats > gemm.KEEP_BYTES and not gemm._WORKSPACES
    gemm.sgemm(fake.Array((100, 64)), fake.Array((64, 3000)), params=dict(final.SPEC.defaults(), SPLITK=2))
    assert len(gemm._WORKSPACES) == 1


# ---------------------------------------------------------------- the launch parameters
SMALL = dict(final.SPEC.defaults(), BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=16)


def named(fake, launch) -> dict:
    """A recorded driver launch's parameters by name, as the kernel's signature names and orders them."""
    name, _, _, values, _ = launch
    return dict(zip((n for n, _ in fake.kernel_parameters(name.split("<")[0])), values))


def test_the_parameter_lists_are_the_kernels_own(script):
    fake = script("calls_host_profile")
    assert gemm.FINAL_PARAMS == fake.kernel_parameters("sgemm_final")
    assert gemm.BATCHED_PARAMS == fake.kernel_parameters("sgemm_final_batched")
    assert gemm.PACK_PARAMS == fake.kernel_parameters("pack_kmajor")
    assert gemm.ADD_PARAMS == fake.kernel_parameters("add_parts")


def test_a_value_a_parameter_cannot_hold_is_refused(script):
    fake = script("calls_host_profile")
    fn = fake.Function("add_parts", [])
    with pytest.raises(ValueError, match="M = 2147483648 does not fit the kernel's int parameter"):
        gemm.Launch(fn, (1, 1, 1), (256, 1, 1), 0, gemm.ADD_PARAMS, M=2**31, N=1)
    launch = gemm.Launch(fn, (4,), (256,), 0, gemm.ADD_PARAMS, M=2**31 - 1, N=7, ldw=8)
    assert (launch.grid, launch.block) == ((4, 1, 1), (256, 1, 1))
    assert fake.read_parameters(launch.params, fake.kernel_parameters("add_parts"))[:6] == [2**31 - 1, 7, 0, 0, 0, 8]


@pytest.mark.parametrize("graphs", [False, True], ids=["one by one", "graph"])
@pytest.mark.parametrize("path", ["plain", "split-K", "slabs", "packed", "batched in parts"])
def test_each_launch_gets_its_parameters_in_the_kernels_order(script, path, graphs):
    # the driver reads each parameter through the pointer array: every value is read back here the
    # same way, typed and ordered by the kernel's signature in kernels/12_*.cu
    fake = script("calls_host_profile")
    alpha, beta = 1.5, -0.25
    with fake.stand_ins(graphs=graphs) as launches:
        if path == "batched in parts":
            n = MAX_GRID_YZ + 100
            A, B, C = fake.Array((n, 8, 8)), fake.Array((8, 8)), fake.Array((n, 8, 8))
            params = None
        elif path == "packed":
            A, B, C = fake.Array((1000, 777)), fake.Array((999, 777)).T, fake.Array((1000, 999))
            params = dict(final.SPEC.defaults(), PACK_A=1, PACK_B=1, A_T=1)
        else:
            A, B, C = fake.Array((100, 3000)), fake.Array((3000, 70)), fake.Array((100, 70), strides=(4 * 72, 4))
            params = dict(SMALL, **{"plain": {}, "split-K": dict(SPLITK=4), "slabs": dict(SPLITK=8, REDUCE=1)}[path])
        gemm.sgemm(A, B, C, alpha=alpha, beta=beta, params=params)
        plan = gemm.plan_for(A, B, C, params)
        ws = next(iter(gemm._WORKSPACES.values()), None)
        got = [(L[0].split("<")[0], named(fake, L)) for L in launches]
        # a batch in several launches goes one by one
        assert isinstance(plan.graphs[0], fake.LaunchGraph) == (graphs and path != "batched in parts")
    M, N, K = plan.call.M, plan.call.N, plan.call.K
    main = dict(M=M, N=N, K=K, alpha=alpha, A=A.data.ptr, lda=K, B=B.data.ptr, ldb=N, beta=beta, C=C.data.ptr,
                ldc=N, partials=0, arrivals=0)
    if path == "plain":
        assert got == [("sgemm_final", dict(main, ldc=72))] and ws is None
    elif path == "split-K":
        assert got == [("sgemm_final", dict(main, ldc=72, partials=ws.base, arrivals=ws.counters.data.ptr))]
    elif path == "slabs":
        arrivals = ws.counters.data.ptr if ws.counters is not None else 0
        assert got == [("sgemm_final", dict(main, ldc=72, partials=ws.base, arrivals=arrivals)),
                       ("add_parts", dict(M=M, N=N, parts=8, alpha=alpha, W=ws.base, ldw=72, beta=beta,
                                          C=C.data.ptr, ldc=72))]
    elif path == "packed":
        fa = final.packed_floats(plan.params, M, N, K)[0]
        assert got == [("pack_kmajor", dict(R=M, K=K, X=A.data.ptr, ld=K, dst=ws.base, ldd=1000)),
                       ("pack_kmajor", dict(R=N, K=K, X=B.data.ptr, ld=K, dst=ws.base + 4 * fa, ldd=1000)),
                       ("sgemm_final", dict(main, A=ws.base, lda=1000, B=ws.base + 4 * fa, ldb=1000))]
    else:
        per = MAX_GRID_YZ // plan.params["SPLITK"]
        starts = range(0, n, per)
        assert len(got) == len(starts) == 2
        assert got == [("sgemm_final_batched", dict(main, A=A.data.ptr + 4 * 64 * s, lda=8, C=C.data.ptr + 4 * 64 * s,
                                                     batch_a=64, batch_b=0, batch_c=64)) for s in starts]


def test_a_plan_keeps_the_graphs_of_a_few_streams(script):
    # a program that makes a new stream for each call would otherwise keep a graph per call
    fake = script("calls_host_profile")
    with fake.stand_ins(graphs=True) as launches:          # restores gemm._current_stream on leaving
        A, B, C = fake.Array((128, 64)), fake.Array((64, 96)), fake.Array((128, 96))
        streams = [type("Stream", (fake.Stream,), {"ptr": 1000 + i}) for i in range(gemm.STREAM_GRAPHS + 5)]
        for stream in streams:
            gemm._current_stream = lambda stream=stream: stream
            gemm.sgemm(A, B, C, params=SMALL)
        plan = gemm.plan_for(A, B, C, SMALL)
        assert list(plan.graphs) == [s.ptr for s in streams[-gemm.STREAM_GRAPHS:]]
        got = [named(fake, L) for L in launches]
    assert len(got) == len(streams) and all((g["A"], g["B"], g["C"]) == (A.data.ptr, B.data.ptr, C.data.ptr)
                                            for g in got)


def call_with_another_call_at_first_launch(first: tuple, other: tuple) -> None:
    """Call sgemm(*first) (operands, params) where its first launch starts sgemm(*other) in another
    thread and gives it 0.2 s before going on: what a lock must keep apart, it keeps apart then."""
    record, others = gemm._launch_kernel, []

    def launch(*args):
        if not others:
            others.append(threading.Thread(target=gemm.sgemm, args=other[0], kwargs=dict(params=other[1])))
            others[0].start()
            others[0].join(0.2)
        record(*args)

    gemm._launch_kernel = launch
    try:
        gemm.sgemm(*first[0], params=first[1])
        others[0].join()
    finally:
        gemm._launch_kernel = record


@pytest.mark.parametrize("graphs", [False, True], ids=["one by one", "graph"])
def test_a_second_thread_calling_the_same_plan_waits_for_the_first_launch(script, graphs):
    # a call writes its operands into the plan's parameter structure and launches under the plan's
    # lock: a second thread's call, started while the first launches, cannot overwrite them
    fake = script("calls_host_profile")
    with fake.stand_ins(graphs=graphs) as launches:
        sets = [(fake.Array((128, 64)), fake.Array((64, 96)), fake.Array((128, 96))) for _ in range(2)]
        gemm.sgemm(*sets[0], params=SMALL)
        launches.clear()
        call_with_another_call_at_first_launch((sets[0], SMALL), (sets[1], SMALL))
        got = [named(fake, L) for L in launches]
    assert [(g["A"], g["B"], g["C"]) for g in got] == [(A.data.ptr, B.data.ptr, C.data.ptr) for A, B, C in sets]


@pytest.mark.parametrize("graphs", [False, True], ids=["one by one", "graph"])
def test_calls_of_two_plans_on_one_stream_keep_their_launches_together(script, graphs):
    # plans of one stream share its workspace: a slabs call's product and its adding of the slabs
    # reach the stream with nothing between them, even while another thread calls another plan that
    # writes the same workspace
    fake = script("calls_host_profile")
    slabs = dict(SMALL, SPLITK=4, REDUCE=1)
    split = dict(SMALL, SPLITK=2)
    with fake.stand_ins(graphs=graphs) as launches:
        ops = [(fake.Array((128, 64)), fake.Array((64, 96)), fake.Array((128, 96))) for _ in range(2)]
        gemm.sgemm(*ops[0], params=slabs)
        gemm.sgemm(*ops[1], params=split)
        launches.clear()
        call_with_another_call_at_first_launch((ops[0], slabs), (ops[1], split))
        names = [L[0].split("<")[0] for L in launches]
    assert names == ["sgemm_final", "add_parts", "sgemm_final"], names
