"""The device model: every hardware number the project uses lives here.

A :class:`Device` is one GPU: its name and compute capability, SM count, clock,
L2 and memory bandwidth, and the per-SM and per-block limits of its compute
capability (from the CUDA C++ Programming Guide's table of compute capabilities).
Validation, occupancy, the models, the rooflines and the final kernel's choices all
take their numbers from a Device, never from a constant of their own.

Where a Device comes from:

* :func:`current`: the GPU this process runs on (live mode), or the emulated target
  ``SGEMM_BOOK_TARGET=sm_86`` (its limits, a representative GPU's SM count and clocks);
* :meth:`Device.from_record`: the device block of a recorded chapter (recorded mode);
* :func:`default`: the current GPU when there is one, else the book's reference device
  from its datasheet, so that code with no GPU (the book build, offline compiles) checks
  configs against the GPU the recorded data comes from.

Taught in the chapters "The naive kernel" (rooflines) and "Shared-memory tiling" (occupancy).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, replace

from . import settings

# Architecture facts that no compute capability changes.
WARP_SIZE = 32
SMEM_BANKS = 32              # shared memory: 32 banks of 4-byte words
SECTOR_BYTES = 32            # the unit DRAM, L2 and L1 move
LINE_BYTES = 128             # the unit L1 tags: 4 sectors
STATIC_SMEM_PER_BLOCK = 48 * 1024   # static __shared__ arrays; more must be dynamic and opted in
MAX_GRID_YZ = 65535          # blocks along y and z of a grid
INT32_LIMIT = 2**31          # a kernel that indexes with int must keep every index below this

# Per compute capability (CUDA C++ Programming Guide, "Compute Capabilities").
#   threads_sm / blocks_sm: resident threads and blocks per SM
#   smem_sm / smem_block: shared memory per SM / per block with the opt-in
#   smem_reserved: shared memory the driver keeps per block; smem_unit: allocation unit
#   fp32_lanes: FP32 FMA units per SM
_CC = {
    "7.0": dict(threads_sm=2048, blocks_sm=32, smem_sm=96 * 1024, smem_block=96 * 1024, smem_reserved=0,
                smem_unit=256, fp32_lanes=64),
    "7.5": dict(threads_sm=1024, blocks_sm=16, smem_sm=64 * 1024, smem_block=64 * 1024, smem_reserved=0,
                smem_unit=256, fp32_lanes=64),
    "8.0": dict(threads_sm=2048, blocks_sm=32, smem_sm=164 * 1024, smem_block=163 * 1024, smem_reserved=1024,
                smem_unit=128, fp32_lanes=64),
    "8.6": dict(threads_sm=1536, blocks_sm=16, smem_sm=100 * 1024, smem_block=99 * 1024, smem_reserved=1024,
                smem_unit=128, fp32_lanes=128),
    "8.7": dict(threads_sm=2048, blocks_sm=16, smem_sm=164 * 1024, smem_block=163 * 1024, smem_reserved=1024,
                smem_unit=128, fp32_lanes=128),
    "8.9": dict(threads_sm=1536, blocks_sm=24, smem_sm=100 * 1024, smem_block=99 * 1024, smem_reserved=1024,
                smem_unit=128, fp32_lanes=128),
    "9.0": dict(threads_sm=2048, blocks_sm=32, smem_sm=228 * 1024, smem_block=227 * 1024, smem_reserved=1024,
                smem_unit=128, fp32_lanes=128),
    "10.0": dict(threads_sm=2048, blocks_sm=32, smem_sm=228 * 1024, smem_block=227 * 1024, smem_reserved=1024,
                 smem_unit=128, fp32_lanes=128),
    "12.0": dict(threads_sm=1536, blocks_sm=32, smem_sm=128 * 1024, smem_block=99 * 1024, smem_reserved=1024,
                 smem_unit=128, fp32_lanes=128),
}
# L1 data cache and shared memory per SM: one on-chip memory, split between the two per kernel
# (CUDA C++ Programming Guide and the tuning guide of each architecture: "combined L1 cache and
# shared memory").
L1_SMEM_PER_SM = {"7.0": 128 * 1024, "7.5": 96 * 1024, "8.0": 192 * 1024, "8.6": 128 * 1024, "8.7": 192 * 1024,
                  "8.9": 128 * 1024, "9.0": 256 * 1024, "10.0": 256 * 1024, "12.0": 128 * 1024}
# The same on every compute capability from 7.0 on.
REGISTERS_PER_SM = 65536
REGISTERS_PER_BLOCK = 65536
MAX_REGISTERS_PER_THREAD = 255
REGISTER_UNIT = 256          # registers are handed to a warp in chunks of 256
REGISTER_PARTS = 4           # the register file is split in 4; a warp lives in one part
MAX_THREADS_PER_BLOCK = 1024

# Datasheet figures (boost clock, memory bandwidth) of GPUs the book names: the
# reference device, and one representative GPU per emulated target.
DATASHEETS = {
    "NVIDIA H100 80GB HBM3": dict(cc="9.0", sm_count=132, clock_mhz=1980, l2_mib=50, bandwidth_gbs=3350),
    "NVIDIA H200": dict(cc="9.0", sm_count=132, clock_mhz=1980, l2_mib=60, bandwidth_gbs=4800),
    "Tesla V100-SXM2-16GB": dict(cc="7.0", sm_count=80, clock_mhz=1530, l2_mib=6, bandwidth_gbs=900),
    "Tesla T4": dict(cc="7.5", sm_count=40, clock_mhz=1590, l2_mib=4, bandwidth_gbs=320),
    "NVIDIA A100-SXM4-40GB": dict(cc="8.0", sm_count=108, clock_mhz=1410, l2_mib=40, bandwidth_gbs=1555),
    "NVIDIA GeForce RTX 3090": dict(cc="8.6", sm_count=82, clock_mhz=1695, l2_mib=6, bandwidth_gbs=936),
    "NVIDIA L4": dict(cc="8.9", sm_count=58, clock_mhz=2040, l2_mib=48, bandwidth_gbs=300),
}
# SGEMM_BOOK_TARGET -> the GPU whose SM count and clocks an emulated run assumes.
EMULATED = {"sm_70": "Tesla V100-SXM2-16GB", "sm_75": "Tesla T4", "sm_80": "NVIDIA A100-SXM4-40GB",
            "sm_86": "NVIDIA GeForce RTX 3090", "sm_89": "NVIDIA L4", "sm_90": "NVIDIA H100 80GB HBM3"}


class DeviceError(RuntimeError):
    """No GPU where one is needed, or a GPU the device model does not know."""


@dataclass(frozen=True)
class Device:
    """One GPU: identity, size, speed and limits."""

    name: str
    cc: str                       # compute capability, "9.0"
    sm_count: int
    clock_mhz: int                # SM clock the FP32 peak is computed at
    l2_bytes: int
    bandwidth_gbs: float          # device-memory bandwidth
    source: str = "datasheet"     # "this GPU", "recorded", "datasheet", "emulated sm_86"
    emulated: bool = False        # compile for cc and check against its limits, run on the GPU present

    # ------------------------------------------------------------- identity
    @property
    def arch(self) -> str:
        """The compile target, ``"sm_90"``."""
        return "sm_" + self.cc.replace(".", "")

    @property
    def label(self) -> str:
        return f"{self.name} (emulated {self.arch})" if self.emulated else self.name

    @property
    def has_cp_async(self) -> bool:
        """cp.async (global -> shared copies without registers) needs compute capability 8.0."""
        return self.cc_tuple >= (8, 0)

    @property
    def cc_tuple(self) -> tuple[int, int]:
        major, minor = self.cc.split(".")
        return int(major), int(minor)

    # --------------------------------------------------------------- limits
    @property
    def _cc(self) -> dict:
        try:
            return _CC[self.cc]
        except KeyError:
            raise DeviceError(f"compute capability {self.cc} ({self.name}) is not in the device model; "
                              f"known: {', '.join(_CC)}") from None

    @property
    def max_threads_per_block(self) -> int:
        return MAX_THREADS_PER_BLOCK

    @property
    def max_threads_per_sm(self) -> int:
        return self._cc["threads_sm"]

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE

    @property
    def max_blocks_per_sm(self) -> int:
        return self._cc["blocks_sm"]

    @property
    def smem_per_sm(self) -> int:
        return self._cc["smem_sm"]

    @property
    def l1_smem_per_sm(self) -> int:
        """The SM's on-chip memory that L1 and shared memory split (:data:`L1_SMEM_PER_SM`)."""
        return L1_SMEM_PER_SM[self.cc]

    @property
    def smem_per_block(self) -> int:
        """Shared memory one block may use (dynamic, with the opt-in)."""
        return self._cc["smem_block"]

    @property
    def smem_per_block_static(self) -> int:
        return STATIC_SMEM_PER_BLOCK

    @property
    def smem_reserved_per_block(self) -> int:
        return self._cc["smem_reserved"]

    @property
    def smem_unit(self) -> int:
        return self._cc["smem_unit"]

    registers_per_sm = REGISTERS_PER_SM
    registers_per_block = REGISTERS_PER_BLOCK
    max_registers_per_thread = MAX_REGISTERS_PER_THREAD
    register_unit = REGISTER_UNIT
    register_parts = REGISTER_PARTS
    warp_size = WARP_SIZE

    def register_budget(self, threads: int, blocks_per_sm: int = 1) -> int:
        """Registers a thread may use so that ``blocks_per_sm`` blocks of ``threads`` fit an SM
        (what ``__launch_bounds__(threads, blocks_per_sm)`` asks the compiler for)."""
        per_thread = self.registers_per_sm // (threads * max(blocks_per_sm, 1))
        return min(self.max_registers_per_thread, per_thread // 8 * 8)

    # ------------------------------------------------------------- ceilings
    @property
    def fp32_lanes(self) -> int:
        return self._cc["fp32_lanes"]

    @property
    def fp32_tflops(self) -> float:
        """FP32 peak: an FMA (2 FLOP) per lane per clock on every SM."""
        return self.sm_count * self.fp32_lanes * 2 * self.clock_mhz * 1e6 / 1e12

    @property
    def bandwidth_tbs(self) -> float:
        return self.bandwidth_gbs / 1e3

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.fp32_tflops / self.bandwidth_tbs

    def attainable(self, intensity: float) -> float:
        """The roofline: TFLOP/s reachable at an arithmetic intensity."""
        return min(self.fp32_tflops, intensity * self.bandwidth_tbs)

    # --------------------------------------------------------------- builders
    @classmethod
    def from_datasheet(cls, name: str) -> "Device":
        try:
            d = DATASHEETS[name]
        except KeyError:
            raise DeviceError(f"no datasheet for {name!r}; known: {sorted(DATASHEETS)}") from None
        return cls(name, d["cc"], d["sm_count"], d["clock_mhz"], d["l2_mib"] * 2**20, d["bandwidth_gbs"])

    @classmethod
    def emulating(cls, arch: str) -> "Device":
        """The device an emulated target stands for: its limits, a representative GPU's numbers."""
        if arch not in EMULATED:
            raise DeviceError(f"SGEMM_BOOK_TARGET={arch!r} is not an emulated target; choose one of "
                              f"{', '.join(EMULATED)}")
        return replace(cls.from_datasheet(EMULATED[arch]), source=f"emulated {arch}", emulated=True)

    @classmethod
    def from_record(cls, d: dict) -> "Device":
        """The device block that ``record`` wrote next to a chapter's rows."""
        return cls(d["name"], d["compute_capability"], int(d["sm_count"]), int(d["clock_mhz"]),
                   int(d["l2_bytes"]), float(d["bandwidth_gbs"]), source="recorded")

    def as_record(self) -> dict:
        """The fields :meth:`from_record` reads, under their recorded names."""
        return {"name": self.name, "compute_capability": self.cc, "sm_count": self.sm_count,
                "clock_mhz": self.clock_mhz, "l2_bytes": self.l2_bytes, "bandwidth_gbs": self.bandwidth_gbs}

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------ occupancy
# How many blocks of a kernel fit on one SM, and what limits it (the rules of CUDA's
# occupancy calculator; taught in the chapter "Shared-memory tiling"). An SM keeps a
# block resident until it finishes, so it holds several at once only if their warps,
# registers and shared memory all fit:
#   warps: at most max_warps_per_sm; registers: allocated per warp in units of 256, the
#   register file split in 4 parts that each hold whole warps; shared memory: what the
#   kernel declares plus the driver's reserve, rounded up to the allocation unit;
#   blocks: at most max_blocks_per_sm. The smallest count wins.
LIMITERS = ("warps", "registers", "shared memory", "blocks per SM")


@dataclass
class Occupancy:
    """Resident blocks and warps per SM for one block size and resource use."""

    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str                  # one of LIMITERS: the resource that runs out first
    by_limit: dict                # blocks per SM each resource alone would allow
    threads_per_block: int = 0
    registers_per_thread: int = 0
    smem_per_block: int = 0       # bytes the kernel asks for (without the driver's reserve)
    detail: dict = field(default_factory=dict)   # allocation sizes behind the counts

    @property
    def fraction(self) -> float:
        """Resident warps as a fraction of the SM's maximum (the usual "occupancy")."""
        return self.active_warps / self.max_warps

    def __str__(self):
        return (f"{self.blocks_per_sm} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({100 * self.fraction:.0f}%), limited by {self.limiter}")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(threads_per_block: int, registers_per_thread: int, smem_per_block: int, device: Device) -> Occupancy:
    """Blocks per SM allowed by warps, registers, shared memory and the block limit.

    ``smem_per_block`` is what the kernel declares (static + dynamic), without the
    driver's reserve. A block that cannot fit at all gets 0 blocks, limited by the
    resource it exceeds.
    """
    d = device
    warps = -(-threads_per_block // d.warp_size)
    by_warps = d.max_warps_per_sm // warps if threads_per_block <= d.max_threads_per_block else 0

    regs_per_warp = _round_up(max(registers_per_thread, 1) * d.warp_size, d.register_unit)
    if (registers_per_thread > d.max_registers_per_thread
            or regs_per_warp * _round_up(warps, d.register_parts) > d.registers_per_block):
        by_regs = 0
    else:
        warps_per_part = (d.registers_per_sm // d.register_parts) // regs_per_warp
        by_regs = (warps_per_part * d.register_parts) // warps

    smem_alloc = _round_up(smem_per_block + d.smem_reserved_per_block, d.smem_unit)
    if smem_per_block > d.smem_per_block:
        by_smem = 0
    elif smem_alloc == 0:               # no shared memory and no driver reserve (before 8.0): no limit
        by_smem = d.max_blocks_per_sm
    else:
        by_smem = d.smem_per_sm // smem_alloc

    by = {"warps": by_warps, "registers": by_regs, "shared memory": by_smem, "blocks per SM": d.max_blocks_per_sm}
    candidates = [k for k in LIMITERS if not (k == "shared memory" and smem_alloc == 0)]
    limiter = min(candidates, key=lambda k: by[k])    # ties: the first in LIMITERS order
    blocks = by[limiter]
    detail = {"warps_per_block": warps, "registers_per_warp": regs_per_warp,
              "registers_per_block": regs_per_warp * warps, "smem_allocated_per_block": smem_alloc}
    return Occupancy(blocks, blocks * warps, d.max_warps_per_sm, limiter, by, threads_per_block,
                     registers_per_thread, smem_per_block, detail)



# ------------------------------------------------------------------ the GPU here
@functools.cache
def gpu_available() -> bool:
    """Whether CuPy sees a CUDA GPU (False with no CuPy, no driver or no device)."""
    try:
        import cupy  # noqa: PLC0415  (CuPy may be missing or broken: that is the question asked)

        return bool(cupy.cuda.is_available())
    except Exception:
        return False


def is_live() -> bool:
    """Live mode: kernels compile and run now. Recorded mode: figures read book/data."""
    forced = settings.forced_mode()
    if forced == "recorded":
        return False
    if forced == "live" and not gpu_available():
        raise DeviceError("SGEMM_BOOK_MODE=live but CuPy sees no CUDA GPU")
    if settings.target() and not gpu_available():
        raise DeviceError(f"SGEMM_BOOK_TARGET={settings.target()} needs a GPU to run the emulated target's code on")
    return forced == "live" or gpu_available()


@functools.cache
def _gpu() -> Device:
    import cupy  # noqa: PLC0415  (only reached with a GPU present)

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    attrs = dev.attributes
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    cc = f"{props['major']}.{props['minor']}"
    sheet = DATASHEETS.get(name, {})
    clock = int(attrs.get("ClockRate", 0)) // 1000 or sheet.get("clock_mhz", 0)
    bus_bits, mem_khz = attrs.get("GlobalMemoryBusWidth", 0), attrs.get("MemoryClockRate", 0)
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9 or sheet.get("bandwidth_gbs", 0.0)
    return Device(name, cc, int(props["multiProcessorCount"]), clock, int(props["l2CacheSize"]),
                  round(bandwidth, 1), source="this GPU")


def gpu() -> Device:
    """The GPU present (never an emulated target)."""
    if not gpu_available():
        raise DeviceError("no CUDA GPU: cupy.cuda.is_available() is False")
    return _gpu()


def current() -> Device:
    """The device live mode runs for: the emulated target when one is set, else the GPU present."""
    arch = settings.target()
    if arch:
        return Device.emulating(arch)
    return gpu()


def default() -> Device:
    """The GPU this code is for: the current one in live mode, else the book's reference device."""
    if is_live():
        return current()
    return Device.from_datasheet(settings.reference_device())
