"""The rules kernels/12_final.cu states in C++ and helpers/runtime/specs/final.py states in Python
agree on every config of a broad set. g++ evaluates the C++ rules at compile time, one probe (a
static_assert naming the value Python gives) per config, all in one compile
(helpers/runtime/cpu_cuda.py, compile_errors):

* the copies (fin::TileCopy): which tiles a block's threads copy evenly (its static_asserts
  against copy_problem), the threads per row (TPR against threads_per_row) and the floats of a
  shared k-row (LD: the tile plus PAD where the copies transpose);
* the shared memory: a stage (fin::Config::STAGE against smem_bytes) and the static part
  (fin::Segment against SEGMENT_BYTES);
* which configs copy a row-major A 16 threads to a row (fin::Config::WIDE_A against wide_a), and
  that those copies split evenly wherever Python makes them wide;
* the launch bound (fin::min_blocks against bounded and BOUND_BLOCKS).
"""
from __future__ import annotations

import itertools

import pytest

from helpers.runtime.specs import final
from helpers.runtime.specs.final import SPEC
from helpers.settings import KERNEL_DIR

cpu_cuda = pytest.importorskip("helpers.runtime.cpu_cuda")
FILE = KERNEL_DIR / "12_final.cu"
OWN = "static assertion failed: python"          # a probe's own static_assert: C++ gives another value


def errors(probes: list[str]) -> dict[int, list[str]]:
    try:
        return cpu_cuda.compile_errors(FILE, probes)
    except cpu_cuda.CompilerMissing as exc:
        pytest.skip(str(exc))


def test_a_probe_that_breaks_a_kernel_rule_or_disagrees_is_reported():
    found = errors(['static_assert(fin::TileCopy<32, 8, 512, true, 0, false>::TPR == 8, "python");',
                    'static_assert(fin::TileCopy<64, 16, 128, false, 0, false>::TPR == 8, "python");',
                    'static_assert(fin::TileCopy<64, 16, 128, false, 0, false>::TPR == 9, "python");'])
    assert sorted(found) == [0, 2]
    assert "4-byte copies" in found[0][0]          # the kernel's own static_assert
    assert found[2] == [OWN]


COPY_TILES = list(itertools.product(range(32, 257, 32), (8, 16, 32), range(32, 1025, 32), (False, True)))


def test_copies_split_evenly_in_cpp_where_they_do_in_python_with_the_same_threads_per_row_and_padding():
    probes, expected = [], []
    for rows, bk, threads, along in COPY_TILES:
        why = final.copy_problem("A", "BM", rows, threads, bk, along)
        ld = rows + (final.PAD if along else 0)
        tpr = final.threads_per_row(threads, bk, along)
        copy = f"fin::TileCopy<{rows}, {bk}, {threads}, {str(along).lower()}, 0, false>"
        probes.append(f'static_assert({copy}::TPR == {tpr} && {copy}::LD == {ld}, "python");')
        expected.append(why)
    found = errors(probes)
    refused = {i for i, msgs in found.items() if any(m != OWN for m in msgs)}
    assert sum(why is not None for why in expected) > 100           # the set holds both kinds
    wrong = [(COPY_TILES[i], expected[i], found.get(i)) for i in range(len(probes))
             if (i in refused) != (expected[i] is not None) or (expected[i] is None and i in found)]
    assert not wrong, wrong[:10]


def configs() -> list[dict]:
    """Every candidate and test config in every layout, stage count and k-slice, plain, split
    along K (added by the last block, or as slabs) and stream-K: those that obey the kernel's
    rules (the device's limits aside)."""
    bases = [c.params for c in final.CANDIDATES] + [p for _, p in final.TEST_CONFIGS]
    out = []
    for base, (a_t, b_t), stages, bk, extra in itertools.product(
            bases, final.LAYOUTS.values(), (2, 3, 4, 5), (8, 16, 32),
            (dict(SPLITK=1), dict(SPLITK=4), dict(SPLITK=4, REDUCE=1), dict(SPLITK=1, STREAMK=1))):
        p = SPEC.resolve(dict(base, A_T=a_t, B_T=b_t, STAGES=stages, BK=bk) | dict(REDUCE=0, STREAMK=0) | extra)
        if not any(rule(p) for rule in SPEC.rules) and p not in out:
            out.append(p)
    return out


def test_every_config_python_accepts_compiles_with_the_shared_memory_and_copies_python_gives_it():
    found_configs = configs()
    probes = []
    for p in found_configs:
        args = ", ".join(str(p[q.name]) for q in SPEC.params if q.template)
        cfg = f"fin::Config<{args}, false>"
        wide = final.wide_a(p)
        tpr = final.threads_per_row(final.warp_threads(p), p["BK"], final.along_k(p, "A"), wide)
        probes.append(f'static_assert(4 * {cfg}::STAGES * {cfg}::STAGE == {final.smem_bytes(p)}'
                      f' && {cfg}::WIDE_A == {str(wide).lower()} && {cfg}::CopyA::TPR == {tpr}, "python");')
    probes.append(f'static_assert(sizeof(fin::Segment) == {final.SEGMENT_BYTES}, "python");')
    found = errors(probes)
    assert len(found_configs) > 1000
    assert 50 < sum(map(final.wide_a, found_configs)) < len(found_configs) / 2     # both kinds
    assert not found, [(found_configs[i] if i < len(found_configs) else "Segment", found[i]) for i in list(found)[:10]]


LAUNCH = list(itertools.product((4, 8, 12, 16), (4, 8, 12, 16), (32, 64, 128, 256, 512), (8, 16, 32), (2, 3, 4, 5),
                                (1, 2, 16), (0, 1), (0, 1), (0, 1)))


def test_the_launch_bound_asks_for_blocks_where_python_counts_on_them():
    probes = []
    for tm, tn, threads, bk, stages, splitk, streamk, a_t, b_t in LAUNCH:
        p = dict(TM=tm, TN=tn, BM=threads, WM=32, BN=32, WN=32, BK=bk, STAGES=stages, SPLITK=splitk,
                 STREAMK=streamk, A_T=a_t, B_T=b_t)
        assert final.warp_threads(p) == threads
        want = final.BOUND_BLOCKS if final.bounded(p) else 0                # 0: no request
        probes.append(f"static_assert(fin::min_blocks({tm}, {tn}, {threads}, {bk}, {stages}, {splitk}, {streamk}, "
                      f'{a_t}, {b_t}) == {want}, "python");')
    assert 0 < sum(final.bounded(dict(TM=c[0], TN=c[1], BM=c[2], WM=32, BN=32, WN=32, BK=c[3], STAGES=c[4],
                                      SPLITK=c[5], STREAMK=c[6], A_T=c[7], B_T=c[8])) for c in LAUNCH) < len(LAUNCH)
    found = errors(probes)
    assert not found, [(LAUNCH[i], found[i]) for i in list(found)[:10]]
