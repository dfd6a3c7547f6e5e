"""A :class:`KernelSpec` is everything Python knows about one kernel of ``kernels/``.

Its C++ template parameters (defaults and allowed values), the launch geometry, the
tiles it computes and reuses, a register estimate, and the rules a config and a
problem shape must obey. Every rule is checked in Python *before* anything compiles
or launches, against a :class:`helpers.hardware.Device`; a broken rule raises
:class:`ConfigError` naming the rule and, where one exists, the nearest valid config.

Models and figures ask a spec, never the kernel's name, for what a config does:
``spec.tiles(params)`` is the block tile, k-slice and thread tile, and
``spec.registers(params)`` the register estimate behind the spill rule.

Taught in the chapter "The naive kernel" (book/02_naive.md).
"""
from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from .. import hardware, settings
from ..hardware import Device

Rule = Callable[[dict], "str | None"]                       # a config -> a broken rule, or None
ShapeRule = Callable[[dict, int, int, int], "str | None"]   # also sees M, N, K


class ConfigError(ValueError):
    """A kernel config or problem shape breaks one of the kernel's rules."""


@dataclass(frozen=True)
class Param:
    """One C++ template parameter of a kernel, or (``template=False``) a choice the launch
    makes on the host, such as packing an operand first."""

    name: str
    default: int
    allowed: tuple[int, ...]
    doc: str = ""
    template: bool = True


@dataclass(frozen=True)
class Tiles:
    """What one config computes and reuses (the inputs of every traffic model).

    A block computes a BM x BN tile of C, staging BK-deep slices of A and B in shared
    memory (``BK = 0``: no shared memory), and each thread computes TM x TN results.
    """

    BM: int
    BN: int
    BK: int
    TM: int
    TN: int

    @property
    def shared(self) -> bool:
        return self.BK > 0


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many tiles of size b cover a."""
    return -(-a // b)


INCLUDE = re.compile(r'^#include\s+"([^"]+)"\s*(?://.*)?$', re.M)


def read_worktree(path: Path) -> str | None:
    """A file's text in the working tree, None where there is none."""
    return path.read_text() if path.exists() else None


