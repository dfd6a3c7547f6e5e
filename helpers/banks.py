"""Shared-memory banks: which bank each lane of a warp hits, and how many wavefronts an access takes.

Taught in the chapter "Bank conflicts" (book/08_bank_conflicts.md).

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
see :mod:`helpers.ncu`. The hardware can do slightly better than this model for
some uniform-address patterns; where they differ, the counters are the truth.

:func:`kernel_access` builds the accesses of ``kernels/07_bank_conflicts.cu``
(and of ``06_vectorized.cu``, whose layout is 07's with SPLIT = PAD = SWIZZLE = 0)
from the same index math as the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

BANKS = 32
WARP = 32


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


# ------------------------------------------------- the accesses of kernel 07
BM = BN = 128
THREADS = 256


def _layout(BK: int, SPLIT: int, PAD: int, SWIZZLE: int):
    row = BM + PAD
    rows_per_warp_store = 32 // (BK // 4)

    def a_idx(k, m):
        return m ^ ((k // 4) * rows_per_warp_store % 32) if SWIZZLE else m

    def m_of(trow, g):
        return trow * 4 + g * (BM // 2) if SPLIT else trow * 8 + g * 4

    def n_of(tcol, g):
        return tcol * 4 + g * (BN // 2) if SPLIT else tcol * 8 + g * 4

    return row, a_idx, m_of, n_of


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
    """One warp-wide shared-memory instruction of kernels/07_bank_conflicts.cu.

    ``access``: "A store" (the transposed STS.32 of element ``j`` of the float4
    loaded in sweep ``l``), "B store" (STS.128 of sweep ``l``), "A load" (the
    read of group ``g`` at ``k``; ``piece`` picks which load when the alignment
    splits it) or "B load" (LDS.128 of group ``g`` at ``k``).
    """
    row, a_idx, m_of, n_of = _layout(BK, SPLIT, PAD, SWIZZLE)
    words, where = [], []
    width, op = 1, "load"
    for lane in range(WARP):
        tid = warp * WARP + lane
        tcol, trow = tid % 16, tid // 16
        if access == "A store":
            a_row, a_col = tid // (BK // 4), 4 * (tid % (BK // 4))
            r, kk = a_row + l * (THREADS // (BK // 4)), a_col + j
            col = a_idx(kk, r)
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
            m = m_of(trow, g)
            start = k * row + a_idx(k, m)
            pieces = a_load_pieces(start)
            width = pieces[piece]
            off = sum(pieces[:piece])
            words.append([start + off + i for i in range(width)])
            col = a_idx(k, m) + off
            where.append(f"As[{k}][{col}..{col + width - 1}]" if width > 1 else f"As[{k}][{col}]")
        elif access == "B load":
            n = n_of(tcol, g)
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
    row, a_idx, m_of, _ = _layout(BK, SPLIT, PAD, SWIZZLE)
    for warp in range(THREADS // WARP):
        for l in range(a_sweeps):
            for j in range(4):
                out.append(("A store", kernel_access("A store", BK, SPLIT, PAD, SWIZZLE, warp=warp, l=l, j=j)))
        for l in range(b_sweeps):
            out.append(("B store", kernel_access("B store", BK, SPLIT, PAD, SWIZZLE, warp=warp, l=l)))
        for k in range(BK):
            for g in range(2):
                start = k * row + a_idx(k, m_of(0, g))
                for piece in range(len(a_load_pieces(start))):
                    out.append(("A load", kernel_access("A load", BK, SPLIT, PAD, SWIZZLE, warp=warp, k=k,
                                                        g=g, piece=piece)))
                out.append(("B load", kernel_access("B load", BK, SPLIT, PAD, SWIZZLE, warp=warp, k=k, g=g)))
    return out


def tile_totals(BK: int = 16, SPLIT: int = 1, PAD: int = 0, SWIZZLE: int = 0) -> dict:
    """Instructions, wavefronts and minimum wavefronts per k-tile of one block, by access kind,
    plus the load and store totals that Nsight Compute reports (per tile instead of per kernel)."""
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
VARIANTS = {
    "contiguous (as 06)": dict(SPLIT=0, PAD=0, SWIZZLE=0),
    "split": dict(SPLIT=1, PAD=0, SWIZZLE=0),
    "split + pad 1": dict(SPLIT=1, PAD=1, SWIZZLE=0),
    "split + pad 2": dict(SPLIT=1, PAD=2, SWIZZLE=0),
    "split + pad 4": dict(SPLIT=1, PAD=4, SWIZZLE=0),
    "split + swizzle": dict(SPLIT=1, PAD=0, SWIZZLE=1),
}


def variant_name(params: dict) -> str:
    for name, v in VARIANTS.items():
        if all(params.get(key) == val for key, val in v.items()):
            return name
    return ", ".join(f"{k}={v}" for k, v in params.items())


def table(BK: int = 16) -> list[dict]:
    """Per variant and access kind: wavefronts per instruction and the minimum (model)."""
    rows = []
    for vname, v in VARIANTS.items():
        tot = tile_totals(BK, **v)
        for kind in ACCESSES:
            t = tot[kind]
            rows.append({"variant": vname, "BK": BK, "access": kind, "instructions": t["instructions"],
                         "wavefronts": t["wavefronts"], "ideal": t["ideal"], "conflicts": t["conflicts"],
                         "per_instruction": round(t["per_instruction"], 3)})
    return rows


# ------------------------------------------------------------------- figures
def _heat(acc: Access):
    """(z, text) for a lanes x banks heatmap: z = the wavefront that serves (lane, bank)."""
    sched = schedule(acc.words, acc.width)
    z = [[None] * BANKS for _ in range(WARP)]
    text = [[""] * BANKS for _ in range(WARP)]
    for lane, ws in enumerate(acc.words):
        for w in ws:
            b = bank(w)
            z[lane][b] = sched[lane][w]
            where = acc.where[lane] if acc.where else ""
            text[lane][b] = f"lane {lane}, bank {b}<br>word {w} {where}<br>wavefront {sched[lane][w]}"
    return z, text


def figure(BK: int = 16, accesses=None, warp: int = 0):
    """Heatmap of lanes (rows) x banks (columns) for one warp, coloured by the wavefront
    that serves each word; a menu picks the variant and the access."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE, with_menu

    picks = accesses or [("A store", {}), ("B store", {}), ("A load", {"k": 1}), ("B load", {})]
    steps, titles = [], []
    for vname, v in VARIANTS.items():
        for access, kw in picks:
            acc = kernel_access(access, BK=BK, warp=warp, **v, **kw)
            z, text = _heat(acc)
            wf, ideal = acc.wavefronts(), acc.ideal()
            verdict = ("no conflict" if wf == ideal else f"{wf // ideal}-way conflict" if wf % ideal == 0
                       else "conflicts")
            label = f"{vname}: {acc.name}"
            steps.append((label, [go.Heatmap(z=z, hovertext=text, hoverinfo="text", zmin=1, zmax=8, xgap=1, ygap=1,
                                             colorscale="Turbo", colorbar=dict(title="wavefront"), name=label)]))
            titles.append(f"BK={BK}, warp {warp}, {label}<br>{wf} wavefronts (minimum {ideal}): {verdict}")
    fig = with_menu(steps, x=0.0)
    fig.update_layout(updatemenus=[dict(xanchor="left", y=1.3)])
    # each menu entry also sets the title, which states that access's count
    for button, title in zip(fig.layout.updatemenus[0].buttons, titles):
        button.args = list(button.args) + [{"title.text": title}]
    fig.update_xaxes(title="bank", dtick=4, range=[-0.5, 31.5])
    fig.update_yaxes(title="lane", autorange="reversed", dtick=4)
    fig.update_layout(template=TEMPLATE, height=600, margin=dict(t=170), title=dict(text=titles[0], y=0.9))
    return fig


