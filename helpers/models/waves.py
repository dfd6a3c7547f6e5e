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
FAST_PATH_GUARDS = ("if (a_inside && k_inside)", "if (b_inside && k_inside)", "if (fast)")


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
    lds128 = ops.get("LDS.128", 0)
    lds_other = sum(v for k, v in ops.items() if k.startswith("LDS") and k != "LDS.128")
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


def wave_table(shapes, device: Device) -> list[dict]:
    """Per shape: the config the final kernel chooses, output tiles, blocks (with split-K),
    resident slots (offline compile + occupancy) and how full the last wave is."""
    out = []
    for M, N, K in shapes:
        p = final.choose_config(M, N, K, device)
        res = offline.resources(final.SPEC, p, device)
        per_sm = occupancy(final.SPEC.threads(p), res.registers, res.smem, device).blocks_per_sm
        tiles = final.tiles_of(p, M, N)
        blocks, slots = tiles * p["SPLITK"], device.sm_count * per_sm
        waves = cdiv(blocks, slots)
        out.append(dict(shape=f"{M}x{N}x{K}", config=p, tiles=tiles, blocks=blocks, per_sm=per_sm,
                        waves=waves, busy=blocks / (waves * slots)))
    return out
