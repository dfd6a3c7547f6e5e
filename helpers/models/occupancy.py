"""Occupancy of compiled kernel configs (chapter "Shared-memory tiling").

The rules themselves are the device model's (:func:`helpers.hardware.occupancy`); here
they meet the compiler's report of a real config.
"""
from __future__ import annotations

from .. import hardware
from ..hardware import Device, Occupancy, occupancy
from ..runtime.offline import Resources, resources
from ..runtime.spec import KernelSpec
from ..runtime.specs import get


def register_curve(threads_per_block: int, smem_per_block: int, device: Device, regs=range(16, 256)) -> list[Occupancy]:
    """Occupancy for each register count, one block size."""
    return [occupancy(threads_per_block, r, smem_per_block, device) for r in regs]


def of_config(kernel: str | KernelSpec, params: dict | None = None,
              device: Device | None = None) -> tuple[Resources, Occupancy]:
    """(compile report, occupancy) of a kernel config, compiled offline for ``device``."""
    device = device or hardware.default()
    spec = get(kernel)
    full = spec.validate(params, device=device)
    res = resources(spec, full, device)
    return res, occupancy(spec.threads(full), res.registers, res.smem, device)
