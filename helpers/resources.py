"""Offline compile for sm_90: registers, shared memory, spills and SASS, no GPU needed.

NVRTC (from the ``nvidia-cuda-nvrtc`` wheel, driven through ``cuda-bindings``)
compiles a kernel config straight to an sm_90 cubin with ``ptxas -v``; the log
gives registers, stack frame and spills, and ``cuobjdump`` (``nvidia-cuda-cuobjdump``
wheel, which calls ``nvdisasm`` from ``nvidia-cuda-nvdisasm``) gives the shared
memory and the machine code. Results are cached per (source, expression, arch).

Taught in the chapter "Shared-memory tiling" (occupancy) and "1D thread tiles" (SASS).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .compile import BASE_OPTIONS
from .registry import KernelSpec, get


class ToolMissing(RuntimeError):
    """An offline tool (NVRTC, cuobjdump, nvdisasm) is not installed."""


@dataclass(frozen=True)
class Resources:
    kernel: str
    params: tuple  # sorted (name, value) pairs
    arch: str
    registers: int
    static_smem: int  # bytes of __shared__ arrays declared in the kernel
    dynamic_smem: int  # bytes the launch asks for (from the spec)
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    local_bytes: int
    log: str

    @property
    def smem(self) -> int:
        return self.static_smem + self.dynamic_smem

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def __str__(self):
        spill = (f"{self.spill_stores} B spill stores, {self.spill_loads} B spill loads"
                 if self.spills else "no spills")
        return (f"{self.kernel} {dict(self.params)} for {self.arch}: {self.registers} registers/thread, "
                f"{self.smem} B shared memory/block, {self.stack_bytes} B stack, {spill}")


def _cuda_bin_dir() -> Path | None:
    """Where the pip wheels put cuobjdump and nvdisasm (nvidia/cu13/bin)."""
    try:
        import nvidia
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for sub in ("cu13/bin", "cuda_cuobjdump/bin", "cu12/bin"):
            d = Path(base) / sub
            if (d / "cuobjdump").exists():
                return d
    return None


def tool(name: str) -> str:
    d = _cuda_bin_dir()
    if d is not None and (d / name).exists():
        return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissing(f"{name} not found: install the nvidia-cuda-{name} wheel "
                      f"(it is in requirements.txt) or a CUDA toolkit")


def _tool_env() -> dict:
    env = dict(os.environ)
    d = _cuda_bin_dir()
    if d is not None:
        env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
    return env


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise ToolMissing("cuda-bindings is not installed (pip install -r requirements.txt)") from exc
    return nvrtc


def _check(result, prog=None, nvrtc=None, what=""):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        log = _log(prog, nvrtc) if prog is not None else ""
        raise RuntimeError(f"NVRTC {what} failed ({err}):\n{log}")
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None


def _log(prog, nvrtc) -> str:
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode(errors="replace").rstrip("\x00 \n")


@functools.lru_cache(maxsize=256)
def _compile_cubin(source: str, filename: str, expr: str, options: tuple, arch: str) -> tuple[bytes, str, str]:
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], []), what="create")
    try:
        _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()), what="name expression")
        # CuPy adds --device-as-default-execution-space to every NVRTC compile (some NVRTC
        # versions refuse a generic lambda inside a kernel without it): compile the same way.
        opts = [o.encode() for o in options + ("--device-as-default-execution-space", f"-arch={arch}",
                                               "--ptxas-options=-v")]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(prog, nvrtc)
        if int(err[0]) != 0:
            raise RuntimeError(f"NVRTC could not compile {expr} from kernels/{filename}:\n{log}")
        lowered = _check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()), what="lowered name")
        n = _check(nvrtc.nvrtcGetCUBINSize(prog), what="cubin size")
        cubin = b" " * n
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), what="cubin")
        return cubin, log, lowered.decode() if isinstance(lowered, bytes) else lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _cuobjdump(cubin: bytes, *args: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool("cuobjdump"), *args, str(path)], capture_output=True, text=True,
                             env=_tool_env(), timeout=120)
    if out.returncode:
        raise RuntimeError(f"cuobjdump {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def compile_offline(spec: KernelSpec | str, params: dict | None = None, arch: str = "sm_90") -> tuple[bytes, str, str]:
    """(cubin, NVRTC/ptxas log, mangled name) for one validated config."""
    spec = get(spec) if isinstance(spec, str) else spec
    full = spec.validate(params)
    return _compile_cubin(spec.source(), spec.file, spec.name_expression(full),
                          BASE_OPTIONS + tuple(spec.options), arch)


def resources(spec: KernelSpec | str, params: dict | None = None, arch: str = "sm_90") -> Resources:
    """Registers, shared memory, stack and spills of one config, compiled for ``arch``."""
    spec = get(spec) if isinstance(spec, str) else spec
    full = spec.validate(params)
    cubin, log, mangled = compile_offline(spec, full, arch)
    m = re.search(r"Used (\d+) registers", log)
    regs = int(m.group(1)) if m else 0
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack, st, ld = (int(g) for g in m.groups()) if m else (0, 0, 0)
    usage = _cuobjdump(cubin, "--dump-resource-usage")
    fn = re.search(r"Function " + re.escape(mangled) + r":\s*\n\s*(.*)", usage)
    fields = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", fn.group(1))) if fn else {}
    # ptxas's "N bytes smem" is what the kernel declares; on sm_90 cuobjdump's SHARED
    # also counts the 1 KB per block that the driver reserves (counted in occupancy).
    own = log.split(f"entry function '{mangled}'", 1)[-1].split("Compiling entry function", 1)[0]
    m = re.search(r"(\d+) bytes smem", own)
    static = int(m.group(1)) if m else int(fields.get("SHARED", 0))
    return Resources(spec.name, tuple(sorted(full.items())), arch, int(fields.get("REG", regs)),
                     static, spec.smem_bytes(full), stack, st, ld,
                     int(fields.get("LOCAL", 0)), log)


def sass(spec: KernelSpec | str, params: dict | None = None, arch: str = "sm_90") -> str:
    """The kernel's machine code (SASS) as text."""
    cubin, _, _ = compile_offline(spec, params, arch)
    return _cuobjdump(cubin, "--dump-sass")


SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def instructions(sass_text: str) -> list[tuple[int, str]]:
    """(address, opcode with modifiers) for every instruction in a SASS listing."""
    return [(int(m.group(1), 16), m.group(3)) for m in SASS_LINE.finditer(sass_text)]


def opcode_counts(sass_text: str, opcodes=("FFMA", "LDS", "LDS.128", "LDS.64", "LDG", "STS", "STG")) -> Counter:
    """Count instructions by opcode family, e.g. ``LDS.128`` and plain ``LDS`` separately."""
    out = Counter()
    for _, op in instructions(sass_text):
        base = op.split(".")[0]
        width = next((p for p in op.split(".")[1:] if p in ("64", "128")), None)
        key = f"{base}.{width}" if width else base
        if key in opcodes or base in opcodes and not width:
            out[key] += 1
    return out


def inner_loop(sass_text: str) -> str:
    """The SASS lines of the kernel's hottest loop: the longest backward branch's body."""
    lines = sass_text.splitlines()
    addr_of = {}
    for i, line in enumerate(lines):
        m = re.search(r"/\*([0-9a-f]{4,})\*/", line)
        if m:
            addr_of[i] = int(m.group(1), 16)
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", line)
        if not m or i not in addr_of:
            continue
        target = _branch_target(line, lines)
        if target is not None and target < addr_of[i]:
            start = next(j for j, a in addr_of.items() if a >= target)
            if best is None or (i - start) > (best[1] - best[0]):
                best = (start, i)
    if best is None:
        return ""
    return "\n".join(lines[best[0]:best[1] + 1])


def _branch_target(line: str, lines: list[str]) -> int | None:
    m = re.search(r"BRA\s+0x([0-9a-f]+)", line)
    if m:
        return int(m.group(1), 16)
    m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", line)
    if m:
        label = m.group(1)
        for j, other in enumerate(lines):
            if other.strip().startswith(label + ":"):
                for nxt in lines[j + 1:]:
                    a = re.search(r"/\*([0-9a-f]{4,})\*/", nxt)
                    if a:
                        return int(a.group(1), 16)
    return None