def summary_figure(BKs=(8, 16)):
    """Bars: modelled wavefronts per instruction, per variant and access kind, vs the minimum.
    A menu switches BK."""
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, with_menu

    steps = []
    for BK in BKs:
        rows = table(BK)
        traces = []
        for i, kind in enumerate(ACCESSES):
            sel = [r for r in rows if r["access"] == kind]
            traces.append(go.Bar(x=[r["variant"] for r in sel], y=[r["per_instruction"] for r in sel], name=kind,
                                 marker_color=PALETTE[i],
                                 text=[f"{r['per_instruction']:g}" for r in sel], textposition="outside",
                                 hovertext=[f"{r['variant']}, {kind}<br>{r['per_instruction']:g} wavefronts per "
                                            f"instruction (minimum {r['ideal'] / r['instructions']:g})<br>"
                                            f"{r['conflicts']} extra wavefronts per k-tile of a block"
                                            for r in sel], hoverinfo="text"))
        steps.append((f"BK = {BK}", traces))
    fig = with_menu(steps, active=len(steps) - 1)
    fig.update_layout(template=TEMPLATE, barmode="group", height=460,
                      title="Model: wavefronts per shared-memory instruction (LDS.128/STS.128 minimum 4, 32-bit 1)",
                      yaxis_title="wavefronts per instruction", legend=dict(orientation="h", y=-0.25))
    return fig
