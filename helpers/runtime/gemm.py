"""The final kernel as a library call: the config :func:`~helpers.runtime.specs.final.choose_config`
picks for the shape and the device, then one launch.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

import cupy
import numpy as np

from .. import hardware
from ..hardware import Device
from ..shapes import SUITE
from .launch import operand_shapes, prepare
from .specs import final
from .specs.final import choose_config


def matmul(A, B, params: dict | None = None):
    """C = A @ B with the final kernel and the config :func:`choose_config` picks for the shape."""
    M, N, K = operand_shapes(A, B)
    launcher = prepare(final.SPEC, M, N, K, params or choose_config(M, N, K, hardware.current()))
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    launcher(A, B, C)
    return C


def chapter_sweep(device: Device) -> list:
    """What the final chapter records: the default at three sizes, the choice at 4096,
    8192 and every suite shape, and one knob at a time around the 4096/8192 choices."""
    spec = final.SPEC
    c4, c8 = choose_config(4096, 4096, 4096, device), choose_config(8192, 8192, 8192, device)
    items = ([(spec.defaults(), (n, n, n)) for n in (1024, 2048, 4096)]
             + [(c4, (4096,) * 3), (c8, (8192,) * 3)]
             + [(choose_config(*s, device), s) for s in SUITE]
             + [(dict(c4, STAGES=st), (4096,) * 3) for st in (2, 3, 4) if st != c4["STAGES"]]
             + [(dict(c8, GROUP=0), (8192,) * 3)])
    out = []
    for params, shape in items:
        if (params, shape) not in out and spec.is_valid(params, device):
            out.append((params, shape))
    return [(spec, p, s) for p, s in out]

