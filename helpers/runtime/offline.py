"""Compile a kernel config with NVRTC, no GPU needed: registers, shared memory, spills, SASS.

NVRTC (the ``nvidia-cuda-nvrtc`` wheel, driven through ``cuda-bindings``) compiles one
config straight to a cubin for an architecture (``sm_90``) with ``ptxas -v``, whose log
gives registers, stack and spills; ``cuobjdump`` (``nvidia-cuda-cuobjdump``, which runs
``nvdisasm``) gives the machine code. It also produces the PTX that live mode loads for
an emulated target (:mod:`helpers.runtime.compile`). Results are cached on disk, keyed by
everything that can change them (source with its headers, expression, options, the
NVRTC version), so a second build of the book compiles nothing.

Taught in the chapters "Shared-memory tiling" (occupancy) and "1D thread tiles" (SASS).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import hardware, settings
from ..hardware import Device
from .spec import KernelSpec
from .specs import get

# CuPy compiles every kernel with these; so does this module, so that the offline
# compile is the same program (some NVRTC versions refuse a generic lambda in a kernel
# without --device-as-default-execution-space).
BASE_OPTIONS = ("-std=c++17", "--device-as-default-execution-space")


class ToolMissing(RuntimeError):
    """An offline tool (NVRTC, cuobjdump, nvdisasm) is not installed."""


class CompileError(RuntimeError):
    """NVRTC rejected a kernel; the message carries its log."""


@dataclass(frozen=True)
class Resources:
    """What the compiler allocated for one config."""

    kernel: str
    params: tuple                 # sorted (name, value) pairs
    arch: str
    registers: int
    static_smem: int              # bytes of __shared__ arrays the kernel declares
    dynamic_smem: int             # bytes the launch asks for (from the spec)
    stack_bytes: int
    spill_stores: int
    spill_loads: int

    @property
    def smem(self) -> int:
        return self.static_smem + self.dynamic_smem

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def __str__(self):
        spill = (f"{self.spill_stores} B spill stores, {self.spill_loads} B spill loads" if self.spills
                 else "no spills")
        return (f"{self.kernel} {dict(self.params)} for {self.arch}: {self.registers} registers/thread, "
                f"{self.smem:,} B shared memory/block, {self.stack_bytes} B stack, {spill}")


# ----------------------------------------------------------------- the tools
def _cuda_bin_dir() -> Path | None:
    """Where the pip wheels put cuobjdump and nvdisasm (nvidia/cu13/bin or cu12/bin)."""
    try:
        import nvidia  # noqa: PLC0415  (a namespace package of wheels that may be absent)
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for sub in ("cu13/bin", "cu12/bin", "cuda_cuobjdump/bin"):
            if (Path(base) / sub / "cuobjdump").exists():
                return Path(base) / sub
    return None


def tool(name: str) -> str:
    d = _cuda_bin_dir()
    if d is not None and (d / name).exists():
        return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissing(f"{name} not found: install the nvidia-cuda-{name} wheel (requirements.txt) or a CUDA toolkit")


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415  (optional: only the offline reports need it)
    except ImportError as exc:
        raise ToolMissing("cuda-bindings is not installed (pip install -r requirements.txt)") from exc
    return nvrtc


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for (75, 80, ... for CUDA 13)."""
    return tuple(_nvrtc().nvrtcGetSupportedArchs()[1])


@functools.cache
def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _cache_path(kind: str, *key) -> Path:
    digest = hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:32]
    return settings.cache_dir() / "nvrtc" / f"{digest}.{kind}"


def _log(prog, nvrtc) -> str:
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode(errors="replace").rstrip("\x00 \n")


