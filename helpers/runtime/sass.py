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


def loops(text: str) -> list[str]:
    """The lines of every loop of the listing (the body of each backward branch), in order."""
    lines = text.splitlines()
    addr = {i: int(m.group(1), 16) for i, line in enumerate(lines) if (m := ADDRESS.search(line))}
    labels = {}
    for j, line in enumerate(lines):
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = next((addr[k] for k in range(j + 1, len(lines)) if k in addr), None)
    out = []
    for i, line in enumerate(lines):
        m = re.search(r"\bBRA\s+(?:`\((\.L_x_\d+)\)|0x([0-9a-f]+))", line)
        if not m or i not in addr:
            continue
        target = labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)
        if target is not None and target < addr[i]:
            start = next(j for j, a in sorted(addr.items()) if a >= target)
            out.append("\n".join(lines[start:i + 1]))
    return out


def inner_loop(text: str) -> str:
    """The lines of the listing's hottest loop: the body of the longest backward branch."""
    return max(loops(text), key=lambda body: body.count("\n"), default="")


def innermost_loop(text: str, opcode: str = "FFMA") -> str:
    """The shortest loop that holds an ``opcode`` instruction (a main loop's inner steps)."""
    return min((body for body in loops(text) if any(i.base == opcode for i in instructions(body))),
               key=len, default="")


def without_encodings(text: str, families=("LDS", "FFMA"), limit: int = 14) -> str:
    """The first ``limit`` instructions of the given families, address and text only."""
    out = []
    for ins in instructions(text):
        if ins.base in families or ins.family in families:
            out.append(f"/*{ins.address:04x}*/  {ins.predicate + ' ' if ins.predicate else ''}{ins.opcode} {ins.operands}")
        if len(out) >= limit:
            break
    return "\n".join(out)


OPERAND = re.compile(r"^-?\|?R(\d+)(\.reuse)?\|?$")


def bank_clashes(text: str, banks: int = 2) -> tuple[int, int]:
    """(FFMAs, register-bank clashes among them) in a listing, in a simple model of the
    register file: ``banks`` banks, register r in bank r % banks. An FFMA reads each source
    register from its bank, except one that the instruction just before marked ``.reuse`` in
    the same operand slot (the operand reuse cache serves it); every read beyond the first
    from one bank is a clash. A model: it ranks versions of one loop, it does not time them."""
    cached, ffmas, clashes = [None] * 3, 0, 0
    for ins in instructions(text):
        reads, keep = [], [None] * 3
        for slot, operand in enumerate(p.strip() for p in ins.operands.split(",")[1:4]):
            m = OPERAND.match(operand)
            if not m:
                continue
            reg = int(m.group(1))
            if cached[slot] != reg:
                reads.append(reg % banks)
            if m.group(2):
                keep[slot] = reg
        if ins.base == "FFMA":
            ffmas += 1
            clashes += sum(n - 1 for n in Counter(reads).values())
        cached = keep
    return ffmas, clashes
