"""The registered kernels: one module per file of kernels/, listed here in book order.

Each module defines ``SPECS`` (its kernels), and may define ``SWEEP`` (what its
chapter records: ``(spec, params, (M, N, K))`` triples) and ``TEST_CONFIGS`` (extra
``(spec, params)`` the GPU and CPU tests check besides every spec's defaults).
"""
from __future__ import annotations

from ..spec import KernelSpec
from . import (bank_conflicts, coalescing, cp_async, double_buffering, final, naive, smem_tiling,
               tensor_cores, thread_tile_1d, thread_tile_2d, vectorized, warptiling, wgmma)

MODULES = (naive, coalescing, smem_tiling, thread_tile_1d, thread_tile_2d, vectorized, bank_conflicts,
           double_buffering, cp_async, warptiling, final, tensor_cores, wgmma)
ALL: tuple[KernelSpec, ...] = tuple(s for m in MODULES for s in m.SPECS)
BY_NAME: dict[str, KernelSpec] = {s.name: s for s in ALL}
assert len(BY_NAME) == len(ALL), "two kernels share a name"


class UnknownKernel(KeyError):
    def __str__(self):
        return self.args[0]


def get(name: str | KernelSpec) -> KernelSpec:
    """A kernel by name (a spec passes through), with the list of names on a miss."""
    if isinstance(name, KernelSpec):
        return name
    try:
        return BY_NAME[name]
    except KeyError:
        raise UnknownKernel(f"no kernel named {name!r}; registered: {', '.join(BY_NAME)}") from None


def test_configs() -> list[tuple[KernelSpec, dict]]:
    """(spec, params): every spec's defaults, then each module's TEST_CONFIGS."""
    out = [(s, s.defaults()) for s in ALL]
    for m in MODULES:
        out += [(s, s.resolve(p)) for s, p in getattr(m, "TEST_CONFIGS", ())]
    return out
