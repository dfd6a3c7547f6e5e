"""Double buffering, measured in the machine code: how much work hides each global load.

Taught in the chapter "Double buffering" (book/09_double_buffering.md).

A global load takes hundreds of cycles. A warp can keep issuing instructions
after it, until one of them needs the loaded register. :func:`load_to_use`
reads a kernel's inner loop (SASS, compiled offline for sm_90) and counts the
FFMA instructions between each 16-byte global load and the first instruction
that reads its destination register: the arithmetic the warp has to cover the
latency with, on its own. For ``cp.async`` (``LDGSTS``) the data go straight to
shared memory and are read ``STAGES - 1`` loop iterations later.
"""
from __future__ import annotations

import re

from .resources import inner_loop, sass

_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_REG = re.compile(r"\bR(\d+)\b")
_STORES = ("ST", "STS", "STG", "STL", "RED", "ATOM", "ATOMS", "ATOMG")


def parse_loop(text: str) -> list[tuple[str, str]]:
    """(opcode, operands) for each instruction of a SASS listing, in order."""
    return [(m.group(3), m.group(4)) for m in _INS.finditer(text)]


def _regs(operands: str) -> list[int]:
    return [int(r) for r in _REG.findall(operands)]


def _dest_and_sources(op: str, operands: str) -> tuple[set, set]:
    """Registers written and read by one instruction (a 128-bit load writes 4)."""
    parts = [p.strip() for p in operands.split(",")]
    if op.split(".")[0] in _STORES or not parts or not parts[0].startswith("R"):
        return set(), set(_regs(operands))
    first = _regs(parts[0])
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    dest = {first[0] + i for i in range(width)} if first else set()
    return dest, set(_regs(",".join(parts[1:])))


def load_to_use(kernel: str, params: dict | None = None, arch: str = "sm_90") -> dict:
    """FFMAs issued between each 16-byte global load of the inner loop and the first use of its data.

    Returns ``{"loads": n, "min": ffmas, "max": ffmas, "per_iteration": ffmas}``. The loop is
    read as a cycle: a load whose data are used in the next iteration wraps around.
    For cp.async loops the use is the shared-memory read ``STAGES - 1`` iterations later.
    """
    from .registry import get

    spec = get(kernel)
    full = spec.validate(params)
    loop = parse_loop(inner_loop(sass(spec, full, arch)))
    per_iter = sum(op == "FFMA" for op, _ in loop)
    dists = []
    for i, (op, operands) in enumerate(loop):
        if op.startswith("LDGSTS") and ".128" in op:
            after = sum(o == "FFMA" for o, _ in loop[i + 1:])
            dists.append(after + (full.get("STAGES", 2) - 2) * per_iter)
        elif op.startswith("LDG") and ".128" in op:
            dest, _ = _dest_and_sources(op, operands)
            ffma = 0
            for j in range(1, len(loop) + 1):
                o, ops = loop[(i + j) % len(loop)]
                _, src = _dest_and_sources(o, ops)
                if src & dest:
                    break
                ffma += o == "FFMA"
            dists.append(ffma)
    if not dists:
        raise ValueError(f"no 16-byte global loads in the inner loop of {kernel} {full}")
    return {"loads": len(dists), "min": min(dists), "max": max(dists), "per_iteration": per_iter}


