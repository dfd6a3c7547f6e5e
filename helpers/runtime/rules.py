"""Rules and models that several kernel specs share, defined once.

A rule takes a resolved config and returns the broken rule as a sentence, or None.
A shape rule also sees M, N and K. Register models return the registers a thread
needs; :meth:`helpers.runtime.spec.KernelSpec.problems` compares them with the
device's budget for the kernel's block size and ``__launch_bounds__``.
"""
from __future__ import annotations

from ..hardware import WARP_SIZE
from .spec import Rule, ShapeRule, cdiv


def divides(a: str, b: str) -> Rule:
    """Parameter ``a`` must divide parameter ``b``."""

    def rule(p):
        return f"{a}={p[a]} must divide {b}={p[b]}" if p[b] % p[a] else None

    return rule


def multiple_of(dim: str, param: str, why: str) -> ShapeRule:
    """Dimension ``dim`` (M, N or K) must be a multiple of a parameter."""

    def rule(p, M, N, K):
        v, m = {"M": M, "N": N, "K": K}[dim], p[param]
        return f"{dim}={v} must be a multiple of {param}={m}" if v % m else None

    rule.why = f"{why}; pad the matrices or use a kernel without this rule"   # said once, however many fail
    return rule


# ------------------------------------------------------------- 2D thread tiles
def tile_threads(p: dict) -> int:
    """Threads of a block whose BM x BN tile is cut into TM x TN thread tiles."""
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def sweep_loads(p: dict, width: int) -> tuple[int, int]:
    """(A loads, B loads) one thread issues per k-slice when the block's threads sweep
    each tile row by row, ``width`` floats per load (1, or 4 for float4)."""
    threads = tile_threads(p)
    a_step = max(1, threads // max(p["BK"] // width, 1))
    b_step = max(1, threads // max(p["BN"] // width, 1))
    return cdiv(p["BM"], a_step), cdiv(p["BK"], b_step)


def register_tile_parts(p: dict, vector: bool) -> dict:
    """What a thread of a 2D-register-tile kernel keeps in registers, by kind.

    * ``accumulators``: TM * TN results;
    * ``operands``: the values one k step multiplies. With A's tile transposed
      (``vector``) a thread reads TM + TN; with A row-major the compiler reads four k
      of each of the TM rows at once (one LDS.128), so 4 * TM values of A stay live;
    * ``in flight``: loaded from global memory, waiting for the store to shared memory
      (every float4 for the vector kernels; the scalar kernel stores some before it
      loads the rest, about 12 at most);
    * ``other``: indices, addresses, the loop counter.
    """
    a, b = sweep_loads(p, 4 if vector else 1)
    return {"accumulators": p["TM"] * p["TN"],
            "operands": p["TM"] + p["TN"] if vector else 4 * p["TM"] + p["TN"],
            "in flight": 4 * (a + b) if vector else min(a + b, 12),
            "other": 16 if vector else 10}


def register_tile_registers(vector: bool):
    """The register model of the 2D-tile kernels (06, and 07 with ``vector``)."""
    def registers(p: dict) -> int:
        return sum(register_tile_parts(p, vector).values())
    return registers


def register_tile_min_blocks(p: dict) -> int:
    """``__launch_bounds__`` of kernels 06 and 07: two blocks per SM up to 256 threads."""
    return 2 if tile_threads(p) <= 256 else 1


# ------------------------------------------------------------------ warp tiles
def warp_threads(p: dict) -> int:
    """Threads per block of a warp-tiled kernel: one warp per WM x WN warp tile."""
    return max(1, p["BM"] // p["WM"]) * max(1, p["BN"] // p["WN"]) * WARP_SIZE


def warp_lanes(p: dict) -> str | None:
    """The thread tiles of a warp tile must make exactly one warp of lanes."""
    if p["WM"] % p["TM"] or p["WN"] % p["TN"]:
        return f"the thread tile {p['TM']}x{p['TN']} must divide the warp tile {p['WM']}x{p['WN']}"
    lanes = (p["WM"] // p["TM"]) * (p["WN"] // p["TN"])
    if lanes != WARP_SIZE:
        return (f"a {p['WM']}x{p['WN']} warp tile of {p['TM']}x{p['TN']} thread tiles has {lanes} lanes, "
                f"not {WARP_SIZE}: (WM/TM) * (WN/TN) must be {WARP_SIZE}")
    return None


def warp_tile_registers(staging: int):
    """Registers of a warp-tiled thread: TM x TN accumulators, two fragments of TM + TN
    (double-buffered in registers), ``staging(p)`` values on their way to shared memory,
    and about 40 for addresses, indices and loop state."""
    def registers(p: dict) -> int:
        return p["TM"] * p["TN"] + 2 * (p["TM"] + p["TN"]) + staging(p) + 40
    return registers


def warp_tile_label(p: dict) -> str:
    return f"{p['BM']}x{p['BN']}x{p['BK']} w{p['WM']}x{p['WN']} t{p['TM']}x{p['TN']}"


def warp_layout(p: dict) -> dict:
    """The warp-tiling geometry of a warp-tiled config, as the kernels compute it."""
    wmiter, wniter = p["TM"] // 4, p["TN"] // 4
    return dict(warps_m=p["BM"] // p["WM"], warps_n=p["BN"] // p["WN"], threads=warp_threads(p),
                wmiter=wmiter, wniter=wniter, lanes_m=p["WM"] // p["TM"], lanes_n=p["WN"] // p["TN"],
                sub_m=p["WM"] // wmiter, sub_n=p["WN"] // wniter)


def warp_fragments(p: dict) -> tuple[list, list]:
    """Byte offsets each lane's LDS.128 reads at one k: lane (tr, tc) reads the 4 rows at
    4 tr of each of the WMITER sub-tiles, and the 4 columns at 4 tc of each of the WNITER."""
    g = warp_layout(p)
    a = [[4 * (i * g["sub_m"] + 4 * (lane // g["lanes_n"])) for lane in range(WARP_SIZE)] for i in range(g["wmiter"])]
    b = [[4 * (j * g["sub_n"] + 4 * (lane % g["lanes_n"])) for lane in range(WARP_SIZE)] for j in range(g["wniter"])]
    return a, b
