"""What each CPU variant's inner loop moves per multiply-add (chapter "On the CPU")."""
from __future__ import annotations

from ..runtime.cpu import KC, NC, VARIANTS

LINE = 64  # bytes in a CPU cache line


def traffic(variant: str, n: int = 1024) -> dict:
    """What each variant's inner loop moves, per multiply-add, at n x n x n.

    ``bytes_per_flop``: bytes the inner loop reads or writes per FLOP (2 per
    multiply-add), counting a whole 64-byte line for a strided access.
    ``reuse_b``: multiply-adds fed by each value of B loaded into a register.
    ``reuse_bytes``: how much data goes by between two uses of the same value of B
    (its reuse distance): the cache must hold that much for the second use to hit.
    """
    if variant == "ijk":
        # per multiply-add: A[i, k] (stride 1: 4 B), B[k, j] (stride n: a whole line)
        loads, stores, touched, reuse_b = 2, 0, 4 + LINE, 1
        reuse_bytes = n * LINE              # B[k, j+1] is in the line of B[k, j]: one column of lines later
    elif variant == "ikj (reordered)":
        # per multiply-add: load B[k, j], load C[i, j], store C[i, j], all stride 1
        loads, stores, touched, reuse_b = 2, 1, 12, 1
        reuse_bytes = 4 * n * n             # B[k, j] is used again by the next row of C: all of B later
    elif variant == "ikj, k unrolled x4":
        # per 4 multiply-adds: 4 B loads, 1 C load, 1 C store
        loads, stores, touched, reuse_b = 5 / 4, 1 / 4, 4 * 6 / 4, 1
        reuse_bytes = 4 * n * n
    elif variant == "4x4 register block":
        # per 16 multiply-adds: 4 B loads, 4 C loads, 4 C stores (A sits in 16 registers)
        loads, stores, touched, reuse_b = 8 / 16, 4 / 16, 4 * 12 / 16, 4
        reuse_bytes = 4 * n * n             # B[k, j] is used again by the next 4 rows: all of B later
    elif variant in ("tiled, packed B", "tiled, parallel"):
        # per 16 multiply-adds: 4 A loads and 4 B loads; C stays in registers for KC values of k
        loads, stores, touched, reuse_b = 8 / 16, 0, 4 * 8 / 16, 4
        reuse_bytes = 4 * min(n, KC) * min(n, NC)   # one packed block
    else:
        raise KeyError(f"no traffic model for {variant!r}; variants: {list(VARIANTS)}")
    return {"variant": variant, "loads_per_fma": loads, "stores_per_fma": stores,
            "bytes_per_flop": touched / 2, "reuse_b": reuse_b, "reuse_bytes": reuse_bytes}


def traffic_figure(rows: list[dict], n: int):
    """Model bytes per FLOP of each variant's inner loop, next to its measured GFLOP/s at n."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .plots import PALETTE, TEMPLATE, label_source

    names = [v for v in VARIANTS if any(r["name"] == v and r["n"] == n for r in rows)]
    model = [traffic(v)["bytes_per_flop"] for v in names]
    speed = [next(r["gflops"] for r in rows if r["name"] == v and r["n"] == n) for v in names]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.15,
                        subplot_titles=("model: bytes per FLOP", f"measured, n = {n}: GFLOP/s"))
    fig.add_trace(go.Bar(x=names, y=model, marker_color=PALETTE[3], name="bytes / FLOP",
                         text=[f"{m:.2g}" for m in model], textposition="outside", cliponaxis=False), 1, 1)
    fig.add_trace(go.Bar(x=names, y=speed, marker_color=PALETTE[0], name="GFLOP/s",
                         text=[f"{g:.1f}" for g in speed], textposition="outside", cliponaxis=False), 1, 2)
    fig.update_yaxes(type="log", tickvals=LOG_TICKS, row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=480, showlegend=False, title="Less traffic per FLOP, more FLOP/s",
                      margin=dict(t=100))
    return label_source(fig, machine_label())