def nvrtc_compile(source: str, filename: str, expr: str, arch: str, ptx: bool = False,
                  options: tuple = ()) -> tuple[bytes, str, str]:
    """(cubin or PTX, compiler log, lowered name) of one instantiation, cached on disk.

    ``arch`` is ``sm_90`` (a cubin for that GPU) or, with ``ptx=True``, the virtual
    architecture the PTX targets (``sm_75`` becomes ``compute_75``).
    """
    opts = BASE_OPTIONS + tuple(options) + (
        (f"-arch=compute_{arch[3:]}",) if ptx else (f"-arch={arch}", "--ptxas-options=-v"))
    path = _cache_path("ptx" if ptx else "cubin", source, filename, expr, opts, nvrtc_version())
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        m = json.loads(meta.read_text())
        return path.read_bytes(), m["log"], m["lowered"]
    nvrtc = _nvrtc()
    if int(arch[3:].rstrip("a")) not in supported_archs():     # sm_90a: the arch-specific sm_90
        raise CompileError(f"NVRTC {nvrtc_version()} does not compile for {arch} (it does for sm_"
                           + ", sm_".join(map(str, supported_archs())) + "): use a CUDA stack that "
                           "still supports that GPU, such as CUDA 12 (requirements.txt)")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    if int(err):
        raise CompileError(f"NVRTC could not create a program for {filename} ({err})")
    try:
        nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _log(prog, nvrtc)
        if int(res[0]):
            raise CompileError(f"NVRTC could not compile {expr} from kernels/{filename} for {arch}:\n{log}")
        lowered = nvrtc.nvrtcGetLoweredName(prog, expr.encode())[1]
        lowered = lowered.decode() if isinstance(lowered, bytes) else lowered
        size = (nvrtc.nvrtcGetPTXSize if ptx else nvrtc.nvrtcGetCUBINSize)(prog)[1]
        out = b" " * size
        (nvrtc.nvrtcGetPTX if ptx else nvrtc.nvrtcGetCUBIN)(prog, out)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    _write_atomic(path, out)
    _write_atomic(meta, json.dumps({"log": log, "lowered": lowered}).encode())
    return out, log, lowered


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:      # a read-only cache only costs a recompile next time
        pass


def cuobjdump(cubin: bytes, *args: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        env = dict(os.environ)
        if _cuda_bin_dir() is not None:
            env["PATH"] = f"{_cuda_bin_dir()}{os.pathsep}{env.get('PATH', '')}"
        out = subprocess.run([tool("cuobjdump"), *args, str(path)], capture_output=True, text=True,
                             env=env, timeout=120)
    if out.returncode:
        raise RuntimeError(f"cuobjdump {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


# --------------------------------------------------------------- per config
def compile_config(spec: KernelSpec | str, params: dict | None = None, device: Device | None = None,
                   source: str | None = None, validate: bool = True) -> tuple[bytes, str, str]:
    """(cubin, ptxas log, lowered name) of one config, validated for and compiled to ``device``
    (default: :func:`helpers.hardware.default`); ``source`` overrides the file's text.
    ``validate=False`` compiles a config the rules refuse, to show what the compiler makes of it."""
    spec, device = get(spec), device or hardware.default()
    full = spec.validate(params, device=device) if validate else spec.resolve(params)
    return nvrtc_compile(source or spec.source(), spec.file, spec.name_expression(full),
                         spec.target or device.arch)


def resources(spec: KernelSpec | str, params: dict | None = None, device: Device | None = None,
              validate: bool = True, source: str | None = None) -> Resources:
    """Registers, shared memory, stack and spills of one config, from ptxas's report
    (``validate=False``: also of a config the rules refuse; ``source`` overrides the file's text)."""
    spec, device = get(spec), device or hardware.default()
    full = spec.validate(params, device=device) if validate else spec.resolve(params)
    arch = spec.target or device.arch
    _, log, mangled = compile_config(spec, full, device, source=source, validate=validate)
    own = log.split(f"'{mangled}'", 1)[-1].split("Compiling entry function", 1)[0]

    def grab(pattern, default=0):
        m = re.search(pattern, own)
        return int(m.group(1)) if m else default

    stack = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", own)
    st, sp_st, sp_ld = (int(g) for g in stack.groups()) if stack else (0, 0, 0)
    return Resources(spec.name, tuple(sorted(full.items())), arch, grab(r"Used (\d+) registers"),
                     grab(r"(\d+) bytes smem"), spec.smem_bytes(full), st, sp_st, sp_ld)


def sass(spec: KernelSpec | str, params: dict | None = None, device: Device | None = None,
         source: str | None = None) -> str:
    """The kernel's machine code (SASS) as text."""
    cubin, _, _ = compile_config(spec, params, device, source)
    key = _cache_path("sass", hashlib.sha256(cubin).hexdigest())
    if key.exists():
        return key.read_text()
    text = cuobjdump(cubin, "--dump-sass")
    _write_atomic(key, text.encode())
    return text
