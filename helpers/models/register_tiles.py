"""2D register tiles: what a TM x TN thread tile buys, and what it costs.

Taught in the chapters "2D thread tiles", "float4 loads" and "Bank conflicts".

* :func:`fma_per_load`: a thread reads TM values of A and TN of B from shared memory per
  k and does TM * TN multiply-adds with them: the ratio is what the register tile buys;
* :func:`tile_cost`: what it costs: the registers the kernel's register model needs
  (:func:`helpers.runtime.rules.register_tile_parts`) against the budget a thread gets
  on the device when two blocks share an SM;
* :func:`slice_instructions`: the instructions one thread issues per k-slice on an
  inner tile, by kind, as the kernel's source says (checked against its SASS).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Device
from ..runtime import offline, sass
from ..runtime.rules import register_tile_min_blocks, register_tile_parts, sweep_loads, tile_threads
from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from ..tables import Table


def fma_per_load(TM: int, TN: int) -> float:
    """Multiply-adds per float read from shared memory in the inner product: TM TN / (TM + TN).

    1/2 for a 1x1 tile, TM / (TM + 1) for the 1D tile of TM x 1, 4 for 8 x 8.
    """
    return TM * TN / (TM + TN)


def live_registers(TM: int, TN: int) -> int:
    """Values the inner product keeps in registers: TM*TN accumulators + TM + TN operands."""
    return TM * TN + TM + TN


@dataclass(frozen=True)
class TileCost:
    TM: int
    TN: int
    threads: int
    fma_per_load: float
    live: int        # accumulators + operands
    needed: int      # the kernel's register model: + loads in flight and addresses
    budget: int      # what a thread may use with the kernel's __launch_bounds__

    max_threads: int     # the device's block limit
    warp_size: int

    @property
    def whole_warps(self) -> bool:
        return self.threads % self.warp_size == 0

    @property
    def fits(self) -> bool:
        """A legal block whose thread tile fits the register budget."""
        return self.why == "fits"

    @property
    def why(self) -> str:
        """Why a tile cannot be used, or "fits": the first of the block rules and the register rule it breaks."""
        if self.threads > self.max_threads:
            return "too many threads"
        if not self.whole_warps:
            return "not whole warps"
        if self.needed > self.budget:
            return "needs more registers"
        return "fits"


def tile_cost(BM: int, BN: int, TM: int, TN: int, device: Device, BK: int = 16, vector: bool = False) -> TileCost:
    """What a TM x TN tile costs in a BM x BN block (kernel 06's register model, or 07's)."""
    p = dict(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
    threads = tile_threads(p)
    budget = device.register_budget(threads, register_tile_min_blocks(p)) if threads <= device.max_threads_per_block else 0
    return TileCost(TM, TN, threads, fma_per_load(TM, TN), live_registers(TM, TN),
                    sum(register_tile_parts(p, vector).values()), budget, device.max_threads_per_block,
                    device.warp_size)


def tile_cost_table(BM: int, BN: int, tiles: list[tuple[int, int]], device: Device, BK: int = 16) -> Table:
    """What each TM x TN tile buys and costs in a BM x BN block, one row per tile."""
    rows = []
    for TM, TN in tiles:
        c = tile_cost(BM, BN, TM, TN, device, BK)
        rows.append({"thread tile": f"{TM} x {TN}", "FMA per shared load": round(c.fma_per_load, 2),
                     "values live": c.live, "registers needed (model)": c.needed, "threads per block": c.threads,
                     "registers a thread may use": c.budget or None, "verdict": c.why})
    return Table(rows, caption=f"{BM} x {BN} block on {device.label}")


def slice_instructions(kernel: str | KernelSpec, params: dict | None = None) -> dict:
    """Instructions one thread issues per k-slice on an inner tile (the fast path), by kind.

    Scalar loads (``load_width`` 1) store each float as is; float4 loads store A's four
    floats transposed (4 x STS) and B's as one STS.128. Both read operands with LDS.128:
    the float4 kernel explicitly, the scalar one because the compiler merges four
    consecutive k of a row of ``As`` (as its SASS shows).
    """
    spec = get(kernel)
    p = spec.resolve(params)
    t = spec.tiles(p)
    a, b = sweep_loads(p, spec.load_width)
    out = {"FFMA": t.BK * t.TM * t.TN, "LDS.128": t.BK * (t.TM + t.TN) // 4}
    if spec.load_width == 4:
        out.update({"LDG.128": a + b, "STS": 4 * a, "STS.128": b})
    else:
        out.update({"LDG": a + b, "STS": a + b})
    return out


MEMORY_OPS = ("LDG", "LDG.128", "STS", "STS.128", "LDS", "LDS.64", "LDS.128", "STG", "STG.128")


def memory_ops(sass_text: str) -> dict:
    """Memory instructions of a SASS listing by kind and width (cache hints dropped)."""
    counts = sass.family_counts(sass_text)
    return {op: counts.get(op, 0) for op in MEMORY_OPS}


def memory_ops_table(kernels: list[str], device: Device) -> Table:
    """Memory instructions of each kernel's default config: the whole kernel and its k loop."""
    rows = []
    for name in kernels:
        text = offline.sass(name, get(name).defaults(), device)
        rows.append({"kernel": get(name).title, "where": "whole kernel", **memory_ops(text)})
        rows.append({"kernel": get(name).title, "where": "k loop", **memory_ops(sass.inner_loop(text))})
    return Table(rows, caption=f"Memory instructions in the machine code ({device.arch}, offline compile)")


def slice_table(kernels: list[str]) -> Table:
    """:func:`slice_instructions` of each kernel's default config, one row per kernel."""
    rows = []
    for name in kernels:
        c = slice_instructions(name)
        memory = sum(v for k, v in c.items() if k != "FFMA")
        rows.append({"kernel": get(name).title, "config": get(name).label(get(name).defaults()), **c,
                     "memory instructions": memory, "FFMA share": f"{100 * c['FFMA'] / (c['FFMA'] + memory):.1f}%"})
    return Table(rows, caption="Per thread and k-slice on an inner tile (the fast path), from the kernels' structure")
