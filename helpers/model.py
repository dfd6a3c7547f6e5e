"""Analytic models: FLOPs, global-memory bytes, arithmetic intensity, roofline.

A block that computes a BM x BN tile of C streams a BM x K panel of A and a
K x BN panel of B through it, so over the whole grid the kernel asks global
memory for ``4 * M * N * K * (1/BM + 1/BN)`` bytes of operands, plus ``4 * M * N``
to write C. Bigger tiles reuse each loaded float more often: that is the whole
story of the book in one formula.

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

from dataclasses import dataclass

FP32_LANES_PER_SM = {"9.0": 128, "8.9": 128, "8.6": 128, "8.0": 64, "7.5": 64, "7.0": 64}

# Datasheet figures (no tensor cores, boost clock) for devices the book has data for.
KNOWN_DEVICES = {
    "NVIDIA H100 80GB HBM3": {"sm_count": 132, "clock_ghz": 1.98, "bandwidth_tbs": 3.35},
    "NVIDIA H200": {"sm_count": 132, "clock_ghz": 1.98, "bandwidth_tbs": 4.8},
}


def flops(M: int, N: int, K: int) -> int:
    """A multiply and an add per (i, j, k): 2 M N K."""
    return 2 * M * N * K


def min_bytes(M: int, N: int, K: int) -> int:
    """Each operand read once and C written once: the least any kernel can move."""
    return 4 * (M * K + K * N + M * N)


def tiled_bytes(M: int, N: int, K: int, BM: int, BN: int) -> float:
    """Global bytes requested by a kernel whose blocks compute BM x BN tiles of C."""
    return 4 * M * N * K * (1 / BM + 1 / BN) + 4 * M * N


def kernel_bytes(name: str, params: dict | None, M: int, N: int, K: int) -> float:
    from .registry import get

    spec = get(name)
    full = spec.resolve(params)
    BM, BN = spec.tile(full)
    return tiled_bytes(M, N, K, BM, BN)


def intensity(name: str, params: dict | None, M: int, N: int, K: int) -> float:
    """FLOPs per byte of global-memory traffic for one kernel config."""
    return flops(M, N, K) / kernel_bytes(name, params, M, N, K)


@dataclass
class Ceilings:
    name: str
    fp32_tflops: float
    bandwidth_tbs: float
    source: str

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.fp32_tflops / self.bandwidth_tbs

    def attainable(self, ai: float) -> float:
        return min(self.fp32_tflops, ai * self.bandwidth_tbs)


def ceilings(device: dict | None = None) -> Ceilings:
    """Roofline ceilings for a recorded device dict, the live GPU, or the H100."""
    if device is None:
        from .mode import gpu_available

        if gpu_available():
            return _live_ceilings()
        device = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    name = device["name"]
    if name in KNOWN_DEVICES:
        d = KNOWN_DEVICES[name]
        lanes = FP32_LANES_PER_SM.get(device.get("compute_capability", "9.0"), 128)
        peak = d["sm_count"] * lanes * 2 * d["clock_ghz"] / 1e3
        return Ceilings(name, peak, d["bandwidth_tbs"], "datasheet")
    raise ValueError(f"no ceilings known for {name!r}; known: {sorted(KNOWN_DEVICES)}")


def _live_ceilings() -> Ceilings:
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    if name in KNOWN_DEVICES:
        return ceilings({"name": name, "compute_capability": f"{props['major']}.{props['minor']}"})
    lanes = FP32_LANES_PER_SM.get(f"{props['major']}.{props['minor']}", 128)
    attrs = dev.attributes
    peak = props["multiProcessorCount"] * lanes * 2 * attrs["ClockRate"] * 1e3 / 1e12
    bw = 2 * attrs["MemoryClockRate"] * 1e3 * attrs["GlobalMemoryBusWidth"] / 8 / 1e12
    return Ceilings(name, peak, bw, "device properties")


# ------------------------------------------------------ loads per result of C
def loads_per_result(kernel: str, params: dict | None, K: int) -> dict:
    """Global and shared-memory loads (in floats) per element of C, for the tiled kernels.

    Taught in the chapters "Shared-memory tiling" and "1D thread tiles".
    smem tiling: each of TILE^2 threads loads one float of A and one of B per
    TILE-wide step (2K/TILE global) and reads 2 floats from shared memory per k.
    1D tiles: the block's threads load (BM + BN) * BK floats per step for BM * BN
    results; a thread reads TM + 1 shared floats per k for TM results.
    """
    from .registry import get

    spec = get(kernel)
    p = spec.resolve(params)
    if kernel == "smem_tiling":
        return {"global": 2 * K / p["TILE"], "shared": 2 * K}
    if kernel == "thread_tile_1d":
        return {"global": (p["BM"] + p["BN"]) * K / (p["BM"] * p["BN"]), "shared": (p["TM"] + 1) * K / p["TM"]}
    if kernel in ("thread_tile_2d", "vectorized"):
        return {"global": (p["BM"] + p["BN"]) * K / (p["BM"] * p["BN"]),
                "shared": (p["TM"] + p["TN"]) * K / (p["TM"] * p["TN"])}
    if kernel in ("naive", "coalesced"):
        return {"global": 2 * K, "shared": 0}
    raise ValueError(f"no load model for {kernel!r}")
