"""Double buffering, measured in the machine code: how much work hides each global load.

Taught in the chapter "Double buffering" (book/09_double_buffering.md).

A global load takes hundreds of cycles. A warp can keep issuing instructions after it,
until one of them needs the loaded register. :func:`load_to_use` reads a kernel's inner
loop (SASS, compiled offline) and counts the FFMA instructions between each 16-byte
global load and the first instruction that reads its destination register: the
arithmetic the warp has to cover the latency with, on its own. For ``cp.async``
(``LDGSTS``) the data go straight to shared memory and are read ``STAGES - 1`` loop
iterations later.
"""
from __future__ import annotations

import difflib

from ..hardware import Device
from ..runtime import offline, sass
from ..runtime.spec import KernelSpec
from ..runtime.specs import get

FIX_MARKER = "if (FIXED) __syncthreads();"


def load_to_use(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None) -> dict:
    """FFMAs issued between each 16-byte global load of the inner loop and the first use of its data.

    ``{"loads": n, "min": ffmas, "max": ffmas, "per_iteration": ffmas}``. The loop is read as
    a cycle: a load whose data are used in the next iteration wraps around.
    """
    spec = get(kernel)
    full = spec.resolve(params)
    loop = sass.instructions(sass.inner_loop(offline.sass(spec, full, device)))
    per_iter = sum(i.base == "FFMA" for i in loop)
    dists = []
    for n, ins in enumerate(loop):
        if ins.base == "LDGSTS" and ins.width == "128":
            after = sum(i.base == "FFMA" for i in loop[n + 1:])
            dists.append(after + (full.get("STAGES", 2) - 2) * per_iter)
        elif ins.base == "LDG" and ins.width == "128":
            dest, _ = ins.registers()
            ffma = 0
            for j in range(1, len(loop) + 1):
                other = loop[(n + j) % len(loop)]
                if other.registers()[1] & dest:
                    break
                ffma += other.base == "FFMA"
            dists.append(ffma)
    if not dists:
        raise ValueError(f"no 16-byte global loads in the inner loop of {spec.name} {full}")
    return {"loads": len(dists), "min": min(dists), "max": max(dists), "per_iteration": per_iter}


def racy_rows(sanitize_rows: list[dict], tool: str = "racecheck") -> list[dict]:
    """The sanitizer rows of the kernel kept racy on purpose."""
    return [r for r in sanitize_rows if r.get("expected_broken") and r["tool"] == tool]


def named_lines(kernel: str | KernelSpec, numbers: list[int]) -> list[tuple[int, str]]:
    """(line number, source text) of a kernel file, for the lines a sanitizer report names."""
    text = get(kernel).path.read_text().splitlines()
    return [(n, text[n - 1].strip()) for n in numbers if 0 < n <= len(text)]


def fix_diff(kernel: str | KernelSpec = "double_buffering", context: int = 3) -> str:
    """The racy and the fixed kernel as two texts, diffed: what FIXED = 0 and 1 compile to.

    Both come from the file: the racy text drops the marked line, the fixed one keeps it
    without its ``if (FIXED)``.
    """
    lines = get(kernel).path.read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if FIX_MARKER in line)
    fixed = lines[:i] + [lines[i].replace("if (FIXED) ", "")] + lines[i + 1:]
    racy = lines[:i] + lines[i + 1:]
    return "\n".join(difflib.unified_diff(racy, fixed, "racy (FIXED = 0)", "fixed (FIXED = 1)", n=context, lineterm=""))
