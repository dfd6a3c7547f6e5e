"""Memory accesses per result of C: as the source is written, and as the compiler emits them.

Taught in the chapters "Shared-memory tiling" and "1D thread tiles". Two views of one kernel:

* :func:`per_result`: loads per element of C that the source asks for, from the tile
  parameters (:func:`helpers.models.roofline.loads_per_result`);
* :func:`loop_counts`: the instructions of the compiled inner loop (an offline compile
  for the device's architecture, no GPU), counted by opcode: what actually runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..hardware import Device
from ..runtime import offline, sass
from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from .roofline import loads_per_result

SHARED_WIDTH = {"LDS": 1, "LDS.64": 2, "LDS.128": 4}


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


def shared_bound(kernel: str | KernelSpec, params: dict | None, device: Device) -> float:
    """TFLOP/s ceiling if each shared-load instruction takes one 128-byte pass of shared memory.

    An SM issues up to 4 warp-wide FFMAs per clock but its shared memory serves one
    warp-wide 32-bit load per clock, so the FFMA rate is at most FFMA / LDS instructions
    per clock, out of 4.
    """
    c = loop_counts(kernel, params, device)
    return device.fp32_tflops * min(1.0, c.counts.get("FFMA", 0) / max(c.shared_load_instructions, 1) / 4)


def loop_order_table(params: dict | None = None, device: Device | None = None) -> list[dict]:
    """The two loop orders of the 1D-tile kernel: shared reads as written vs instructions compiled."""
    spec = get("thread_tile_1d")
    rows = []
    for loop in (0, 1):
        p = dict(spec.resolve(params), LOOP=loop)
        t = spec.tiles(p)
        c = loop_counts(spec, p, device)
        passes = c.k_per_pass // t.BK                  # BK-steps one pass of the loop covers
        written = (2 * t.TM if loop == 0 else t.TM + 1) * t.BK
        rows.append({"loop order": "dot product per result (LOOP=0)" if loop == 0 else "k outer, B in a register (LOOP=1)",
                     "shared reads per step, as written": written,
                     **{op: c.counts.get(op, 0) // passes for op in ("FFMA", "LDS", "LDS.128")},
                     "shared floats fetched per step": c.shared_floats // passes})
    return rows
