"""Shared-memory banks: which bank each lane of a warp hits, and how many wavefronts an access takes.

Taught in the chapter "Bank conflicts" (book/08_bank_conflicts.md), used again in
"Warp tiling" and "The final kernel".

Shared memory is 32 banks of 4-byte words: word address ``w`` lives in bank
``w % 32``. The hardware serves a warp's access in *wavefronts*; within one
wavefront each bank delivers one word. The model used here (the one NVIDIA's
profiling guide describes, simplified):

* a 32-bit access (LDS/STS) is served for all 32 lanes together; a 64-bit one for
  16 lanes at a time (2 *phases*), a 128-bit one (LDS.128/STS.128) for 8 lanes at
  a time (4 phases). So a 128-bit access needs at least 4 wavefronts, one per
  quarter warp: 32 lanes x 16 bytes = 512 bytes at 128 bytes per wavefront;
* within a phase, a bank that must deliver ``d`` *different* words costs ``d``
  wavefronts (a ``d``-way conflict); the phase takes as many wavefronts as its
  worst bank;
* lanes that read the *same* word share it (a broadcast): no conflict.

Nsight Compute counts the same things on the real GPU
(``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum`` and, for the wavefronts
above the minimum, ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum``):
see :mod:`helpers.measure.ncu`. The hardware can do better than this model for some
patterns (a broadcast LDS.128 is served in fewer than 4 wavefronts); where they
differ, the counters are the truth.

:func:`kernel_access` builds the accesses of ``kernels/08_bank_conflicts.cu`` (and of
``07_vectorized.cu``, whose layout is 08's with SPLIT = PAD = SWIZZLE = 0) from the
kernel's own index math (:mod:`helpers.runtime.specs.bank_conflicts`).
:func:`fragment_wavefronts` counts the LDS.128 of any kernel whose spec knows its fragments.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

from ..hardware import SMEM_BANKS as BANKS
from ..hardware import WARP_SIZE as WARP
from ..runtime.spec import KernelSpec
from ..runtime.specs import get
from ..runtime.specs.bank_conflicts import BM, BN, THREADS, VARIANTS, a_column, thread_col, thread_row


def bank(word: int) -> int:
    return word % BANKS


# ---------------------------------------------------------------- the model
@dataclass
class Access:
    """One warp-wide shared-memory instruction: the words each lane touches."""

    name: str
    words: list            # words[lane] = list of 4-byte word addresses (width consecutive)
    width: int = 1         # words per lane: 1 (32-bit), 2 (64-bit), 4 (128-bit)
    op: str = "load"       # "load" or "store"
    where: list = field(default_factory=list)   # optional text per lane, e.g. "As[3][17]"

    @property
    def instruction(self) -> str:
        base = "LDS" if self.op == "load" else "STS"
        return base + {1: "", 2: ".64", 4: ".128"}[self.width]

    def wavefronts(self) -> int:
        return wavefronts(self.words, self.width)

    def ideal(self) -> int:
        return ideal_wavefronts(self.words, self.width)

    def conflicts(self) -> int:
        """Wavefronts above the minimum: what Nsight Compute calls bank conflicts."""
        return self.wavefronts() - self.ideal()


def lanes_per_phase(width: int) -> int:
    if width not in (1, 2, 4):
        raise ValueError(f"an access is 1, 2 or 4 words per lane, not {width}")
    return WARP // width


def _phases(words, width):
    per = lanes_per_phase(width)
    for p in range(0, WARP, per):
        yield [(lane, words[lane]) for lane in range(p, min(p + per, len(words))) if words[lane]]


def wavefronts(words, width: int = 1) -> int:
    """Wavefronts one warp access takes: ``words[lane]`` lists the words that lane touches.

    >>> wavefronts([[i] for i in range(32)])            # stride 1: every lane its own bank
    1
    >>> wavefronts([[32 * i] for i in range(32)])       # stride 32: all in bank 0
    32
    >>> wavefronts([[4 * i + j for j in range(4)] for i in range(32)], width=4)   # contiguous LDS.128
    4
    """
    total = 0
    for phase in _phases(words, width):
        per_bank: dict = {}
        for _, ws in phase:
            for w in ws:
                per_bank.setdefault(bank(w), set()).add(w)
        if per_bank:
            total += max(len(s) for s in per_bank.values())
    return total


def ideal_wavefronts(words, width: int = 1) -> int:
    """The minimum for this width: one wavefront per phase that has an active lane."""
    return sum(1 for phase in _phases(words, width) if phase)


def schedule(words, width: int = 1) -> list[dict]:
    """For each lane, ``{word: wavefront number}`` (1-based, across the whole access).

    Within a phase a bank's distinct words are served in successive wavefronts;
    phases follow one another.
    """
    out = [dict() for _ in words]
    start = 0
    for phase in _phases(words, width):
        order: dict = {}
        for _, ws in phase:
            for w in ws:
                order.setdefault(bank(w), [])
                if w not in order[bank(w)]:
                    order[bank(w)].append(w)
        for lane, ws in phase:
            for w in ws:
                out[lane][w] = start + order[bank(w)].index(w) + 1
        start += max((len(v) for v in order.values()), default=0)
    return out


# ------------------------------------------------- the accesses of kernel 08
def a_load_pieces(start_word: int) -> list[int]:
    """How the compiler reads 4 consecutive floats starting at ``start_word``: the widths
    (in words) of the loads it emits, the widest each address's alignment allows.

    16-byte aligned: one LDS.128; 8-byte: two LDS.64; 4-byte: LDS, LDS.64, LDS.
    """
    if start_word % 4 == 0:
        return [4]
    if start_word % 2 == 0:
        return [2, 2]
    return [1, 2, 1]


ACCESSES = ("A store", "B store", "A load", "B load")


def kernel_access(access: str, BK: int = 16, SPLIT: int = 1, PAD: int = 0, SWIZZLE: int = 0,
                  warp: int = 0, k: int = 0, g: int = 0, l: int = 0, j: int = 0, piece: int = 0) -> Access:
    """One warp-wide shared-memory instruction of kernels/08_bank_conflicts.cu.

    ``access``: "A store" (the transposed STS.32 of element ``j`` of the float4
    loaded in sweep ``l``), "B store" (STS.128 of sweep ``l``), "A load" (the
    read of group ``g`` at ``k``; ``piece`` picks which load when the alignment
    splits it) or "B load" (LDS.128 of group ``g`` at ``k``).
    """
    p = dict(BK=BK, SPLIT=SPLIT, PAD=PAD, SWIZZLE=SWIZZLE)
    row = BM + PAD
    words, where = [], []
    width, op = 1, "load"
    for lane in range(WARP):
        tid = warp * WARP + lane
        tcol, trow = tid % 16, tid // 16
        if access == "A store":
            a_row, a_col = tid // (BK // 4), 4 * (tid % (BK // 4))
            r, kk = a_row + l * (THREADS // (BK // 4)), a_col + j
            col = a_column(p, kk, r)
            words.append([kk * row + col])
            where.append(f"As[{kk}][{col}] = A tile ({r}, {kk})")
            op = "store"
        elif access == "B store":
            b_row, b_col = tid // (BN // 4), 4 * (tid % (BN // 4))
            r = b_row + l * (THREADS // (BN // 4))
            words.append([r * BN + b_col + i for i in range(4)])
            where.append(f"Bs[{r}][{b_col}..{b_col + 3}]")
            width, op = 4, "store"
        elif access == "A load":
            m = thread_row(p, trow, g)
            start = k * row + a_column(p, k, m)
            pieces = a_load_pieces(start)
            width = pieces[piece]
            off = sum(pieces[:piece])
            words.append([start + off + i for i in range(width)])
            col = a_column(p, k, m) + off
            where.append(f"As[{k}][{col}..{col + width - 1}]" if width > 1 else f"As[{k}][{col}]")
        elif access == "B load":
            n = thread_col(p, tcol, g)
            words.append([k * BN + n + i for i in range(4)])
            where.append(f"Bs[{k}][{n}..{n + 3}]")
            width = 4
        else:
            raise ValueError(f"unknown access {access!r}; choose one of {ACCESSES}")
    name = f"{access} ({ {1: 'LDS', 2: 'LDS.64', 4: 'LDS.128'}[width] if op == 'load' else ('STS.128' if width == 4 else 'STS') })"
    return Access(name, words, width, op, where)


def block_instructions(BK: int = 16, SPLIT: int = 1, PAD: int = 0, SWIZZLE: int = 0):
    """Every shared-memory instruction of one k-tile of one block: (access kind, Access) pairs."""
    out = []
    a_sweeps = BM // (THREADS // (BK // 4))
    b_sweeps = BK // (THREADS // (BN // 4))
    p = dict(BK=BK, SPLIT=SPLIT, PAD=PAD, SWIZZLE=SWIZZLE)
    row = BM + PAD
    for warp in range(THREADS // WARP):
        for l in range(a_sweeps):
            for j in range(4):
                out.append(("A store", kernel_access("A store", BK, SPLIT, PAD, SWIZZLE, warp=warp, l=l, j=j)))
        for l in range(b_sweeps):
            out.append(("B store", kernel_access("B store", BK, SPLIT, PAD, SWIZZLE, warp=warp, l=l)))
        for k in range(BK):
            for g in range(2):
                start = k * row + a_column(p, k, thread_row(p, 0, g))
                for piece in range(len(a_load_pieces(start))):
                    out.append(("A load", kernel_access("A load", BK, SPLIT, PAD, SWIZZLE, warp=warp, k=k,
                                                        g=g, piece=piece)))
                out.append(("B load", kernel_access("B load", BK, SPLIT, PAD, SWIZZLE, warp=warp, k=k, g=g)))
    return out


def tile_totals(BK: int = 16, SPLIT: int = 1, PAD: int = 0, SWIZZLE: int = 0) -> dict:
    """Instructions, wavefronts and minimum wavefronts per k-tile of one block, by access kind,
    plus the load and store totals that Nsight Compute reports (per tile instead of per kernel)."""
    return copy.deepcopy(_tile_totals(BK, SPLIT, PAD, SWIZZLE))


@functools.cache
def _tile_totals(BK: int, SPLIT: int, PAD: int, SWIZZLE: int) -> dict:
    tot: dict = {}
    for kind, acc in block_instructions(BK, SPLIT, PAD, SWIZZLE):
        t = tot.setdefault(kind, {"instructions": 0, "wavefronts": 0, "ideal": 0})
        t["instructions"] += 1
        t["wavefronts"] += acc.wavefronts()
        t["ideal"] += acc.ideal()
    for op, kinds in (("load", ("A load", "B load")), ("store", ("A store", "B store"))):
        tot[op] = {key: sum(tot[k][key] for k in kinds) for key in ("instructions", "wavefronts", "ideal")}
    for t in tot.values():
        t["conflicts"] = t["wavefronts"] - t["ideal"]
        t["per_instruction"] = t["wavefronts"] / t["instructions"]
    return tot


# -------------------------------------------------------------- the variants
def table(BK: int = 16) -> list[dict]:
    """Per layout variant and access kind: wavefronts per instruction and the minimum (model)."""
    rows = []
    for vname, v in VARIANTS.items():
        tot = tile_totals(BK, **v)
        for kind in ACCESSES:
            t = tot[kind]
            rows.append({"variant": vname, "BK": BK, "access": kind, "instructions": t["instructions"],
                         "wavefronts": t["wavefronts"], "ideal": t["ideal"], "conflicts": t["conflicts"],
                         "per_instruction": round(t["per_instruction"], 3)})
    return rows


def predicted(kernel: str | KernelSpec, params: dict) -> dict | None:
    """What the model predicts for a profiled config: wavefronts per load and per store
    instruction (None for a kernel whose shared-memory layout it does not cover)."""
    spec = get(kernel)
    layout = spec.smem_layout(spec.resolve(params)) if spec.smem_layout else None
    if layout is None:
        return None
    tot = tile_totals(**layout)
    return {f"{op} wavefronts per instruction": round(tot[op]["per_instruction"], 3) for op in ("load", "store")}


# ----------------------------------------------------- LDS.128 of fragments
def chunk_wavefronts(chunk_addresses) -> int:
    """Shared-memory wavefronts for one LDS.128 of a warp, in a simple bank model.

    Each lane reads a 16-byte chunk; equal chunks are broadcast; a wavefront serves at
    most one chunk per group of 4 banks (8 groups = 128 bytes).
    """
    groups: dict = {}
    for a in set(chunk_addresses):
        groups.setdefault((a // 16) % 8, set()).add(a)
    return max(len(v) for v in groups.values())


def fragment_wavefronts(kernel: str | KernelSpec, params: dict | None = None) -> dict:
    """Per warp and per k step: LDS.128 per thread, wavefronts, FFMA per thread, for a
    kernel whose spec knows its fragments (warp tiles, the 8 x 8 split tile).

    ``wavefronts`` counts with :func:`chunk_wavefronts` (one 16-byte chunk per 4-bank group
    per wavefront, broadcasts free); ``quarter_warp_wavefronts`` counts the same reads with
    :func:`wavefronts` (8 lanes per wavefront for LDS.128). Nsight Compute's counters
    (data source ``warptiling_ncu``) say which the hardware is closer to.
    """
    spec = get(kernel)
    p = spec.resolve(params)
    a, b = spec.fragments(p)
    t = spec.tiles(p)
    ffma = t.TM * t.TN
    waves = sum(chunk_wavefronts(addrs) for addrs in a + b)
    quarter = sum(wavefronts([[x // 4 + j for j in range(4)] for x in addrs], 4) for addrs in a + b)
    distinct = sum(len(set(addrs)) for addrs in a + b)
    return dict(lds_per_thread=len(a) + len(b), ffma_per_thread=ffma, wavefronts=waves,
                distinct_bytes=16 * distinct, waves_per_1k_ffma=1000 * waves / (WARP * ffma),
                ffma_share=ffma / (ffma + len(a) + len(b)),
                # per 1000 warp-level FFMA instructions (what Nsight Compute's counts divide into)
                waves_per_1k_warp_ffma=1000 * waves / ffma,
                # the same reads in the quarter-warp model of wavefronts() (chapter "Bank conflicts")
                quarter_warp_wavefronts=quarter, quarter_per_1k_warp_ffma=1000 * quarter / ffma)


# ------------------------------------------------- the model against the counters
def variant_name(params: dict) -> str | None:
    """The chapter's name of a kernel-08 layout ("split + swizzle"), None if it is not one of them."""
    layout = {k: params.get(k) for k in ("SPLIT", "PAD", "SWIZZLE")}
    return next((name for name, v in VARIANTS.items() if v == layout), None)


