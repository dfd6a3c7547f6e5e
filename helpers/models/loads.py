"""Memory accesses per result of C: as the source is written, as PTX, and as the machine runs them.

Taught in the chapters "Shared-memory tiling" and "1D thread tiles". Three views of one kernel:

* :func:`per_result`: loads per element of C that the source asks for, from the tile
  parameters (:func:`helpers.models.roofline.loads_per_result`);
* :func:`ptx_step`: the PTX of one k-slice (NVRTC's output, the virtual instruction set):
  which shared loads and multiply-adds the front end kept;
* :func:`loop_counts`: the instructions of the compiled inner loop (an offline compile
  for the device's architecture, no GPU), counted by opcode: what actually runs;
* :func:`order_difference`: two compiled loops with the same opcode counts can still
  differ in the *order* of their instructions, which a warp issues one after another.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from ..hardware import Device, occupancy
from ..runtime import offline, sass
from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from ..tables import Table, Text
from .roofline import loads_per_result

SHARED_WIDTH = {"LDS": 1, "LDS.64": 2, "LDS.128": 4}
LOOP_NAMES = {0: "dot product per result (LOOP=0)", 1: "k outer, B in a register (LOOP=1)"}


def per_result(kernel: str | KernelSpec, params: dict | None, K: int, as_written: bool = False) -> dict:
    """Loads per element of C over the whole K loop, in floats.

    ``as_written=True`` counts the source's shared reads literally: the dot-product loop
    order (``LOOP=0``) re-reads B for every result, 2 per k.
    """
    spec = get(kernel)
    p = spec.resolve(params)
    loads = loads_per_result(spec, p, K)
    shared = 2 * K if as_written and p.get("LOOP") == 0 else loads["shared"]
    return {"global": loads["global"], "shared": shared, "ffma": K,
            "shared_per_ffma": shared / K, "ffma_per_global": K / loads["global"]}


def as_fraction_of_K(x: float, K: int) -> str:
    """1024 of K=4096 -> 'K/4'; 4608 -> '9K/8'."""
    f = Fraction(x / K).limit_denominator(256)
    if f.denominator == 1:
        return "K" if f.numerator == 1 else f"{f.numerator}K"
    return f"K/{f.denominator}" if f.numerator == 1 else f"{f.numerator}K/{f.denominator}"


def per_result_table(configs: dict, K: int) -> Table:
    """Loads per result for named ``{label: (kernel, params)}`` configs, as multiples of K."""
    rows = []
    for name, (kernel, params) in configs.items():
        c = per_result(kernel, params, K)
        rows.append({"config": name, "global loads per result": as_fraction_of_K(c["global"], K),
                     "shared loads per result": as_fraction_of_K(c["shared"], K) if c["shared"] else "0",
                     "multiply-adds per shared load": round(c["ffma"] / c["shared"], 2) if c["shared"] else None,
                     "multiply-adds per global load": round(c["ffma_per_global"], 1)})
    return Table(rows, caption=f"Per element of C, over the whole K loop (K = {K})")


# ------------------------------------------------------------------ PTX
@dataclass
class PtxStep:
    """The PTX between the two barriers of one k-slice: the compute phase."""

    text: str
    counts: Counter       # PTX opcode -> instructions

    def listing(self, limit: int = 18) -> str:
        """The first ``limit`` shared loads and multiply-adds of the step."""
        keep = [line.strip() for line in self.text.splitlines()
                if re.match(r"\s*(ld\.shared|fma\.rn)", line)]
        return "\n".join(keep[:limit])


def ptx(kernel: str | KernelSpec, params: dict | None, device: Device) -> str:
    """The kernel's PTX for the device's architecture (an offline NVRTC compile)."""
    spec = get(kernel)
    full = spec.validate(params, device=device)
    out, _, _ = offline.nvrtc_compile(spec.source(), spec.file, spec.name_expression(full), device.arch, ptx=True)
    return out.decode(errors="replace").rstrip("\x00 \n")


def ptx_step(kernel: str | KernelSpec, params: dict | None, device: Device) -> PtxStep:
    """The compute phase of one k-slice in PTX: the lines between the first two ``bar.sync``."""
    text = ptx(kernel, params, device)
    parts = re.split(r"^\s*bar\.sync[^\n]*\n", text, flags=re.M)
    body = parts[1] if len(parts) > 2 else ""
    ops = Counter(m.group(1) for m in re.finditer(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", body, re.M))
    return PtxStep(body, ops)


def code_block(text: str, language: str = "text") -> Text:
    """A listing as a fenced code block (it shows as code in the book and in a notebook)."""
    return Text(f"```{language}\n{text}\n```")


def ptx_listing(kernel: str | KernelSpec, params: dict | None, device: Device, limit: int = 18) -> Text:
    """The first shared loads and multiply-adds of one k-slice in PTX."""
    return code_block(ptx_step(kernel, params, device).listing(limit), "text")


def sass_listing(kernel: str | KernelSpec, params: dict | None, device: Device, families=("LDS", "FFMA"),
                 limit: int = 16) -> Text:
    """The first instructions of the given families in the compiled inner loop (SASS, no encodings)."""
    spec = get(kernel)
    loop = sass.inner_loop(offline.sass(spec, spec.resolve(params), device))
    return code_block(sass.without_encodings(loop, families, limit), "text")


def written_vs_compiled(params: dict | None, device: Device) -> Table:
    """Shared loads per k-slice of the 1D-tile kernel's two loop orders: as written, in PTX, in SASS."""
    spec = get("thread_tile_1d")
    rows = []
    for loop in (0, 1):
        p = dict(spec.resolve(params), LOOP=loop)
        t = spec.tiles(p)
        step = ptx_step(spec, p, device)
        c = loop_counts(spec, p, device)
        passes = max(c.k_per_pass // t.BK, 1)
        rows.append({"loop order": LOOP_NAMES[loop],
                     "shared reads as written": (2 * t.TM if loop == 0 else t.TM + 1) * t.BK,
                     "PTX ld.shared": step.counts.get("ld.shared.f32", 0),
                     "PTX fma": step.counts.get("fma.rn.f32", 0),
                     "SASS LDS": c.counts.get("LDS", 0) // passes,
                     "SASS LDS.128": c.counts.get("LDS.128", 0) // passes,
                     "SASS FFMA": c.counts.get("FFMA", 0) // passes})
    return Table(rows, caption=f"{spec.label(spec.resolve(params))}: one k-slice of one thread, compiled for "
                               f"{device.arch}")


# ------------------------------------------------------------------ SASS
@dataclass
class LoopCounts:
    """Opcode counts of one compiled inner loop, and what they mean per k."""

    kernel: str
    params: dict
    counts: dict          # opcode family -> instructions in one pass of the loop
    k_per_pass: int       # k values one pass covers (BK, or more if the K loop was unrolled)

    def per_k(self, op: str) -> float:
        return self.counts.get(op, 0) / self.k_per_pass

    @property
    def shared_load_instructions(self) -> int:
        return sum(v for k, v in self.counts.items() if k.startswith("LDS"))

    @property
    def shared_floats(self) -> int:
        """Floats the shared loads fetch (LDS.128 = 4, LDS.64 = 2, LDS = 1)."""
        return sum(v * SHARED_WIDTH.get(k, 1) for k, v in self.counts.items() if k.startswith("LDS"))


def loop_counts(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None) -> LoopCounts:
    """FFMA, LDS (by width), LDG, STS and barriers in the kernel's inner loop."""
    spec = get(kernel)
    full = spec.resolve(params)
    loop = sass.inner_loop(offline.sass(spec, full, device))
    counts = dict(sass.family_counts(loop))
    t = spec.tiles(full)
    per_pass = counts.get("FFMA", 0) // (t.TM * t.TN)       # one FFMA per k per result
    return LoopCounts(spec.name, full, counts, max(per_pass, 1))


def loop_table(kernel: str | KernelSpec, params: dict | None, device: Device,
               ops=("FFMA", "LDS", "LDS.128", "LDG", "STS", "BAR")) -> Table:
    """The opcode counts of one pass of the compiled inner loop, as a one-row table."""
    spec = get(kernel)
    c = loop_counts(spec, params, device)
    row = {"config": spec.label(c.params), "k per pass": c.k_per_pass, **{op: c.counts.get(op, 0) for op in ops}}
    return Table([row], caption=f"Instructions in one pass of the compiled inner loop ({device.arch})")


def shared_bound(kernel: str | KernelSpec, params: dict | None, device: Device) -> float:
    """TFLOP/s ceiling if each shared-load instruction takes one 128-byte pass of shared memory.

    An SM issues up to ``fp32_lanes / 32`` warp-wide FFMAs per clock but its shared memory
    serves one warp-wide 32-bit load (one wavefront) per clock, so the FFMA rate is at most
    FFMA / LDS instructions per clock, out of ``fp32_lanes / 32``.
    """
    c = loop_counts(kernel, params, device)
    ffma_per_clock = device.fp32_lanes // device.warp_size
    ratio = c.counts.get("FFMA", 0) / max(c.shared_load_instructions, 1)
    return device.fp32_tflops * min(1.0, ratio / ffma_per_clock)


def shared_bound_table(rows: list[dict], device: Device) -> Table:
    """Measured TFLOP/s of timing rows next to the shared-memory bound of their compiled loop."""
    out = []
    for r in rows:
        spec = get(r["kernel"])
        c = loop_counts(spec, r["params"], device)
        bound = shared_bound(spec, r["params"], device)
        out.append({"kernel": spec.title, "config": spec.label(r["params"]),
                    "FFMA per shared-load instruction": round(c.counts.get("FFMA", 0) / max(c.shared_load_instructions, 1), 2),
                    "shared-memory bound (TFLOP/s)": round(bound, 1), "measured (TFLOP/s)": round(r["tflops"], 2),
                    "% of the bound": round(100 * r["tflops"] / bound)})
    lanes = device.fp32_lanes // device.warp_size
    return Table(out, caption=(f"n = {rows[0]['M']}; an SM of the {device.label} issues up to {lanes} warp-wide FFMAs "
                               f"per clock, so the bound is {device.fp32_tflops:.1f} TFLOP/s (FP32 peak) x "
                               f"min(1, FFMA per shared load / {lanes})") if rows else "")


def bound_text(previous: list[dict], current: list[dict], device: Device) -> Text:
    """How the shared-memory bound and the share of it reached moved from one kernel's rows to another's."""
    def summary(rows):
        bounds = [shared_bound(r["kernel"], r["params"], device) for r in rows]
        shares = [100 * r["tflops"] / b for r, b in zip(rows, bounds)]
        return (f"{min(bounds):.1f}" if min(bounds) == max(bounds) else f"{min(bounds):.1f}-{max(bounds):.1f}",
                f"{min(shares):.0f}%" if round(min(shares)) == round(max(shares)) else
                f"{min(shares):.0f}-{max(shares):.0f}%")
    (b0, s0), (b1, s1) = summary(previous), summary(current)
    t0, t1 = get(previous[0]["kernel"]).title, get(current[0]["kernel"]).title
    return Text(f"The bound is {b0} TFLOP/s for {t0} and {b1} TFLOP/s for {t1}; they reach {s0} and {s1} of it.")


# ------------------------------------------------------------ instruction order
@dataclass
class OrderDifference:
    """The compiled inner loops of LOOP=0 and LOOP=1 for one config, compared."""

    params: dict
    length: tuple[int, int]          # instructions in each loop
    same_counts: bool                # the same opcode families, the same number of each
    moved: int                       # positions whose opcode family differs
    rewritten: int                   # positions whose instruction (opcode or operands) differs
    registers: tuple[int, int]       # registers per thread of each (offline compile)
    first: list                      # (position, LOOP=0 instruction, LOOP=1 instruction), first differences


def _loop_instructions(spec, params, device):
    return sass.instructions(sass.inner_loop(offline.sass(spec, params, device)))


def order_difference(params: dict | None, device: Device, show: int = 8) -> OrderDifference:
    """Compare the two loop orders' compiled inner loops instruction by instruction."""
    spec = get("thread_tile_1d")
    loops, regs = [], []
    for loop in (0, 1):
        p = dict(spec.resolve(params), LOOP=loop)
        loops.append(_loop_instructions(spec, p, device))
        regs.append(offline.resources(spec, p, device).registers)
    a, b = loops
    same = Counter(i.family for i in a) == Counter(i.family for i in b)
    moved = sum(x.family != y.family for x, y in zip(a, b)) + abs(len(a) - len(b))
    text = [(f"{x.opcode} {x.operands}", f"{y.opcode} {y.operands}") for x, y in zip(a, b)]
    rewritten = sum(s != t for s, t in text) + abs(len(a) - len(b))
    first = [(i, s, t) for i, (s, t) in enumerate(text) if s != t][:show]
    return OrderDifference(dict(spec.resolve(params), LOOP=None), (len(a), len(b)), same, moved, rewritten,
                           (regs[0], regs[1]), first)


def order_table(diff: OrderDifference) -> Table:
    """The first positions where the two compiled loops differ, side by side."""
    return Table([{"position in the loop": i, "LOOP=0": s, "LOOP=1": t} for i, s, t in diff.first],
                 caption="The first instructions where the two compiled inner loops differ")


def recorded_registers(row: dict) -> int | None:
    """Registers per thread of the binary that produced a timing row, where the row records them."""
    for where in (row, row.get("extra") or {}):
        for key in ("registers", "num_regs"):
            if isinstance(where.get(key), int):
                return where[key]
    return None


def tflops_band(r: dict) -> tuple[float, float]:
    """The TFLOP/s of a row's 80th- and 20th-percentile times (its run-to-run spread)."""
    f = 2 * r["M"] * r["N"] * r["K"] / 1e12
    return f / (r["ms_p80"] * 1e-3), f / (r["ms_p20"] * 1e-3)


def loop_order_rows(rows: list[dict], device: Device) -> list[dict]:
    """For every k-slice recorded in both orders: speeds with their spread, opcode counts,
    instruction order, registers and warps per SM (recorded registers where the rows carry them,
    else the offline compile's)."""
    spec = get("thread_tile_1d")
    by = {}
    for r in rows:
        if r["kernel"] == spec.name and r["M"] == r["N"] == r["K"]:
            key = tuple(sorted((k, v) for k, v in r["params"].items() if k != "LOOP")) + (r["M"],)
            by.setdefault(key, {})[r["params"]["LOOP"]] = r
    out = []
    for key, pair in sorted(by.items(), key=lambda kv: (kv[0][-1], dict(kv[0][:-1])["BK"])):
        if set(pair) != {0, 1}:
            continue
        params = {k: v for k, v in key[:-1]}
        diff = order_difference(params, device)
        regs = [recorded_registers(pair[loop]) or diff.registers[loop] for loop in (0, 1)]
        warps = [occupancy(spec.threads(params), regs[loop], spec.static_smem(params), device).active_warps
                 for loop in (0, 1)]
        lo0, hi0 = tflops_band(pair[0])
        lo1, hi1 = tflops_band(pair[1])
        out.append({"params": params, "n": key[-1], "tflops": (pair[0]["tflops"], pair[1]["tflops"]),
                    "band": ((lo0, hi0), (lo1, hi1)), "apart": hi0 < lo1 or hi1 < lo0,
                    "same_counts": diff.same_counts, "moved": diff.moved, "rewritten": diff.rewritten,
                    "length": diff.length, "registers": tuple(regs), "warps": tuple(warps),
                    "registers_recorded": all(recorded_registers(pair[loop]) for loop in (0, 1))})
    return out


def loop_order_result_table(rows: list[dict], device: Device) -> Table:
    """:func:`loop_order_rows` as a table."""
    out = []
    for d in loop_order_rows(rows, device):
        out.append({"BK": d["params"]["BK"], "n": d["n"],
                    "LOOP=0 TFLOP/s (20-80%)": f"{d['tflops'][0]:.2f} ({d['band'][0][0]:.2f}-{d['band'][0][1]:.2f})",
                    "LOOP=1 TFLOP/s (20-80%)": f"{d['tflops'][1]:.2f} ({d['band'][1][0]:.2f}-{d['band'][1][1]:.2f})",
                    "LOOP=1 / LOOP=0": round(d["tflops"][1] / d["tflops"][0], 3),
                    "same opcode counts": d["same_counts"],
                    "instructions placed differently": f"{d['moved']} of {d['length'][0]}",
                    "registers (0 / 1)": f"{d['registers'][0]} / {d['registers'][1]}",
                    "warps per SM (0 / 1)": f"{d['warps'][0]} / {d['warps'][1]}"})
    return Table(out, caption="The two loop orders of the same config, measured in the same run")


def loop_order_text(rows: list[dict], device: Device, source: str) -> Text:
    """What the recorded rows say about the two loop orders, in words."""
    data = loop_order_rows(rows, device)
    if not data:
        return Text("The recorded rows hold no config in both loop orders.")
    apart = [d for d in data if d["apart"]]
    faster1 = [d for d in apart if d["tflops"][1] > d["tflops"][0]]
    faster0 = [d for d in apart if d["tflops"][0] > d["tflops"][1]]
    same = [d for d in data if d["same_counts"]]
    regs_differ = [d for d in data if d["registers"][0] != d["registers"][1]]

    def bks(ds):
        return ", ".join(str(d["params"]["BK"]) for d in ds)

    parts = [f"Of the {len(data)} k-slices recorded in both orders ({source}), "
             f"{len(same)} compile to loops with exactly the same opcode counts."]
    if apart:
        big = max(apart, key=lambda d: max(d["tflops"]) / min(d["tflops"]))
        gap = max(big["tflops"]) / min(big["tflops"]) - 1
        parts.append(("Yet their" if len(same) == len(data) else "Their")
                     + f" speeds differ beyond the run-to-run spread at BK = {bks(apart)}: "
                     + (f"the k-outer order is faster at BK = {bks(faster1)}" if faster1 else "")
                     + ("; " if faster1 and faster0 else "")
                     + (f"the dot-product order is faster at BK = {bks(faster0)}" if faster0 else "")
                     + f". The largest gap is {100 * gap:.0f}% at BK = {big['params']['BK']} "
                       f"({big['tflops'][0]:.2f} against {big['tflops'][1]:.2f} TFLOP/s).")
    else:
        parts.append("Their speeds agree within the run-to-run spread at every k-slice.")
    close = [d for d in data if not d["apart"]]
    if close and apart:
        parts.append(f"At BK = {bks(close)} the two orders are within each other's spread.")
    warps_differ = [d for d in data if d["warps"][0] != d["warps"][1]]
    if all(d["registers_recorded"] for d in data):
        if regs_differ:
            parts.append(f"The binaries that ran had different register counts at BK = {bks(regs_differ)}"
                         + (f"; at BK = {bks(warps_differ)} that changes how many warps fit on an SM (the "
                            "table above)" if warps_differ else ", but the same number of warps fit on an SM")
                         + ". Where the warps are the same, what separates the two loops is the order of the "
                           "instructions (and where the opcode counts differ, the instructions themselves).")
        else:
            parts.append("The binaries that ran had the same registers, so the same warps fit on an SM: what "
                         "separates them is the order of the instructions.")
    else:
        version = offline.nvrtc_version()
        if regs_differ:
            parts.append(f"The offline compile here (NVRTC {version}) gives the two orders different register "
                         f"counts at BK = {bks(regs_differ)}"
                         + (f"; at BK = {bks(warps_differ)} a different number of warps fit on an SM (the table "
                            "above)." if warps_differ else ", but the same number of warps fit on an SM."))
        else:
            parts.append(f"The offline compile here (NVRTC {version}) gives both orders the same registers. The "
                         "rows do not record the registers of the binaries that were timed, and another compiler "
                         "version may allocate differently: where it did not, only the order of the instructions "
                         "separates the two loops.")
    return Text(" ".join(parts))
