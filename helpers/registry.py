"""Kernel registry: one :class:`KernelSpec` per ``kernels/*.cu`` file.

A spec knows the kernel's C++ template parameters (with defaults and allowed
values), how to derive the launch geometry from them, and the rules a config and
a problem shape must satisfy. Every rule is checked in Python *before* anything
compiles or launches, and a broken rule raises :class:`ConfigError` (a
``ValueError``) that names the rule and suggests a valid alternative.

Taught in the chapter "The naive kernel" (book/03_naive.md).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
KERNEL_DIR = ROOT / "kernels"

# Hardware limits used when no GPU is present (sm_90, H100/H200).
SM90_LIMITS = {
    "max_threads_per_block": 1024,
    "max_smem_per_block": 227 * 1024,  # opt-in maximum per block on sm_90
    "default_smem_per_block": 48 * 1024,
    "max_smem_per_sm": 228 * 1024,
    "regs_per_sm": 65536,
    "max_regs_per_thread": 255,
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "warp_size": 32,
    "sm_count": 132,
}


class ConfigError(ValueError):
    """A kernel config or problem shape breaks one of the kernel's rules."""


@dataclass(frozen=True)
class Param:
    """One C++ template parameter of a kernel."""

    name: str
    default: int
    allowed: tuple[int, ...]
    doc: str = ""


# A rule takes the full parameter dict and returns an error message or None.
Rule = Callable[[dict], "str | None"]
# A shape rule also sees the problem shape.
ShapeRule = Callable[[dict, int, int, int], "str | None"]


