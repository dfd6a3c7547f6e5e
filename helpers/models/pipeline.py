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
import re

import numpy as np

from ..hardware import Device
from ..runtime import offline, sass
from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from .waves import FAST_PATH_GUARDS

FIX_MARKER = "if (FIXED) __syncthreads();"


def ffma_before_use(loop: list, n: int) -> int:
    """FFMA issued after the load at ``loop[n]`` before an instruction reads a register it
    writes (the loop taken as repeating)."""
    dest, _ = loop[n].registers()
    ffma = 0
    for j in range(1, len(loop) + 1):
        other = loop[(n + j) % len(loop)]
        if other.registers()[1] & dest:
            break
        ffma += other.base == "FFMA"
    return ffma


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
            dists.append(ffma_before_use(loop, n))
    if not dists:
        raise ValueError(f"no 16-byte global loads in the inner loop of {spec.name} {full}")
    return {"loads": len(dists), "min": min(dists), "max": max(dists), "per_iteration": per_iter}


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


def executed_loop(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None,
                  source: str | None = None) -> list:
    """The inner loop's instructions that can execute (the compiler's ``@!PT`` placeholders dropped)."""
    spec = get(kernel)
    text = sass.inner_loop(offline.sass(spec, spec.resolve(params), device, source=source))
    return [i for i in sass.instructions(text) if i.predicate != "@!PT"]


