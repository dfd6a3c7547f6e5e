"""Reading SASS, the GPU's machine code, as ``cuobjdump --dump-sass`` prints it.

One parser for the whole book: :func:`instructions` turns a listing into
:class:`Instruction` records (address, predicate, opcode with modifiers, operands),
and everything else (opcode counts, the hottest loop, memory instructions by width,
register dependences) works on those records.

Taught in the chapter "1D thread tiles".
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/")
REGISTER = re.compile(r"\bR(\d+)\b")
STORES = ("ST", "STS", "STG", "STL", "RED", "ATOM", "ATOMS", "ATOMG")
WIDTHS = ("64", "128")


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str
    opcode: str          # with modifiers: "LDS.128", "LDG.E.128.CONSTANT"
    operands: str

    @property
    def base(self) -> str:
        """The opcode without modifiers: "LDS"."""
        return self.opcode.split(".")[0]

    @property
    def width(self) -> str | None:
        """"64" or "128" for a wide memory access, else None."""
        return next((m for m in self.opcode.split(".")[1:] if m in WIDTHS), None)

    @property
    def family(self) -> str:
        """The opcode and its width only: "LDS.128", "LDG.128", "FFMA"."""
        return f"{self.base}.{self.width}" if self.width else self.base

    def registers(self) -> tuple[set, set]:
        """(registers written, registers read); a 128-bit load writes four."""
        parts = [p.strip() for p in self.operands.split(",")]
        regs = [int(r) for r in REGISTER.findall(self.operands)]
        if self.base in STORES or not parts or not parts[0].startswith("R"):
            return set(), set(regs)
        first = [int(r) for r in REGISTER.findall(parts[0])]
        span = {"128": 4, "64": 2}.get(self.width, 1)
        dest = {first[0] + i for i in range(span)} if first else set()
        return dest, {int(r) for r in REGISTER.findall(",".join(parts[1:]))}


def instructions(text: str) -> list[Instruction]:
    """Every instruction of a SASS listing, in order."""
    return [Instruction(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip())
            for m in LINE.finditer(text)]


def family_counts(text: str) -> Counter:
    """Instructions per family ("FFMA", "LDS", "LDS.128", "LDG.128", ...)."""
    return Counter(i.family for i in instructions(text))


def inner_loop(text: str) -> str:
    """The lines of the listing's hottest loop: the body of the longest backward branch."""
    lines = text.splitlines()
    addr = {i: int(m.group(1), 16) for i, line in enumerate(lines) if (m := ADDRESS.search(line))}
    labels = {}
    for j, line in enumerate(lines):
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = next((addr[k] for k in range(j + 1, len(lines)) if k in addr), None)
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"\bBRA\s+(?:`\((\.L_x_\d+)\)|0x([0-9a-f]+))", line)
        if not m or i not in addr:
            continue
        target = labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)
        if target is not None and target < addr[i]:
            start = next(j for j, a in sorted(addr.items()) if a >= target)
            if best is None or i - start > best[1] - best[0]:
                best = (start, i)
    return "" if best is None else "\n".join(lines[best[0]:best[1] + 1])


def without_encodings(text: str, families=("LDS", "FFMA"), limit: int = 14) -> str:
    """The first ``limit`` instructions of the given families, address and text only."""
    out = []
    for ins in instructions(text):
        if ins.base in families or ins.family in families:
            out.append(f"/*{ins.address:04x}*/  {ins.predicate + ' ' if ins.predicate else ''}{ins.opcode} {ins.operands}")
        if len(out) >= limit:
            break
    return "\n".join(out)
