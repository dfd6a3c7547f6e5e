"""How many bytes a warp's load moves versus how many it uses.

Taught in the chapter "Global-memory coalescing". Global memory is moved in
32-byte sectors; a warp's load instruction costs as many sectors as its 32
addresses touch. ``warp_load`` counts them for the naive and the coalesced
mapping of any block shape.
"""
from __future__ import annotations

SECTOR = 32  # bytes


def lanes(BX: int, BY: int, warp: int = 0) -> list[tuple[int, int]]:
    """(threadIdx.x, threadIdx.y) of the 32 lanes of one warp in a BX x BY block."""
    out = []
    for lane in range(32):
        t = warp * 32 + lane
        out.append((t % BX, t // BX))
    return out


def warp_load(mapping: str, operand: str, BX: int, BY: int, K: int = 4096, N: int = 4096, k: int = 0) -> dict:
    """Sectors touched and bytes used by one warp's load of A or B at step k.

    mapping "naive": row = x, col = y (01_naive.cu); "coalesced": col = x, row = y.
    """
    addrs = []
    for x, y in lanes(BX, BY):
        row, col = (x, y) if mapping == "naive" else (y, x)
        addrs.append(4 * (row * K + k) if operand == "A" else 4 * (k * N + col))
    sectors = {a // SECTOR for a in addrs}
    used = 4 * len(set(addrs))
    moved = SECTOR * len(sectors)
    return {"mapping": mapping, "operand": operand, "block": f"{BX}x{BY}", "distinct_addresses": len(set(addrs)),
            "sectors": len(sectors), "bytes_moved": moved, "bytes_used": used, "efficiency": used / moved}


def figure(blocks=((32, 32), (16, 16), (8, 8), (4, 64), (64, 4))):
    """Bytes moved vs used per warp load, both mappings, a menu over block shapes."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE, with_menu

    steps = []
    for bx, by in blocks:
        traces = []
        for what, colour in (("bytes_moved", "#d62728"), ("bytes_used", "#2ca02c")):
            xs, ys, txt = [], [], []
            for mapping in ("naive", "coalesced"):
                for op in ("A", "B"):
                    r = warp_load(mapping, op, bx, by)
                    xs.append(f"{mapping}: load of {op}")
                    ys.append(r[what])
                    txt.append(f"{r['sectors']} sectors, {100 * r['efficiency']:.0f}% used")
            traces.append(go.Bar(x=xs, y=ys, name="bytes moved (32-byte sectors)" if what == "bytes_moved"
                                 else "bytes the warp uses", marker_color=colour, hovertext=txt, hoverinfo="text+y"))
        steps.append((f"block {bx}x{by}", traces))
    fig = with_menu(steps)
    fig.update_layout(template=TEMPLATE, barmode="group", height=420, yaxis_title="bytes per warp load",
                      title="One warp, one k: bytes moved vs bytes used")
    return fig