def implied_a_loads(kernel: str | KernelSpec, params: dict, counters: dict) -> dict | None:
    """What the counters say about the A reads, taking the model's word for the B reads.

    ``counters``: one profiled config (a row of :func:`helpers.measure.ncu.pivot`), with
    its load instructions and load wavefronts for the whole launch. The model gives the
    instruction mix of one k-tile of one block; the launch is that tile repeated
    ``scale`` times. The B reads of a conflict-free layout move 8 distinct float4 per
    quarter warp, 512 bytes per instruction: 4 wavefronts of 128 bytes is also the
    physical floor, so the model cannot overcount them. What is left of the measured
    wavefronts belongs to the A reads, which are broadcasts (16 lanes read each float4).

    Returns None when the kernel is not one the model covers, or when the measured
    instruction count is not a whole number of the model's tiles (the model's instruction
    mix does not match the compiled kernel).
    """
    spec = get(kernel)
    layout = spec.smem_layout(spec.resolve(params)) if spec.smem_layout else None
    inst, waves = counters.get("load instructions"), counters.get("load wavefronts")
    if layout is None or not inst or waves is None:
        return None
    tot = tile_totals(**layout)
    scale, rest = divmod(inst, tot["load"]["instructions"])
    if rest or not scale:
        return None
    a_inst = scale * tot["A load"]["instructions"]
    a_waves = waves - scale * tot["B load"]["wavefronts"]
    return {"A load instructions": a_inst, "A load wavefronts": a_waves,
            "A wavefronts per instruction": a_waves / a_inst,
            "A model per instruction": tot["A load"]["per_instruction"],
            "B model per instruction": tot["B load"]["per_instruction"], "tiles": scale}


def warp_ffma(M: int, N: int, K: int) -> int:
    """Warp-level FFMA instructions of an M x N x K product: one FMA per (m, n, k), 32 lanes each."""
    return M * N * K // WARP
