"""Shared-memory banks: which bank each lane of a warp hits, and how many wavefronts.

Taught in the chapter "Bank conflicts". Shared memory has 32 banks of 4-byte
words; word address w lives in bank w % 32. A request is served in wavefronts:
32-bit accesses from all 32 lanes in one wavefront unless two lanes hit
different words of the same bank; 128-bit accesses 8 lanes (a quarter warp) at
a time, so at least 4 wavefronts. Lanes reading the same word share it (broadcast).
"""
from __future__ import annotations


def wavefronts(words: list[list[int]], width: int = 1) -> int:
    """Wavefronts for one warp access: ``words[lane]`` lists the 4-byte words it touches."""
    lanes_per_phase = 32 // width          # 32 lanes for 32-bit, 16 for 64-bit, 8 for 128-bit
    total = 0
    for p in range(0, 32, lanes_per_phase):
        per_bank: dict = {}
        for lane in range(p, min(p + lanes_per_phase, len(words))):
            for w in words[lane]:
                per_bank.setdefault(w % 32, set()).add(w)
        total += max((len(s) for s in per_bank.values()), default=0)
    return total


# Accesses of 07_bank_conflicts.cu for warp 0 of a block (BM = BN = 128, TM = TN = 8).
def access(name: str, BK: int = 8, SPLIT: int = 1, PAD: int = 0, SWIZZLE: int = 0, k: int = 0):
    """(words per lane, width) of one of the kernel's shared-memory accesses."""
    row = 128 + PAD
    rpw = 32 // (BK // 4)                       # rows of A one warp stores at once

    def a_col(kk, m):
        return m ^ ((kk // 4) * rpw % 32) if SWIZZLE else m

    out = []
    for lane in range(32):
        tid = lane
        tcol, trow = tid % 16, tid // 16
        if name == "A store (transposed)":      # STS.32 of element j = 0 of the lane's float4
            r, c = tid // (BK // 4), (tid % (BK // 4)) * 4
            out.append([c * row + a_col(c, r)])
        elif name == "A load (LDS.128)":
            m = trow * 4 if SPLIT else trow * 8
            base = k * row + a_col(k, m)
            out.append([base + j for j in range(4)])
        elif name == "B load (LDS.128)":
            n = tcol * 4 if SPLIT else tcol * 8
            out.append([k * 128 + n + j for j in range(4)])
        else:
            raise ValueError(name)
    return out, (4 if "128" in name else 1)


ACCESSES = ("A store (transposed)", "A load (LDS.128)", "B load (LDS.128)")
VARIANTS = {
    "contiguous tile, no padding": dict(SPLIT=0, PAD=0, SWIZZLE=0),
    "split tile": dict(SPLIT=1, PAD=0, SWIZZLE=0),
    "split tile + pad 4": dict(SPLIT=1, PAD=4, SWIZZLE=0),
    "split tile + swizzle": dict(SPLIT=1, PAD=0, SWIZZLE=1),
}


def table(BK: int = 8) -> list[dict]:
    rows = []
    for vname, v in VARIANTS.items():
        for a in ACCESSES:
            words, width = access(a, BK=BK, **v)
            rows.append({"variant": vname, "access": a, "wavefronts": wavefronts(words, width),
                         "minimum": 4 if width == 4 else 1})
    return rows


def figure(BK: int = 8):
    """Heatmap lanes x banks for each (variant, access), chosen from a menu."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE, with_menu

    steps = []
    for vname, v in VARIANTS.items():
        for a in ACCESSES:
            words, width = access(a, BK=BK, **v)
            z = [[0] * 32 for _ in range(32)]
            for lane, ws in enumerate(words):
                for w in ws:
                    z[lane][w % 32] += 1
            wf = wavefronts(words, width)
            steps.append((f"{vname}: {a} ({wf} wavefronts)",
                          [go.Heatmap(z=z, colorscale="Blues", showscale=False, xgap=1, ygap=1,
                                      hovertemplate="lane %{y}, bank %{x}<extra></extra>")]))
    fig = with_menu(steps, x=0.0)
    fig.update_layout(updatemenus=[dict(xanchor="left", y=1.22)])
    fig.update_xaxes(title="bank", dtick=4)
    fig.update_yaxes(title="lane", autorange="reversed", dtick=4)
    fig.update_layout(template=TEMPLATE, height=520, margin=dict(t=120),
                      title="Which bank each lane of warp 0 touches")
    return fig
