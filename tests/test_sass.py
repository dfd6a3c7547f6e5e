"""helpers.runtime.sass on small listings, and the register-bank model on the final kernel."""
from __future__ import annotations

from helpers import hardware
from helpers.runtime import offline, sass
from helpers.runtime.specs.final import CANDIDATES

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   FFMA R1, R2, R4.reuse, R6 ;
        /*0020*/                   FFMA R3, R5, R4, R7 ;
        /*0030*/                   FFMA R9, R8, R11, R9 ;
        /*0040*/                   FFMA R10, R8, R13, R10 ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   FFMA R12, R14, R15, R12 ;
        /*0070*/                   BRA 0x0 ;
"""


def test_loops_are_the_bodies_of_backward_branches():
    inner, outer = sass.loops(LISTING)
    assert [i.address for i in sass.instructions(inner)] == [0x10, 0x20, 0x30, 0x40, 0x50]
    assert len(sass.instructions(outer)) == 8
    assert sass.inner_loop(LISTING) == outer                # the longest
    assert sass.innermost_loop(LISTING) == inner and sass.innermost_loop(LISTING, "LDS") == ""


def test_bank_clashes_count_reads_beyond_the_first_per_bank():
    # R2, R4, R6 all even: two clashes; then R4 comes from the reuse cache and R5, R7 (odd)
    # clash once; R8 even with R11, R9 odd: one; R8 again but not marked for reuse: R8 and
    # R10 even, one
    assert sass.bank_clashes(sass.loops(LISTING)[0]) == (4, 5)
    # four banks: only R2 and R6 share one
    assert sass.bank_clashes(sass.loops(LISTING)[0], banks=4) == (4, 1)


def test_split_k_parts_leave_the_accumulators_free(nvrtc):
    # a float4 store of the accumulators pins them to aligned registers whose banks match the
    # B fragment's: then nearly every FFMA of the row-by-row loop clashes (kernels/12_final.cu, fresh4)
    flat = next(c for c in CANDIDATES if c.name == "flat").params
    shares = []
    for extra in ({}, dict(SPLITK=3), dict(SPLITK=4, REDUCE=1)):
        text = offline.sass("final", dict(flat, A_T=1, **extra), hardware.default())
        ffmas, clashes = sass.bank_clashes(sass.innermost_loop(text))
        shares.append(clashes / ffmas)
    assert max(shares) < 0.3, shares


def test_128_result_tiles_compile_without_spills_where_the_rule_allows_them(nvrtc):
    # specs/final.py registers_fit: every 128-result candidate, plain, split-K, slabs and stream-K,
    # in every layout the rule allows, compiles without spills (a config the rule lets through
    # must not spill); the block that adds the parts reads half the thread tile at a time, which
    # keeps split-K and stream-K under the 255-register cap
    from helpers.runtime.specs.final import LAYOUTS, SPEC, registers_fit

    device = hardware.default()
    checked = 0
    for c in CANDIDATES:
        for a_t, b_t in LAYOUTS.values():
            for extra in ({}, dict(SPLITK=3), dict(SPLITK=4, REDUCE=1), dict(STREAMK=1)):
                p = SPEC.resolve(dict(c.params, A_T=a_t, B_T=b_t, **extra))
                if p["TM"] * p["TN"] < 128 or not SPEC.is_valid(dict(p, STREAMK=0, SPLITK=1, REDUCE=0), device):
                    continue
                assert registers_fit(p) is None, (c.name, a_t, b_t, extra)
                res = offline.resources(SPEC, p, device)
                assert not res.spills, (c.name, a_t, b_t, extra, res.registers)
                checked += 1
    assert checked >= 36


def test_the_launch_bound_holds_64_result_tiles_to_four_blocks_without_spills_where_python_says(nvrtc):
    # kernels/12_final.cu fin::min_blocks and specs/final.py bounded say the same: a bounded config
    # compiles within the budget of BOUND_BLOCKS blocks per SM without spilling (the model counts
    # that many blocks), also with EDGES=1 (tiles over an edge moved back), which the dispatcher
    # sets wherever C has such tiles; an unbounded one keeps the compiler's count, mostly above it
    from helpers.runtime.specs.final import BOUND_BLOCKS, LAYOUTS, SPEC, blocks_per_sm, bounded, edges

    device = hardware.default()
    found, above, with_edges = {True: 0, False: 0}, 0, 0
    for c in CANDIDATES:
        if c.params["TM"] * c.params["TN"] != 64:
            continue
        for a_t, b_t in LAYOUTS.values():
            for extra in ({}, dict(STAGES=3), dict(SPLITK=3), dict(STREAMK=1)):
                p = SPEC.resolve(dict(c.params, A_T=a_t, B_T=b_t, **extra))
                res = offline.resources(SPEC, p, device)
                budget = device.register_budget(SPEC.threads(p), BOUND_BLOCKS)
                if bounded(p):
                    assert res.registers <= budget and not res.spills, (c.name, a_t, b_t, extra, res.registers)
                    assert blocks_per_sm(p, device) == BOUND_BLOCKS
                    if edges(p, p["BM"] + 1, p["BN"] + 1):
                        res = offline.resources(SPEC, dict(p, EDGES=1), device)
                        assert res.registers <= budget and not res.spills, (c.name, a_t, extra, "EDGES=1", res.registers)
                        with_edges += 1
                else:
                    above += res.registers > budget
                found[bounded(p)] += 1
    assert found[True] >= 8 and above >= 0.8 * found[False] >= 16 and with_edges >= 8, (found, above, with_edges)