@dataclass
class KernelSpec:
    """Everything Python needs to compile, validate and launch one kernel."""

    name: str  # registry key, e.g. "naive"
    file: str  # file name in kernels/, e.g. "01_naive.cu"
    function: str  # C++ template function name, e.g. "sgemm_naive"
    title: str  # human-readable, for figures and tables
    chapter: str  # chapter key that records this kernel's sweep
    params: tuple[Param, ...]
    block: Callable[[dict], tuple[int, int, int]]
    grid: Callable[[dict, int, int, int], tuple[int, int, int]]
    smem_bytes: Callable[[dict], int] = lambda p: 0  # dynamic shared memory
    rules: tuple[Rule, ...] = ()
    shape_rules: tuple[ShapeRule, ...] = ()
    # A short description of what the file adds over the previous chapter.
    summary: str = ""
    # Extra compile options for NVRTC (tuple of strings).
    options: tuple[str, ...] = ()
    # How a figure names one config, e.g. "16x16" for a block shape.
    label: Callable[[dict], str] | None = None
    # The output tile one block computes, (rows, cols) of C: sets global traffic.
    tile: Callable[[dict], tuple[int, int]] = lambda p: (1, 1)
    # Non-empty for a kernel kept *because* it is wrong (a teaching case, e.g. a
    # race): says why. Correctness tests expect it to fail rather than pass.
    broken: str = ""

    # ------------------------------------------------------------------ params
    @property
    def path(self) -> Path:
        return KERNEL_DIR / self.file

    def source(self) -> str:
        return self.path.read_text()

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def resolve(self, params: dict | None = None, **kw) -> dict:
        """Fill in defaults and reject unknown names or disallowed values."""
        given = dict(params or {}, **kw)
        names = [p.name for p in self.params]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ConfigError(
                f"{self.name}: unknown parameter(s) {unknown}; this kernel takes {names}"
            )
        full = self.defaults()
        full.update(given)
        for p in self.params:
            v = full[p.name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{self.name}: {p.name} must be an int, got {v!r}")
            if v not in p.allowed:
                raise ConfigError(
                    f"{self.name}: {p.name}={v} is not allowed; choose one of {list(p.allowed)}"
                )
        return full

    def label_of(self, params: dict) -> str:
        if self.label is not None:
            return self.label(params)
        return ",".join(f"{k}={v}" for k, v in params.items())

    def name_expression(self, params: dict) -> str:
        """The C++ template instantiation, e.g. ``sgemm_naive<16, 16>``."""
        args = ", ".join(str(params[p.name]) for p in self.params)
        return f"{self.function}<{args}>" if self.params else self.function

    # --------------------------------------------------------------- validate
    def validate(self, params: dict | None = None, limits: dict | None = None, **kw) -> dict:
        """Resolve and check a config against the kernel's rules and the device limits.

        Returns the full parameter dict or raises ConfigError naming the broken
        rule and, where one exists, the nearest valid config.
        """
        full = self.resolve(params, **kw)
        problems = self._problems(full, limits or SM90_LIMITS)
        if problems:
            alt = self.suggest(full, limits)
            hint = f" A valid alternative: {alt}." if alt else ""
            raise ConfigError(f"{self.name} {self.label_of(full)}: " + "; ".join(problems) + "." + hint)
        return full

    def is_valid(self, params: dict, limits: dict | None = None) -> bool:
        try:
            full = self.resolve(params)
        except ConfigError:
            return False
        return not self._problems(full, limits or SM90_LIMITS)

    def _problems(self, full: dict, limits: dict) -> list[str]:
        problems = [msg for rule in self.rules if (msg := rule(full))]
        threads = _prod(self.block(full))
        if threads > limits["max_threads_per_block"]:
            problems.append(
                f"{threads} threads per block exceeds the limit of {limits['max_threads_per_block']}"
            )
        if threads % limits["warp_size"]:
            problems.append(f"{threads} threads per block is not a whole number of warps")
        smem = self.smem_bytes(full)
        if smem > limits["max_smem_per_block"]:
            problems.append(
                f"needs {smem} bytes of shared memory per block, the device allows {limits['max_smem_per_block']}"
            )
        return problems

    def check_shape(self, params: dict, M: int, N: int, K: int) -> None:
        """Raise ConfigError if this config cannot compute an M x N x K product."""
        for name, v in (("M", M), ("N", N), ("K", K)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
        problems = [msg for rule in self.shape_rules if (msg := rule(params, M, N, K))]
        gx, gy, gz = self.grid(params, M, N, K)
        if gy > 65535 or gz > 65535:
            problems.append(f"the grid would have {gy} x {gz} blocks in y x z, above CUDA's limit of 65535")
        if problems:
            raise ConfigError(f"{self.name} {self.label_of(params)} on {M}x{N}x{K}: " + "; ".join(problems) + ".")

    # ------------------------------------------------------------------ space
    def space(self, limits: dict | None = None) -> Iterable[dict]:
        """Every valid config (the product of allowed values, pruned by the rules)."""
        names = [p.name for p in self.params]
        for values in itertools.product(*(p.allowed for p in self.params)):
            cfg = dict(zip(names, values))
            if self.is_valid(cfg, limits):
                yield cfg

    def suggest(self, full: dict, limits: dict | None = None) -> dict | None:
        """The valid config that differs from ``full`` in the fewest parameters."""
        best, best_key = None, None
        order = {p.name: p.allowed for p in self.params}
        for cfg in self.space(limits):
            changed = sum(cfg[k] != full[k] for k in cfg)
            # tie-break: smallest total distance in allowed-list positions
            dist = sum(abs(order[k].index(cfg[k]) - order[k].index(full[k])) if full[k] in order[k] else 99 for k in cfg)
            key = (changed, dist)
            if best_key is None or key < best_key:
                best, best_key = cfg, key
        return best


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many tiles of size b cover a."""
    return -(-a // b)


# --------------------------------------------------------------------- rules
def divides(a: str, b: str) -> Rule:
    """Rule: parameter ``a`` must divide parameter ``b``."""

    def rule(p):
        if p[b] % p[a]:
            return f"{a}={p[a]} must divide {b}={p[b]}"
        return None

    return rule


def int32_indices(p, M: int, N: int, K: int) -> str | None:
    """Shape rule for kernels that index the matrices with 32-bit ints."""
    if max(M * K, K * N, M * N) >= 2**31:
        return "an operand has 2^31 elements or more; the kernel indexes with 32-bit ints"
    return None


def threads_cover(tile: str, threads_expr: Callable[[dict], int], what: str) -> Rule:
    """Rule: the block's threads must split a tile's loads evenly."""

    def rule(p):
        t = threads_expr(p)
        n = tile_size(p, tile)
        if n % t:
            return f"{what}: {n} elements are not a multiple of the {t} threads that load them"
        return None

    return rule


def tile_size(p: dict, expr: str) -> int:
    """Evaluate a product like ``'BM*BK'`` over the parameters."""
    out = 1
    for name in expr.split("*"):
        out *= p[name]
    return out


def multiple_of(dim: str, param_or_value, why: str) -> ShapeRule:
    """Shape rule: dimension ``dim`` (M, N or K) must be a multiple of something."""

    def rule(p, M, N, K):
        v = {"M": M, "N": N, "K": K}[dim]
        m = p[param_or_value] if isinstance(param_or_value, str) else param_or_value
        if v % m:
            return f"{dim}={v} must be a multiple of {m} ({why}); pad the matrices or use a kernel without this rule"
        return None

    return rule


REGISTRY: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in REGISTRY:
        raise RuntimeError(f"kernel {spec.name!r} registered twice")
    if not spec.path.exists():
        raise RuntimeError(f"{spec.name}: kernel file {spec.path} does not exist")
    for p in spec.params:
        if p.default not in p.allowed:
            raise RuntimeError(f"{spec.name}: default {p.name}={p.default} is not in its allowed values")
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> KernelSpec:
    """Look a kernel up by name, with the list of names on a miss."""
    from . import specs  # noqa: F401  (registers every kernel on import)

    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; registered: {sorted(REGISTRY)}") from None


def all_specs() -> list[KernelSpec]:
    from . import specs  # noqa: F401

    return sorted(REGISTRY.values(), key=lambda s: s.file)
