"""Per-shape config choice for the final kernel (kernels/10_final.cu); placeholder table."""
from __future__ import annotations


def choose_config(M: int, N: int, K: int) -> dict:
    from .registry import get

    return get("final").defaults()
