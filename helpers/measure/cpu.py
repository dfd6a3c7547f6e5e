"""The data of the chapter "On the CPU" (book/01_cpu.md): measured on this machine, or recorded.

The chapter reads one :class:`CpuRun`: the machine (CPU model, cores, the vector
instruction sets that matter, caches, NumPy, Numba and the BLAS NumPy calls), the
tiled kernels' plan, the compiled micro-kernel loops, the agreement check, the timings,
the ratio to NumPy, the loop's ceiling in L1 and the cost of starting the threads.

* Recorded (the online book): ``python -m helpers record --chapter cpu`` on the GPU host
  stores these as the rows of the ``cpu`` data source (:func:`record_rows`); the chapter
  reads them from book/data and names that machine and date on every figure.
* Live: with a GPU present (a notebook on the GPU machine), or with
  ``SGEMM_BOOK_MODE=live`` (which here needs no GPU: the chapter measures this CPU),
  :func:`run` measures now, with the same code :func:`record_rows` uses.

Where the ``cpu`` source has not been recorded yet, :func:`run` returns None and the
chapter says so instead of showing numbers.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass, field

from .. import hardware, settings
from ..runtime import cpu
from . import datafile

CHAPTER = "cpu"
# Instruction-set flags (Linux /proc/cpuinfo names) that decide the vector registers.
FLAGS = ("avx2", "fma", "avx512f", "avx512vl")
# What is timed: ijk stops early (it is slow); the others go up to 2048.
SIZES = {"ijk": [64, 128, 256, 512]} | {name: [64, 128, 256, 512, 1024, 2048] for name in list(cpu.VARIANTS)[1:]} \
    | {cpu.NUMPY: [64, 128, 256, 512, 1024, 2048]}
RATIO_N = 1024


# ------------------------------------------------------------------ the machine
def cpu_flags() -> dict:
    """Which of :data:`FLAGS` this CPU reports (Linux); empty where /proc/cpuinfo is missing."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return {flag: flag in have for flag in FLAGS}
    except OSError:
        pass
    return {}


def machine() -> dict:
    """The CPU and the software of this run."""
    import numba
    import numpy

    return {"cpu": cpu.cpu_name(), "cores": cpu.cores(), "flags": cpu_flags(), "caches": cpu.caches(),
            "numpy": numpy.__version__, "numba": numba.__version__, "python": platform.python_version(),
            "blas": cpu.blas_name(), "system": platform.platform()}


def vector_registers(flags: dict) -> dict:
    """How many vector registers of each width the instruction sets give (x86-64).

    Without AVX-512 there are 16 (xmm0-15, ymm0-15); AVX-512F adds zmm0-31, and AVX-512VL
    lets the 128- and 256-bit instructions name registers 16-31 too."""
    wide = 32 if flags.get("avx512f") else 16
    narrow = 32 if flags.get("avx512vl") else 16
    return {"xmm": narrow, "ymm": narrow, "zmm": wide if flags.get("avx512f") else 0}


# ------------------------------------------------------------------ measuring
def measure(sizes: dict | None = None, progress=None) -> list[dict]:
    """Every row the chapter needs, measured on this machine now (tagged by ``what``)."""
    cpu.warm_up()
    rows = [{"what": "machine", **machine()}, {"what": "plan", **cpu.plan()}]
    for t in cpu.micro_tile()["tried"]:
        rows.append({"what": "loop", **{k: v for k, v in t.items() if k != "tried"},
                     "asm": cpu.micro_kernel_loop(t["NR"])})
    rows += [{"what": "agreement", **r} for r in cpu.agreement()]
    rows += [{"what": "timing", **r} for r in cpu.benchmark(sizes or SIZES, progress=progress)]
    rows.append({"what": "ratio", **cpu.ratio_to_numpy(RATIO_N)})
    rows.append({"what": "ceiling", **cpu.loop_ceiling()})
    rows.append({"what": "facts", "parallel_overhead_s": cpu.parallel_overhead(), "load_average": cpu.load_average()})
    return rows


def record_rows() -> list[dict]:
    """The ``cpu`` data source: what ``python -m helpers record --chapter cpu`` stores."""
    return measure(progress=lambda line: print("   " + line, flush=True))


# ------------------------------------------------------------------ reading
@dataclass
class CpuRun:
    """The chapter's measurements and where they were taken."""

    machine: dict
    plan: dict
    loops: list                     # the register tiles tried, widest first; the last is the one used
    agreement: list
    rows: list                      # timing rows (helpers.runtime.cpu.row)
    ratio: dict
    ceiling: dict
    facts: dict
    live: bool
    date: str = ""                  # recorded: the day of the record
    extra: dict = field(default_factory=dict)

    @property
    def tile(self) -> dict:
        """The register tile the tiled kernels used, with its loop's counts and the tiles tried."""
        return {**self.loops[-1], "tried": self.loops}

    @property
    def caches(self) -> dict:
        return self.machine.get("caches", {})

    @property
    def cores(self) -> int:
        return self.machine["cores"]

    @property
    def flags(self) -> dict:
        return self.machine.get("flags", {})

    @property
    def name(self) -> str:
        """The CPU and its cores, as the figures name them."""
        return f"{self.machine['cpu']}, {self.cores} cores"

    @property
    def source(self) -> str:
        if self.live:
            return f"measured on this machine: {self.name}"
        return f"recorded on {self.name}, {self.date}"

    def all_facts(self) -> dict:
        """What :func:`helpers.models.cpu.steps` takes as measured facts."""
        return {"tile": self.tile, "cores": self.cores, **self.facts}


def from_rows(rows: list[dict], live: bool, date: str = "") -> CpuRun:
    """A :class:`CpuRun` from the rows :func:`measure` returns (or the recorded ones)."""
    def strip(r):
        return {k: v for k, v in r.items() if k != "what"}

    def of(what):
        return [strip(r) for r in rows if r.get("what") == what]

    one = lambda what: (of(what) or [{}])[0]      # noqa: E731
    return CpuRun(machine=one("machine"), plan=one("plan"), loops=of("loop"), agreement=of("agreement"),
                  rows=of("timing"), ratio=one("ratio"), ceiling=one("ceiling"), facts=one("facts"),
                  live=live, date=date)


def live() -> bool:
    """Measure now? With ``SGEMM_BOOK_MODE=live`` (no GPU needed here), or unset with a GPU present."""
    mode = settings.forced_mode()
    return mode == "live" or (mode is None and hardware.gpu_available())


def recorded() -> CpuRun | None:
    """The recorded run, or None where the ``cpu`` source is not in the reference device's file yet."""
    try:
        ch = datafile.load().chapter(CHAPTER)
    except datafile.DataError:
        return None
    return from_rows(ch["rows"], live=False, date=ch["recorded"][:10])


def run() -> CpuRun | None:
    """The chapter's data: measured now in live mode, else recorded (None if not recorded yet)."""
    if live():
        return from_rows(measure(), live=True)
    return recorded()


RECORD_COMMAND = f"python -m helpers record --chapter {CHAPTER}"
