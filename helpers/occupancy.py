"""Occupancy: how many blocks of a kernel config fit on one SM, and what limits it.

Taught in the chapter "Shared-memory tiling". Uses the registers and shared
memory from the offline compile report (``helpers.resources``) and the SM's
limits: sm_90 built in, the reader's GPU when one is present.
"""
from __future__ import annotations

from dataclasses import dataclass

SM90 = {
    "max_threads_per_sm": 2048,
    "max_warps_per_sm": 64,
    "max_blocks_per_sm": 32,
    "registers_per_sm": 65536,
    "register_alloc_unit": 256,       # registers are handed to warps in chunks of 256
    "max_registers_per_thread": 255,
    "smem_per_sm": 228 * 1024,
    "smem_reserved_per_block": 1024,  # the driver keeps 1 KB per block
    "smem_alloc_unit": 128,
}


@dataclass
class Occupancy:
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str
    by_limit: dict

    @property
    def fraction(self) -> float:
        return self.active_warps / self.max_warps

    def __str__(self):
        return (f"{self.blocks_per_sm} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({100 * self.fraction:.0f}%), limited by {self.limiter}")


def _ceil(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(threads_per_block: int, registers_per_thread: int, smem_per_block: int,
              limits: dict | None = None) -> Occupancy:
    """Blocks per SM allowed by each resource; the smallest wins."""
    L = dict(SM90, **(limits or {}))
    warps = -(-threads_per_block // 32)
    regs_per_warp = _ceil(max(registers_per_thread, 1) * 32, L["register_alloc_unit"])
    smem = _ceil(smem_per_block + L["smem_reserved_per_block"], L["smem_alloc_unit"])
    by = {
        "warps": L["max_warps_per_sm"] // warps,
        "registers": L["registers_per_sm"] // (regs_per_warp * warps),
        "shared memory": L["smem_per_sm"] // smem,
        "blocks per SM": L["max_blocks_per_sm"],
    }
    if registers_per_thread > L["max_registers_per_thread"]:
        by["registers"] = 0
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, L["max_warps_per_sm"], limiter, by)


def occupancy_of(kernel: str, params: dict | None = None):
    """(Resources, Occupancy) of a registered kernel config, from the offline compile."""
    from .registry import get
    from .resources import resources

    spec = get(kernel)
    full = spec.validate(params)
    res = resources(spec, full)
    bx, by, bz = spec.block(full)
    return res, occupancy(bx * by * bz, res.registers, res.smem)