def shared_load_cover(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None) -> dict:
    """FFMAs the warp issues between each ``LDS.128`` of the inner loop and the first instruction
    that reads what it loaded: the arithmetic that hides the shared-memory latency.

    ``{"loads": n, "min": ffmas, "median": ffmas, "short": loads covered by fewer than
    ``SHORT`` FFMAs}``. The loop is read as a cycle, in program order (both sides of a branch
    counted), as :func:`load_to_use` reads global loads.
    """
    loop = executed_loop(kernel, params, device)
    covers = []
    for n, ins in enumerate(loop):
        if ins.family == "LDS.128":
            covers.append(ffma_before_use(loop, n))
    if not covers:
        raise ValueError(f"no LDS.128 in the inner loop of {get(kernel).name}")
    covers.sort()
    return {"loads": len(covers), "min": covers[0], "median": covers[len(covers) // 2],
            "short": sum(c < SHORT for c in covers), "covers": covers}


SHORT = 16   # FFMAs: one warp's FFMAs, one per cycle, hide fewer cycles than an LDS takes (about 30)


# ------------------------------------------------- the two-stage kernel as often published
def published_schedule(tiles: int, fixed: bool = False) -> list[dict]:
    """Which tile each step of a widely copied two-stage kernel computes on.

    Its structure: the first tile is stored into stage 0 before the loop; iteration
    ``bk = 1 .. tiles - 1`` loads tile ``bk``, computes on stage ``(bk - 1) % 2`` and stores
    tile ``bk`` into stage ``bk % 2``; after the loop an epilogue computes on stage 1,
    written as a constant. The last tile lands in stage ``(tiles - 1) % 2``, which is 1
    only when the number of tiles is even.

    Returns one dict per compute step: ``{"step", "stage", "tile"}``, ``tile`` None for a
    stage no one wrote. ``fixed``: the epilogue reads stage ``(tiles - 1) % 2`` instead.
    """
    holds = {0: 0, 1: None}           # stage -> the tile it holds
    out = []
    for bk in range(1, tiles):
        stage = (bk - 1) % 2
        out.append({"step": f"loop, bk = {bk}", "stage": stage, "tile": holds[stage]})
        holds[bk % 2] = bk
    last = (tiles - 1) % 2 if fixed else 1
    out.append({"step": "epilogue", "stage": last, "tile": holds[last]})
    return out


def published_product(A, B, BK: int = 8, fixed: bool = False):
    """C as that schedule computes it: the sum over its compute steps of the tile products
    (NaN for a stage nobody wrote: on a GPU, whatever that shared memory held)."""

    K = A.shape[1]
    tiles = -(-K // BK)
    C = np.zeros((A.shape[0], B.shape[1]))
    for s in published_schedule(tiles, fixed):
        if s["tile"] is None:
            return np.full_like(C, np.nan)
        k0 = s["tile"] * BK
        C += A[:, k0:k0 + BK].astype(np.float64) @ B[k0:k0 + BK].astype(np.float64)
    return C


# ------------------------------------------------- scopes and the compiler
PROLOGUE = "    load_tile(0);\n    store_tile(0);\n"


def braces(kernel: str | KernelSpec = "double_buffering", params: dict | None = None,
           device: Device | None = None) -> dict:
    """Compile the two-stage kernel as it is and with its prologue in a block of its own
    (``{ ... }``), and compare the machine code instruction by instruction.

    A scope decides which names are visible where; the compiler sees through it to the
    data flow, so the instructions do not change. ``{"identical": bool, "instructions": n,
    "differences": n}``.
    """
    spec = get(kernel)
    src = spec.source()
    if PROLOGUE not in src:
        raise ValueError(f"{spec.file} no longer has the prologue this experiment wraps")
    scoped = src.replace(PROLOGUE, "    {   // the prologue in a scope of its own\n" + PROLOGUE.replace("    ", "        ")
                         + "    }\n")
    a = [(i.opcode, i.operands) for i in sass.instructions(offline.sass(spec, params, device))]
    b = [(i.opcode, i.operands) for i in sass.instructions(offline.sass(spec, params, device, source=scoped))]
    diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return {"identical": a == b, "instructions": len(a), "differences": diff, "scoped_source": scoped}


def data_registers(kernel: str | KernelSpec, params: dict | None = None) -> dict:
    """Registers a thread needs for data, by role, from the kernel's declarations: the
    accumulators, the values of A and of B it holds for the FFMAs, and the next tile on its
    way through registers (the two-stage kernel only). Addresses and counters come on top.

    ``double_buffering``: ``acc[TM][TN]``, two fragments ``a[2][TM]``, ``b[2][TN]``, and
    ``float4 ra[A_LOADS], rb[B_LOADS]``. ``cp_async``: A's tile is row-major, so a thread
    reads 4 consecutive k of each of its TM rows at once, ``a4[TM][4]``, and one ``b[TN]``;
    the tiles travel without registers.
    """
    spec = get(kernel)
    if spec.register_roles is None:
        raise ValueError(f"no register roles for {spec.name}")
    roles = spec.register_roles(spec.resolve(params))
    return dict(roles, total=sum(roles.values()))


def interior_source(kernel: str | KernelSpec) -> str:
    """The kernel's source as interior tiles of aligned matrices run it: the uniform branches
    to the edge paths forced off (:data:`helpers.models.waves.FAST_PATH_GUARDS`) and the
    alignment tests (``rows_aligned16``) forced true."""
    src = get(kernel).source()
    for guard in FAST_PATH_GUARDS:
        src = src.replace(guard, "if (true)")
    return re.sub(r"(?<![\w.])rows_aligned16\([^()]*\)(?!\s*\{)", "true", src)


def loop_mix(kernel: str | KernelSpec, params: dict | None = None, device: Device | None = None) -> dict:
    """Instructions of one pass of the main loop as interior tiles of aligned matrices run it
    (offline compile of :func:`interior_source`): FFMA, LDS.128, the rest, and the FFMA share."""
    loop = executed_loop(kernel, params, device, source=interior_source(kernel))
    total = len(loop)
    ffma = sum(i.base == "FFMA" for i in loop)
    lds = sum(i.family == "LDS.128" for i in loop)
    return {"total": total, "ffma": ffma, "lds128": lds, "other": total - ffma - lds,
            "ffma_share": ffma / total if total else 0.0}