def registers_table(configs: list[tuple[str, dict]]) -> list[dict]:
    """Registers, spills and shared memory per config (offline compile), for a printed table."""
    from .registry import get
    from .resources import resources

    rows = []
    for name, params in configs:
        spec = get(name)
        r = resources(spec, params)
        rows.append({"kernel": name, "config": spec.label_of(spec.validate(params)), "registers": r.registers,
                     "spill_bytes": r.spill_stores + r.spill_loads, "smem_bytes": r.smem,
                     "blocks_per_sm_by_registers": 65536 // (256 * ((r.registers + 7) // 8 * 8))})
    return rows


def fix_lines(path, marker: str = "if (FIXED) __syncthreads();") -> int:
    """The 1-based line of the kernel file that holds the one-line fix."""
    for i, line in enumerate(open(path).read().splitlines(), 1):
        if marker in line:
            return i
    raise ValueError(f"{marker!r} not found in {path}")


def racy_rows(sanitize_rows: list[dict], tool: str = "racecheck") -> list[dict]:
    """The sanitizer rows of the kernel kept racy on purpose."""
    return [r for r in sanitize_rows if r.get("expected_broken") and r["tool"] == tool]


def named_lines(path, numbers: list[int]) -> list[tuple[int, str]]:
    """(line number, source text) of a file, for the lines a sanitizer report names."""
    text = open(path).read().splitlines()
    return [(n, text[n - 1].strip()) for n in numbers if 0 < n <= len(text)]


def fix_diff(path, marker: str = "if (FIXED) __syncthreads();", context: int = 3) -> str:
    """The racy and the fixed kernel as two texts, diffed: what FIXED = 0 and 1 compile to.

    Both come from the file: the racy text drops the marked line, the fixed one
    keeps it without its ``if (FIXED)``.
    """
    import difflib

    lines = open(path).read().splitlines()
    i = next(n for n, line in enumerate(lines) if marker in line)
    fixed = lines[:i] + [lines[i].replace("if (FIXED) ", "")] + lines[i + 1:]
    racy = lines[:i] + lines[i + 1:]
    return "\n".join(difflib.unified_diff(racy, fixed, "racy (FIXED = 0)", "fixed (FIXED = 1)",
                                          n=context, lineterm=""))


def load_to_use_figure(configs: list[tuple[str, str, dict]], title: str = "Arithmetic between a load and its use"):
    """Horizontal bars: FFMAs a warp issues between a 16-byte global load and the first use of its data."""
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, label_source

    names, values, per = [], [], []
    for label, kernel, params in configs:
        r = load_to_use(kernel, params)
        names.append(label)
        values.append(r["min"])
        per.append(r["per_iteration"])
    fig = go.Figure(go.Bar(y=names, x=values, orientation="h", marker_color=PALETTE[:len(names)],
                           text=[f"{v} FFMA ({v / p:.2g} tiles of work)" for v, p in zip(values, per)],
                           textposition="auto"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title="FFMA instructions issued by the warp",
                      height=140 + 55 * len(names))
    return label_source(fig, "from the machine code (SASS) of each kernel's inner loop, compiled offline for sm_90")


def stages_figure(rows: list[dict], source: str, BK: int = 16, stages=(2, 3, 4), active: int = 1):
    """TFLOP/s against n of the cp.async kernel, one menu entry per pipeline depth.

    Each entry also shows the two-stage register kernel (BK = 8) and cuBLAS from the same rows.
    """
    import plotly.graph_objects as go

    from .plots import CUBLAS_COLOUR, PALETTE, TEMPLATE, label_source, with_menu

    def line(sel, y, name, **kw):
        sel = sorted(sel, key=lambda r: r["M"])
        return go.Scatter(x=[r["M"] for r in sel], y=[y(r) for r in sel], name=name, mode="lines+markers", **kw)

    square = [r for r in rows if r["M"] == r["N"] == r["K"]]
    two = [r for r in square if r["kernel"] == "double_buffering" and r["params"].get("BK") == 8]
    menu = []
    for s in stages:
        sel = [r for r in square if r["kernel"] == "double_buffering_async"
               and r["params"].get("BK") == BK and r["params"].get("STAGES") == s]
        menu.append((f"{s} stages", [
            line(sel, lambda r: r["tflops"], f"cp.async, BK = {BK}, {s} stages", line=dict(color=PALETTE[0])),
            line(two, lambda r: r["tflops"], "two stages (registers), BK = 8", line=dict(color=PALETTE[1])),
            line(sel, lambda r: r["cublas_tflops"], "cuBLAS", line=dict(color=CUBLAS_COLOUR, dash="dash"))]))
    fig = with_menu(menu, active=active)
    fig.update_xaxes(type="log", tickvals=sorted({r["M"] for r in square}), title="n (M = N = K)")
    fig.update_layout(template=TEMPLATE, title="cp.async: pipeline depth", yaxis_title="TFLOP/s", height=460,
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return label_source(fig, source)
