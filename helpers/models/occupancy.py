"""Occupancy of compiled kernel configs (chapter "Shared-memory tiling").

The rules themselves are the device model's (:func:`helpers.hardware.occupancy`); here
they meet the compiler's report of a real config, and become tables for the chapters.
"""
from __future__ import annotations

from .. import hardware
from ..hardware import Device, Occupancy, occupancy
from ..runtime.offline import Resources, resources
from ..runtime.spec import ConfigError, KernelSpec
from ..runtime.specs import get
from ..tables import Table, Text


def register_curve(threads_per_block: int, smem_per_block: int, device: Device, regs=None) -> list[Occupancy]:
    """Occupancy for each register count (default: 16 up to the device's per-thread maximum), one block size."""
    regs = regs if regs is not None else range(16, device.max_registers_per_thread + 1)
    return [occupancy(threads_per_block, r, smem_per_block, device) for r in regs]


def of_config(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None,
              validate: bool = True) -> tuple[Resources, Occupancy]:
    """(compile report, occupancy) of a kernel config, compiled offline for ``device``
    (``validate=False``: also of a config the rules refuse)."""
    device = device or hardware.default()
    spec = get(kernel)
    full = spec.validate(params, device=device) if validate else spec.resolve(params)
    res = resources(spec, full, device, validate=validate)
    return res, occupancy(spec.threads(full), res.registers, res.smem, device)


def marks(kernel: str | KernelSpec, configs: list[dict], device: Device) -> dict:
    """{label: (threads, registers, shared bytes)} of compiled configs, to mark on occupancy curves."""
    spec = get(kernel)
    out = {}
    for cfg in configs:
        res, _ = of_config(spec, cfg, device)
        full = spec.resolve(cfg)
        out[spec.label(full)] = (spec.threads(full), res.registers, res.smem)
    return out


def limits_table(device: Device) -> Table:
    """The per-SM and per-block limits occupancy is made of, from the device model."""
    kb = 1024
    rows = [
        {"resource": "warps", "per SM": device.max_warps_per_sm,
         "per block": device.max_threads_per_block // device.warp_size,
         "allocated in": f"whole warps of {device.warp_size} threads"},
        {"resource": "registers", "per SM": device.registers_per_sm, "per block": device.registers_per_block,
         "allocated in": f"{device.register_unit} per warp; the file is split in {device.register_parts} parts "
                         f"that each hold whole warps; at most {device.max_registers_per_thread} per thread"},
        {"resource": "shared memory", "per SM": f"{device.smem_per_sm // kb} KB",
         "per block": f"{device.smem_per_block // kb} KB ({device.smem_per_block_static // kb} KB static)",
         "allocated in": f"{device.smem_unit} B units, plus {device.smem_reserved_per_block} B the driver "
                         "reserves per block"},
        {"resource": "blocks", "per SM": device.max_blocks_per_sm, "per block": None, "allocated in": None},
    ]
    return Table(rows, caption=f"{device.label} (compute capability {device.cc})")


def cases_table(cases: list[tuple[int, int, int]], device: Device) -> Table:
    """Occupancy of (threads per block, registers per thread, shared bytes per block) cases."""
    rows = []
    for threads, regs, smem in cases:
        o = occupancy(threads, regs, smem, device)
        rows.append({"threads per block": threads, "registers per thread": regs, "shared bytes per block": smem,
                     "registers per warp": o.detail["registers_per_warp"],
                     **{f"blocks allowed by {k}": v for k, v in o.by_limit.items()},
                     "resident warps": f"{o.active_warps}/{o.max_warps}", "limited by": o.limiter})
    return Table(rows, caption=f"Occupancy on {device.label}")


def step_text(threads: int, registers: tuple[int, int], device: Device) -> Text:
    """How occupancy changes between two register counts for one block size, in words."""
    out = []
    for r in registers:
        o = occupancy(threads, r, 0, device)
        out.append(f"at {r} registers per thread {o.blocks_per_sm} block{'s' if o.blocks_per_sm != 1 else ''} of "
                   f"{threads} threads fit{'s' if o.blocks_per_sm == 1 else ''} ({o.active_warps} warps, limited by "
                   f"{o.limiter})")
    return Text(f"On the {device.label}, " + "; ".join(out) + ".")


def config_table(kernel: str | KernelSpec, configs: list[dict], device: Device) -> Table:
    """The offline compile of each config (registers, spills, shared memory) and its occupancy;
    a config the spec refuses gets the rule it breaks instead."""
    spec = get(kernel)
    rows = []
    for cfg in configs:
        row = {"config": spec.label(spec.resolve(cfg))}
        try:
            full = spec.validate(cfg, device=device)
        except ConfigError as exc:
            row["refused because"] = str(exc).split(": ", 1)[-1].split(" A valid alternative")[0]
            rows.append(row)
            continue
        res = resources(spec, full, device)
        occ = occupancy(spec.threads(full), res.registers, res.smem, device)
        row.update({"threads": spec.threads(full), "registers": res.registers,
                    "spilled bytes": res.spill_stores + res.spill_loads, "shared bytes": res.smem,
                    "blocks per SM": occ.blocks_per_sm, "warps per SM": f"{occ.active_warps}/{occ.max_warps}",
                    "limited by": occ.limiter})
        rows.append(row)
    return Table(rows, caption=f"Offline compile for {device.arch}; occupancy on {device.label}")


def shared_memory_text(kernel: str | KernelSpec, configs: list[dict], device: Device) -> Text:
    """How much of the SM's shared memory the resident blocks of each config take (the rest of
    the on-chip memory it shares with the L1 cache stays cache)."""
    spec = get(kernel)
    parts = []
    for cfg in configs:
        res, occ = of_config(spec, cfg, device)
        alloc = occ.detail["smem_allocated_per_block"]
        used = occ.blocks_per_sm * alloc
        parts.append(f"{spec.label(spec.resolve(cfg))}: {occ.blocks_per_sm} resident blocks of {alloc:,} B "
                     f"(declared {res.smem:,} B plus the driver's {device.smem_reserved_per_block:,} B) take "
                     f"{used / 1024:.0f} KB, {100 * used / device.smem_per_sm:.0f}% of the "
                     f"{device.smem_per_sm // 1024} KB an SM can give to shared memory")
    return Text("; ".join(parts) + ".")
