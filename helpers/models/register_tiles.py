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
from ..tables import Table, Text


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
    kinds = [k for k in ("FFMA", "LDG", "LDG.128", "STS", "STS.128", "LDS.128") if any(k in r for r in rows)]
    return Table(rows, ["kernel", "config", *kinds, "memory instructions", "FFMA share"],
                 caption="Per thread and k-slice on an inner tile (the fast path), from the kernels' structure")


def budget_text(kernel: str | KernelSpec, params_list: list[dict], device: Device) -> Text:
    """The register budget a thread gets under the kernel's ``__launch_bounds__``, per block size."""
    spec = get(kernel)
    parts = []
    for p in params_list:
        full = spec.resolve(p)
        threads, blocks = spec.threads(full), spec.min_blocks(full)
        parts.append(f"{spec.label(full)} has {threads} threads and asks for {blocks} block"
                     f"{'s' if blocks > 1 else ''} per SM: {device.register_budget(threads, blocks)} registers "
                     "per thread")
    return Text(f"The {device.label} has {device.registers_per_sm:,} registers per SM and allows at most "
                f"{device.max_registers_per_thread} per thread. " + "; ".join(parts) + ".")


def thread_map_table(params: dict | None, tids=None) -> Table:
    """Which elements of C, and which elements of the shared tiles, a few threads of the 2D-tile kernel own."""
    spec = get("thread_tile_2d")
    p = spec.resolve(params)
    T = spec.threads(p)
    tids = tids or (0, 1, 15, 16, T - 1)
    cols = p["BN"] // p["TN"]
    rows = []
    for tid in (t for t in tids if t < T):
        trow, tcol = tid // cols, tid % cols
        a_rows = list(range(tid // p["BK"], p["BM"], max(T // p["BK"], 1)))
        b_rows = list(range(tid // p["BN"], p["BK"], max(T // p["BN"], 1)))
        rows.append({"tid": tid, "rows of C": f"{trow * p['TM']}..{trow * p['TM'] + p['TM'] - 1}",
                     "columns of C": f"{tcol * p['TN']}..{tcol * p['TN'] + p['TN'] - 1}",
                     "loads As column": tid % p["BK"],
                     "of rows": ", ".join(map(str, a_rows[:3])) + (f", ... {a_rows[-1]}" if len(a_rows) > 3 else ""),
                     "loads Bs column": tid % p["BN"], "of row(s)": ", ".join(map(str, b_rows))})
    return Table(rows, caption=f"{spec.label(p)}: {T} threads")


def vector_paths(M: int, N: int, K: int, aligned: bool = True) -> dict:
    """Which accesses of the float4 kernel may be float4 (16-byte) for a shape: A's rows need
    K % 4 == 0, B's and C's N % 4 == 0, and every array must start 16-byte aligned."""
    return {"A loads": aligned and K % 4 == 0, "B loads": aligned and N % 4 == 0, "C stores": aligned and N % 4 == 0}


def vector_paths_table(shapes, aligned: bool = True) -> Table:
    rows = [{"M x N x K": f"{M} x {N} x {K}",
             **{k: "float4" if v else "scalar" for k, v in vector_paths(M, N, K, aligned).items()}}
            for M, N, K in shapes]
    return Table(rows, caption="Inner tiles of the float4 kernel" + ("" if aligned else ", arrays not 16-byte aligned"))


def slice_text(scalar: str, vector: str) -> Text:
    """How many fewer instructions feed shared memory per k-slice with float4 loads."""
    a, b = slice_instructions(scalar), slice_instructions(vector)

    def feed(c):
        return sum(v for k, v in c.items() if k.startswith(("LDG", "STS")))
    return Text(f"Per thread and k-slice, both do {a['FFMA']} FFMA and {a['LDS.128']} LDS.128; the instructions "
                f"that move data from global to shared memory drop from {feed(a)} ({get(scalar).title}) to "
                f"{feed(b)} ({get(vector).title}).")


def odd_shapes_table(rows: list[dict], params: dict, big: int | None = None) -> Table:
    """A config on shapes whose dimensions are ``big`` or one less, beside ``big``^3: which
    accesses lose float4, and what that costs."""
    mine = [r for r in rows if r["params"] == params]
    big = big or max(max(r["M"], r["N"], r["K"]) for r in mine)     # default: the largest size recorded
    chosen = [r for r in mine if all(d in (big - 1, big) for d in (r["M"], r["N"], r["K"]))]
    out = []
    for r in sorted(chosen, key=lambda r: -r["tflops"]):
        paths = vector_paths(r["M"], r["N"], r["K"])
        out.append({"M x N x K": f"{r['M']} x {r['N']} x {r['K']}",
                    "A": "float4" if paths["A loads"] else "scalar", "B and C": "float4" if paths["B loads"] else "scalar",
                    "TFLOP/s": round(r["tflops"], 2), "cuBLAS": round(r["cublas_tflops"], 2),
                    "% of cuBLAS": round(100 * r["tflops"] / r["cublas_tflops"]), "correct": r["ok"]})
    return Table(out, caption=f"The same config at n = {big} and with dimensions one short of it")


def memory_ops_text(scalar: str, vector: str, device: Device) -> Text:
    """What the machine code of the two kernels' k loops says about their global and shared accesses."""
    a = memory_ops(sass.inner_loop(offline.sass(scalar, get(scalar).defaults(), device)))
    b = memory_ops(sass.inner_loop(offline.sass(vector, get(vector).defaults(), device)))
    return Text(f"In the k loop, {get(scalar).title} has {a['LDG']} global loads of 4 bytes and {a['LDG.128']} of "
                f"16 bytes; {get(vector).title} has {b['LDG.128']} of 16 bytes and {b['LDG']} of 4 bytes (the "
                f"edge path, which reads one float at a time). Shared stores: {a['STS']} of 4 bytes and "
                f"{a['STS.128']} of 16 against {b['STS']} and {b['STS.128']}. Shared loads: {a['LDS.128']} against "
                f"{b['LDS.128']} LDS.128, and {a['LDS'] + b['LDS']} narrower ones in either.")
