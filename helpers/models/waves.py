"""Warp tiles, waves and L2 reuse: the geometry of the warp-tiled kernels.

Taught in the chapters "Warp tiling" (book/10_warptiling.md) and "The final kernel"
(book/12_final.md).
"""
from __future__ import annotations

from collections import Counter

from ..hardware import Device, occupancy
from ..runtime import offline, sass
from ..runtime.rules import warp_layout
from ..runtime.spec import KernelSpec, cdiv
from ..runtime.specs import final, get

# The uniform branches between the unguarded path (tiles wholly inside the matrices) and
# the guarded one; forced to true, the compiled loop is the one interior tiles run.
FAST_PATH_GUARDS = ("if (a_inside && k_inside)", "if (b_inside && k_inside)", "if (fast)", "if (fast && vec)")


def thread_cells(p: dict, warp: int, lane: int) -> tuple[list[int], list[int]]:
    """Rows and columns of the block tile that (warp, lane) computes."""
    g = warp_layout(p)
    wm0, wn0 = (warp // g["warps_n"]) * p["WM"], (warp % g["warps_n"]) * p["WN"]
    tr, tc = lane // g["lanes_n"], lane % g["lanes_n"]
    rows = [wm0 + i * g["sub_m"] + 4 * tr + a for i in range(g["wmiter"]) for a in range(4)]
    cols = [wn0 + j * g["sub_n"] + 4 * tc + b for j in range(g["wniter"]) for b in range(4)]
    return rows, cols


def hot_loop_counts(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None) -> dict:
    """Instruction mix of the main loop as interior tiles run it (offline compile).

    The kernels branch (uniformly) between an unguarded path for tiles wholly inside the
    matrices and a guarded one for edge tiles; a static count of the loop would mix both.
    This compiles the kernel with the edge branches forced off, finds the main loop and
    counts its opcodes: the FFMA share is what the SM issues per k-tile in the common case.
    """
    spec = get(kernel)
    src = spec.source()
    for guard in FAST_PATH_GUARDS:
        src = src.replace(guard, "if (true)")
    ops = Counter(i.opcode for i in sass.instructions(sass.inner_loop(offline.sass(spec, params, device, source=src))))
    total = sum(ops.values())
    ffma = sum(v for k, v in ops.items() if k.startswith("FFMA"))
    wide = [k for k in ops if k.startswith("LDS") and k.endswith(".128")]   # LDS.128; LDS.U.128 before sm_80
    lds128 = sum(ops[k] for k in wide)
    lds_other = sum(v for k, v in ops.items() if k.startswith("LDS") and k not in wide)
    return dict(total=total, ffma=ffma, lds128=lds128, lds_other=lds_other, other=total - ffma - lds128 - lds_other,
                ffma_share=ffma / total if total else 0.0, ops=dict(ops))


def block_order(p: dict, gx: int, gy: int) -> list[tuple[int, int]]:
    """(tile row, tile column) of each block in launch order, with the final kernel's
    grouped rasterisation (GROUP block-rows walked column by column; 0: row by row)."""
    out = []
    for pid in range(gx * gy):
        if p["GROUP"]:
            per = p["GROUP"] * gx
            g, r = divmod(pid, per)
            here = min(gy - g * p["GROUP"], p["GROUP"])
            out.append((g * p["GROUP"] + r % here, r // here))
        else:
            out.append(divmod(pid, gx))
    return out


def first_wave_bytes(p: dict, M: int, N: int, K: int, slots: int) -> float:
    """Distinct bytes of A and B that the first ``slots`` blocks of the grid read.

    Blocks that run together share A panels (same block-row) and B panels (same
    block-column); fewer distinct panels per wave means more hits in L2.
    """
    order = block_order(p, cdiv(N, p["BN"]), cdiv(M, p["BM"]))[:slots]
    return 4.0 * K * (len({r for r, _ in order}) * p["BM"] + len({c for _, c in order}) * p["BN"])


def resident_blocks(params: dict, device: Device) -> tuple[int, str]:
    """(blocks of the final kernel one SM holds, where that number comes from).

    From the offline compile's register count and shared memory when the compiler is
    here; otherwise from the spec's register estimate."""
    threads = final.SPEC.threads(params)
    try:
        res = offline.resources(final.SPEC, params, device)
    except offline.ToolMissing:
        return final.blocks_per_sm(params, device), "register estimate"
    return occupancy(threads, res.registers, res.smem, device).blocks_per_sm, "offline compile"


def waves_of(params: dict, M: int, N: int, K: int, device: Device, per_sm: int | None = None) -> dict:
    """How a final-kernel config's grid fills ``device`` at M x N x K.

    The grid has ``tiles * SPLITK`` blocks (stream-K: the plan's grid); the GPU runs ``slots = SMs * per_sm`` of them
    at a time, so the blocks run in ``waves = ceil(blocks / slots)`` rounds. If every block
    takes the same time, the last round has ``last_wave`` of its slots busy, and over the
    whole run the slots are busy ``utilisation = blocks / (waves * slots)`` of the time.
    """
    if per_sm is None:
        per_sm, _ = resident_blocks(params, device)
    tiles = final.tiles_of(params, M, N)
    if params["STREAMK"]:           # g blocks share the first tiles' k-tiles, then whole tiles in rows of g
        g, rounds = final.stream_k_grid(params, M, N, K, device)
        blocks = g * (1 + rounds)
    else:
        blocks = tiles * params["SPLITK"]
    slots = device.sm_count * per_sm
    waves = cdiv(blocks, slots) if slots else 0
    last = (blocks - (waves - 1) * slots) / slots if slots else 0.0
    return dict(shape=f"{M}x{N}x{K}", config=dict(params), tiles=tiles, split=params["SPLITK"], blocks=blocks,
                per_sm=per_sm, slots=slots, waves=waves, last_wave=last,
                utilisation=blocks / (waves * slots) if slots else 0.0)


def candidate_estimates(M: int, N: int, K: int, device: Device, chosen: dict) -> list[dict]:
    """Every candidate tile times every split of K (added by the last block, or as slabs by
    a second kernel) and stream-K, as the final kernel's dispatcher sees them: the model's
    time (:func:`helpers.runtime.specs.final.estimate`), its waves, whether the dispatcher
    considers it, and whether it is ``chosen`` (the caller's config, e.g. the dispatcher's
    choice). Every option packs what ``chosen`` packs (PACK_A, PACK_B, and the layouts packing
    leaves), so that it is among them.

    Considered are the options :func:`helpers.runtime.specs.final.options` offers: no split
    into more parts than K has k-tiles, and no stream-K where the rules refuse it for the tile
    or its 32-bit numbering does not fit.
    """
    packing = {k: chosen[k] for k in ("PACK_A", "PACK_B", "A_T", "B_T")}
    out = []
    for c in final.CANDIDATES:
        if not final.SPEC.is_valid(c.params, device):
            continue
        offered = [final.SPEC.resolve(o) for o in final.options(c, M, N, K, device=device)]
        splits = ([(s, 0, 0) for s in (1,) + final.SPLITS] + [(s, 1, 0) for s in final.SLAB_SPLITS]
                  + [(1, 0, 1)])
        for s, slabs, sk in splits:
            p = dict(c.params, SPLITK=s, REDUCE=slabs, STREAMK=sk, **packing)
            p["EDGES"] = final.edges(p, M, N)         # as the dispatcher's options set it
            considered = final.SPEC.resolve(p) in offered
            efficiency = c.efficiency_on(p, M, N, K, device)
            e = final.estimate(p, M, N, K, efficiency, device)
            if e is None:
                continue
            out.append(dict(candidate=c.name, config=p, split=s, efficiency=efficiency, ms=e.ms, waves=e.waves,
                            utilisation=e.last_wave_busy, considered=considered, chosen=p == chosen))
    return out