def inline_includes(path: Path, read=read_worktree) -> str:
    """The file's text with each local ``#include "x.cuh"`` replaced by that header.

    CuPy's compile cache keys on the source text, so a header must be part of the
    text for a change in it to recompile. ``#line`` directives keep the line numbers
    of sanitizer and compiler messages pointing at the right file and line.
    ``read`` gives a file's text (scripts/check_source_equivalence.py reads a past commit).
    """
    out = []
    for n, line in enumerate(read(path).splitlines(), 1):
        m = INCLUDE.match(line)
        if m and read(path.parent / m.group(1)) is not None:
            out += [f'#line 1 "{m.group(1)}"', inline_includes(path.parent / m.group(1), read),
                    f'#line {n + 1} "{path.name}"']
        else:
            out.append(line)
    return "\n".join(out)


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """Everything Python needs to validate, compile and launch one kernel."""

    name: str                 # registry key, also the chapter's name for its kernel
    file: str                 # file in kernels/, e.g. "02_naive.cu"
    function: str             # C++ template function, e.g. "sgemm_naive"
    title: str                # for figures and tables
    chapter: str              # chapter key whose sweep records this kernel
    params: tuple[Param, ...]
    block: Callable[[dict], tuple[int, int, int]]
    # The launch's grid from (params, M, N, K, device): the final kernel's stream-K grid has one
    # block per resident slot of the device; most kernels' grids follow from the shape alone.
    grid: Callable[[dict, int, int, int, Device], tuple[int, int, int]]
    tiles: Callable[[dict], Tiles]
    label: Callable[[dict], str]
    summary: str              # what the file adds over the previous chapter
    smem_bytes: Callable[[dict], int] = lambda p: 0        # dynamic shared memory
    static_smem: Callable[[dict], int] = lambda p: 0       # __shared__ arrays declared in the kernel
    # Registers a thread needs (a model calibrated on the offline compile), None: not modelled.
    registers: Callable[[dict], int] | None = None
    # Blocks per SM the kernel's __launch_bounds__ asks for (sets the register budget).
    min_blocks: Callable[[dict], int] = lambda p: 1
    # Configs that ptxas fits into that budget whatever the estimate says (the kernel's own rule,
    # each checked offline for spills by the spec's tests): they use the budget, never more.
    fits_budget: Callable[[dict], bool] = lambda p: False
    rules: tuple[Rule, ...] = ()
    shape_rules: tuple[ShapeRule, ...] = ()
    int32_indices: bool = True        # indexes with int: operands below 2^31 elements
    uses_cp_async: bool = False       # cp.async copies; before compute capability 8.0 they are
                                      # ordinary loads and stores (kernels/common.cuh)
    # One thread per element of C: the (row, col) that thread (x, y) of block (0, 0) computes.
    element: Callable[[int, int], tuple[int, int]] | None = None
    # Floats one global load instruction moves on the fast path (4: float4).
    load_width: int = 1
    # The shared-memory layout in the bank model's terms (BK, SPLIT, PAD, SWIZZLE of the
    # 128 x 128 tile with 8 x 8 per thread), None where the model does not cover the kernel.
    smem_layout: Callable[[dict], dict | None] | None = None
    # Per k, the byte offsets each lane's LDS.128 fragment reads: ([A instr][lane], [B instr][lane]).
    fragments: Callable[[dict], tuple[list, list]] | None = None
    # Registers a thread holds for data, by role (accumulators, operands, staged tiles): a model
    # of the declarations, for the chapters; None: not described.
    register_roles: Callable[[dict], dict] | None = None
    # How the kernel picks its config for a shape on a device; None: its defaults serve every shape.
    choose: Callable[[int, int, int, Device], dict] | None = None
    # Per-launch workspace (floats, counters) after C in the kernel's arguments, from (params, M, N,
    # K, device); None: none.
    workspace: Callable[[dict, int, int, int, Device], tuple[int, int]] | None = None
    # The kernel's argument tuple from (params, M, N, K, A, B, C, workspace), for kernels whose
    # arguments are more than the operands (leading dimensions, alpha, beta); None:
    # (M, N, K, A, B, C) + workspace.
    args: Callable[[dict, int, int, int, object, object, object, tuple], tuple] | None = None
    # Grid and workspace of a launch worked out together, with options (the final kernel's batch
    # of products and its stream-K cap): (params, M, N, K, device, **options) -> (grid, (floats,
    # counters)). None: ``grid`` and ``workspace``.
    plan: Callable[[dict, int, int, int, Device], tuple] | None = None
    # Whether a config reads A and B as float4 with no alignment check: then each must start
    # on a 16-byte boundary (a view into a bigger array may not), checked before each launch.
    aligned_operands: Callable[[dict], bool] = lambda p: False
    # Work launched after the kernel on the same stream, from (params, M, N, K, the kernel's
    # arguments): the final kernel's split-K slabs are added by a second kernel. None: nothing.
    after: Callable[[dict, int, int, int, tuple], None] | None = None
    # Non-empty for a kernel kept *because* it is wrong (a teaching case): says why.
    broken: str = ""
    # The compile target where it must be one GPU's own ("sm_90a": wgmma runs on compute
    # capability 9.0 only, in code built for exactly that); None: the GPU present's.
    target: str | None = None
    # Other files of kernels/ whose kernels a launch runs as well (the final kernel's packing).
    also_runs: tuple[str, ...] = ()
    # Those of also_runs that a launch of the config runs (None: all of them, whatever the config).
    also_runs_for: Callable[[dict], tuple[str, ...]] | None = None

    # ------------------------------------------------------------- source
    @property
    def path(self) -> Path:
        return settings.KERNEL_DIR / self.file

    def source(self) -> str:
        """The kernel file with its local headers inlined: what the compiler sees."""
        return inline_includes(self.path)

    def runs_also(self, params: dict) -> tuple[str, ...]:
        """The files of ``also_runs`` whose kernels a launch of ``params`` runs too."""
        return self.also_runs if self.also_runs_for is None else self.also_runs_for(params)

    def source_hash(self) -> str:
        """A hash of :meth:`source` and the files it also runs: recorded with every measurement
        of this kernel."""
        text = self.source() + "".join(inline_includes(settings.KERNEL_DIR / f) for f in self.also_runs)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ------------------------------------------------------------- params
    @cached_property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def resolve(self, params: dict | None = None, **kw) -> dict:
        """Fill in defaults; reject unknown names and values outside the allowed ones."""
        given = dict(params or {}, **kw)
        unknown = sorted(set(given) - set(self.param_names))
        if unknown:
            raise ConfigError(f"{self.name}: unknown parameter(s) {unknown}; this kernel takes {self.param_names}")
        full = self.defaults() | given
        for p in self.params:
            v = full[p.name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{self.name}: {p.name} must be an int, got {v!r}")
            if v not in p.allowed:
                raise ConfigError(f"{self.name}: {p.name}={v} is not allowed; choose one of {list(p.allowed)}")
        return full

    def name_expression(self, params: dict) -> str:
        """The C++ template instantiation, e.g. ``sgemm_naive<16, 16>``."""
        args = ", ".join(str(params[p.name]) for p in self.params if p.template)
        return f"{self.function}<{args}>" if args else self.function

    def threads(self, params: dict) -> int:
        return math.prod(self.block(params))

    def registers_on(self, params: dict, device: Device) -> int:
        """Registers a thread of this config takes on ``device``: the estimate, or the budget of
        its __launch_bounds__ where the kernel fits it there (``fits_budget``)."""
        need = self.registers(params)
        if self.fits_budget(params):
            need = min(need, device.register_budget(self.threads(params), self.min_blocks(params)))
        return need

    def geometry(self, params: dict, M: int, N: int, K: int, device: Device, **options) -> tuple[tuple, tuple | None]:
        """(grid, workspace sizes or None) of one launch on ``device``; ``options`` go to ``plan``
        (the final kernel's ``batch`` and ``max_parts``)."""
        if self.plan is not None:
            return self.plan(params, M, N, K, device, **options)
        return (self.grid(params, M, N, K, device),
                self.workspace(params, M, N, K, device) if self.workspace else None)

    def arguments(self, params: dict, M: int, N: int, K: int, A, B, C, workspace: tuple = ()) -> tuple:
        """The kernel's arguments for one launch (see ``args``)."""
        if self.args is not None:
            return self.args(params, M, N, K, A, B, C, workspace)
        return (np.int32(M), np.int32(N), np.int32(K), A, B, C) + tuple(workspace)

    def config_for(self, M: int, N: int, K: int, device: Device) -> dict:
        """The config this kernel runs an M x N x K product with on ``device``."""
        return self.resolve(self.choose(M, N, K, device)) if self.choose else self.defaults()

    # ------------------------------------------------------------- validate
    def problems(self, full: dict, device: Device) -> list[str]:
        """Every rule a resolved config breaks on ``device`` (empty when it is valid)."""
        out = [msg for rule in self.rules if (msg := rule(full))]
        if out:                       # the limits below assume the kernel's own rules hold
            return out
        return self.limit_problems(full, device)

    def limit_problems(self, full: dict, device: Device) -> list[str]:
        """The device's limits a config that obeys the kernel's rules breaks."""
        out = []
        threads = self.threads(full)
        if threads > device.max_threads_per_block:
            out.append(f"{threads} threads per block exceeds the limit of {device.max_threads_per_block}")
        if threads % device.warp_size:
            out.append(f"{threads} threads per block is not a whole number of {device.warp_size}-thread warps")
        static, dynamic = self.static_smem(full), self.smem_bytes(full)
        if static > device.smem_per_block_static:
            out.append(f"the kernel declares {static:,} B of static shared memory, above the "
                       f"{device.smem_per_block_static // 1024} KB a block may declare; lower BK or the tile")
        elif static + dynamic > device.smem_per_block:
            out.append(f"needs {static + dynamic:,} B of shared memory per block; {device.label} allows "
                       f"{device.smem_per_block:,}")
        if self.registers is not None and threads <= device.max_threads_per_block and not out:
            need = self.registers_on(full, device)
            budget = device.register_budget(threads, self.min_blocks(full))
            if need > budget:
                out.append(f"needs about {need} registers per thread, but {threads}-thread blocks "
                           f"({self.min_blocks(full)} per SM) may use {budget}: the rest would spill to "
                           "local memory")
        return out

    def validate(self, params: dict | None = None, device: Device | None = None, **kw) -> dict:
        """Resolve and check a config; returns the full parameter dict or raises ConfigError
        naming the broken rule and the nearest valid config."""
        device = device or hardware.default()
        full = self.resolve(params, **kw)
        problems = self.problems(full, device)
        if problems:
            alt = self.suggest(full, device)
            hint = f" A valid alternative: {self.label(alt)} ({_changes(full, alt)})." if alt else ""
            raise ConfigError(f"{self.name} {self.label(full)}: " + "; ".join(problems) + "." + hint)
        return full

    def is_valid(self, params: dict, device: Device | None = None) -> bool:
        try:
            full = self.resolve(params)
        except ConfigError:
            return False
        return not self.problems(full, device or hardware.default())

    def check_shape(self, params: dict, M: int, N: int, K: int, device: Device) -> None:
        """Raise ConfigError when this config cannot compute an M x N x K product on ``device``."""
        for name, v in (("M", M), ("N", N), ("K", K)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
            if v >= hardware.INT32_LIMIT:
                raise ConfigError(f"{name}={v:,} does not fit the kernel's int arguments (at most 2^31 - 1)")
        broken = [(msg, getattr(rule, "why", None)) for rule in self.shape_rules if (msg := rule(params, M, N, K))]
        problems = [msg for msg, _ in broken]
        problems += list(dict.fromkeys(why for _, why in broken if why))    # each reason once, after its rules
        if self.int32_indices and max(M * K, K * N, M * N) >= hardware.INT32_LIMIT:
            problems.append(f"an operand has {max(M * K, K * N, M * N):,} elements; this kernel indexes with "
                            "32-bit ints, so every operand must stay below 2^31 elements")
        _, gy, gz = self.grid(params, M, N, K, device)
        if max(gy, gz) > hardware.MAX_GRID_YZ:
            problems.append(f"the grid would have {gy} x {gz} blocks in y x z, above CUDA's limit of "
                            f"{hardware.MAX_GRID_YZ}")
        if problems:
            raise ConfigError(f"{self.name} {self.label(params)} on {M}x{N}x{K}: " + "; ".join(problems) + ".")

    # ------------------------------------------------------------- the space
    def space(self, device: Device | None = None):
        """Every valid config: the product of the allowed values, pruned by the rules."""
        device = device or hardware.default()
        for values in itertools.product(*(p.allowed for p in self.params)):
            cfg = dict(zip(self.param_names, values))
            if not self.problems(cfg, device):
                yield cfg

    def fitting(self, params: dict | None = None, device: Device | None = None) -> dict:
        """``params`` (default: the defaults) resolved, or the nearest config that ``device``
        allows where it refuses them (the final kernel's defaults need more shared memory
        than a T4 has); ConfigError when there is none."""
        device = device or hardware.default()
        full = self.resolve(params)
        if not self.problems(full, device):
            return full
        return self.suggest(full, device) or self.validate(full, device)

    def suggest(self, full: dict, device: Device | None = None) -> dict | None:
        """A valid config close to ``full``: the fewest parameters changed, each by the fewest steps.

        Searches configs that differ in one parameter, then two, then three, so it
        answers in milliseconds however large the space is.
        """
        device = device or hardware.default()
        pos = {p.name: p.allowed for p in self.params}

        def distance(cfg):
            return sum(abs(pos[k].index(cfg[k]) - pos[k].index(full[k])) for k in cfg)

        for changed in (1, 2, 3):
            found = []
            for names in itertools.combinations(self.param_names, changed):
                for values in itertools.product(*([v for v in pos[n] if v != full[n]] for n in names)):
                    cfg = dict(full, **dict(zip(names, values)))
                    if not self.problems(cfg, device):
                        found.append(cfg)
            if found:
                return min(found, key=distance)
        return None


def _changes(old: dict, new: dict) -> str:
    return ", ".join(f"{k}={new[k]}" for k in new if new[k] != old.get(k))
