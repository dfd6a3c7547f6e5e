"""Pictures of the ideas of chapters 2 to 5, drawn from the chapters' own parameters.

* :func:`memory_hierarchy` (chapter "The naive kernel"): registers, shared memory / L1, L2 and
  device memory of one device, how big and how fast, from the device model
  (:mod:`helpers.hardware`); a menu switches between sizes and bandwidths.
* :func:`block_tile` (chapter "Shared-memory tiling"): one block of C walking K: a slider over
  the k-steps shows which tile of A and which of B sit in shared memory; a menu picks TILE.
* :func:`thread_tiles` (chapter "1D thread tiles"): the block tile and the threads' columns of
  TM results; a slider picks the config (BM, BN, BK, TM) of the chapter's sweep.

Every picture works in the static book: Plotly's own menus and sliders, no kernel behind the page.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from ..hardware import SMEM_BANKS, WARP_SIZE, Device
from ..runtime.specs import get
from . import style

FLOAT = 4
SHADE = "rgba(150,150,150,0.18)"
GRID_LINE = "#c8c8c8"
A_COLOUR, B_COLOUR, C_COLOUR = style.PALETTE[0], style.PALETTE[2], "#d62728"


rects = style.rects


def boxes_trace(boxes, fill, line, name, hover=None, width=1, legend=True) -> go.Scatter:
    x, y = rects(boxes)
    return go.Scatter(x=x, y=y, mode="lines", fill="toself", fillcolor=fill, line=dict(color=line, width=width),
                      name=name, showlegend=legend, hoverinfo="text" if hover else "skip", hovertext=hover,
                      hoveron="fills")


def grid_trace(x0, y0, width, height, dx, dy) -> go.Scatter:
    """Thin lines every dx columns and dy rows inside a rectangle, and its outline (one path)."""
    xs, ys = [], []
    for x in range(x0, x0 + width + 1, dx):
        xs += [x, x, None]
        ys += [y0, y0 + height, None]
    for y in range(y0, y0 + height + 1, dy):
        xs += [x0, x0 + width, None]
        ys += [y, y, None]
    return go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=GRID_LINE, width=1), hoverinfo="skip",
                      showlegend=False)


def size_text(nbytes: float) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


# ------------------------------------------------------------------ the memory hierarchy
def hierarchy_levels(device: Device, memory_gib: float | None = None) -> list[dict]:
    """The four levels of one device, fastest first: name, bytes (in all), per SM, bytes/s (None where
    the device model has no number), and how the figure says where each number comes from."""
    sms, hz = device.sm_count, device.clock_mhz * 1e6
    regs = device.registers_per_sm * FLOAT
    fma_operands = device.fp32_lanes * 3 * FLOAT * hz * sms          # a, b and c of every lane's FMA, each clock
    smem_bw = SMEM_BANKS * FLOAT * hz * sms                           # each bank serves one word per clock
    return [
        {"level": "registers", "bytes": regs * sms, "per_sm": regs, "bandwidth": fma_operands,
         "how": f"{device.registers_per_sm} 32-bit registers per SM; read: 3 operands of each FMA, "
                f"{device.fp32_lanes} FMA lanes per SM each clock"},
        {"level": "shared memory / L1", "bytes": device.l1_smem_per_sm * sms, "per_sm": device.l1_smem_per_sm,
         "bandwidth": smem_bw,
         "how": f"one on-chip memory per SM, up to {size_text(device.smem_per_sm)} of it shared memory; "
                f"{SMEM_BANKS} banks of 4 bytes per clock"},
        {"level": "L2 cache", "bytes": device.l2_bytes, "per_sm": None, "bandwidth": None,
         "how": "shared by all SMs; its bandwidth is not in the device model (not published)"},
        {"level": "device memory (HBM)", "bytes": memory_gib * 2**30 if memory_gib else None, "per_sm": None,
         "bandwidth": device.bandwidth_gbs * 1e9, "how": "off the chip, the bandwidth the datasheet gives"},
    ]


def memory_hierarchy(device: Device, memory_gib: float | None = None, source: str = "") -> go.Figure:
    """The levels of memory of ``device`` as bars on a log axis, fastest on top; a menu switches
    between how much each holds and how fast it is read."""
    levels = hierarchy_levels(device, memory_gib)
    names = [lv["level"] for lv in levels]
    colours = [style.PALETTE[i] for i in range(len(levels))]

    def bars(values, labels, unit):
        known = [(n, v, t, c) for n, v, t, c in zip(names, values, labels, colours) if v]
        room = style.label_room([v for _, v, _, _ in known], [t for _, _, t, _ in known], left_px=120)
        return go.Bar(y=[k[0] for k in known], x=[k[1] for k in known], orientation="h",
                      marker_color=[k[3] for k in known], text=[k[2] for k in known], textposition="outside",
                      cliponaxis=False, hovertext=[lv["how"] for lv in levels if lv[unit]], hoverinfo="text",
                      showlegend=False), room

    size_labels = [size_text(lv["bytes"]) + (f" ({size_text(lv['per_sm'])} per SM)" if lv["per_sm"] else "")
                   if lv["bytes"] else "" for lv in levels]
    bw_labels = [f"{lv['bandwidth'] / 1e12:.3g} TB/s" if lv["bandwidth"] else "" for lv in levels]
    size_bar, size_room = bars([lv["bytes"] for lv in levels], size_labels, "bytes")
    bw_bar, bw_room = bars([lv["bandwidth"] for lv in levels], bw_labels, "bandwidth")
    sizes = [lv["bytes"] for lv in levels if lv["bytes"]]
    speeds = [lv["bandwidth"] for lv in levels if lv["bandwidth"]]
    def axis(values, room):
        lo = math.log10(min(values) / 3)
        hi = math.log10(max(values)) + (math.log10(room) - math.log10(max(values))) * 1.0
        return [lo, max(hi, math.log10(max(values) * 1.5))]

    def ticks(span, marks):
        """The axis's range and its ticks where ``marks`` (value, text) fall inside it."""
        inside = [(v, t) for v, t in marks if span[0] <= math.log10(v) <= span[1]]
        return {"xaxis.range": span, "xaxis.tickvals": [v for v, _ in inside], "xaxis.ticktext": [t for _, t in inside]}

    size_marks = [(m * scale, f"{m} {unit}") for unit, scale in (("KB", 2**10), ("MB", 2**20), ("GB", 2**30),
                                                                   ("TB", 2**40)) for m in (1, 10, 100)]
    speed_marks = [(10.0 ** e, f"{10 ** (e % 3)} {unit}/s") for e, unit in
                   ((e, "GB" if e < 12 else "TB" if e < 15 else "PB") for e in range(9, 18))]
    steps = [("how much it holds", [size_bar], f"{device.name}: how much each level holds"),
             ("how fast it is read", [bw_bar], f"{device.name}: how fast each level is read")]
    layouts = [{**ticks(axis(sizes, size_room * 30), size_marks), "xaxis.title.text": "bytes (log scale)"},
               {**ticks(axis(speeds, bw_room * 8), speed_marks), "xaxis.title.text": "bytes per second (log scale)"}]
    fig = style.steps_figure(steps, active=0, layouts=layouts)
    fig.update_xaxes(type="log", tickfont=dict(size=style.FONT - 1))
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=names)
    missing = [lv["level"] for lv in levels if not lv["bandwidth"]]
    note = source + (f"; {', '.join(missing)}: bandwidth not in the device model, no bar in how fast it is read"
                     if missing else "")
    return style.finish(fig, steps[0][2], "bytes (log scale)", None, note, height=420, legend=False)


# ------------------------------------------------------------------ chapter 4: the block tile
def block_tile_layout(tile: int, M: int, N: int, K: int, gap: int) -> dict:
    """Where A, B and C sit in the picture: A left of C, B above it (x: columns, y: rows, down)."""
    return {"A": (0, K + gap), "B": (K + gap, 0), "C": (K + gap, K + gap)}


def block_tile_step(tile: int, step: int, M: int = 64, N: int = 64, K: int = 96, block=(1, 1),
                    gap: int = 8) -> list[go.Scatter]:
    """The traces of one k-step of block ``block`` (block row, block column) with TILE = ``tile``."""
    at = block_tile_layout(tile, M, N, K, gap)
    (ax, ay), (bx, by), (cx, cy) = at["A"], at["B"], at["C"]
    bi, bj = block
    k0 = step * tile
    steps = -(-K // tile)
    return [
        grid_trace(ax, ay, K, M, tile, tile), grid_trace(bx, by, N, K, tile, tile), grid_trace(cx, cy, N, M, tile, tile),
        boxes_trace([(ax, ay + bi * tile, ax + K, ay + (bi + 1) * tile), (bx + bj * tile, by, bx + (bj + 1) * tile, by + K)],
                    SHADE, "#999", "the rows of A and columns of B this block needs", legend=True),
        boxes_trace([(ax + k0, ay + bi * tile, ax + k0 + tile, ay + (bi + 1) * tile)], A_COLOUR, A_COLOUR,
                    f"As: the tile of A in shared memory ({tile} x {tile})",
                    hover=f"As = A[{bi * tile}:{(bi + 1) * tile}, {k0}:{k0 + tile}]"),
        boxes_trace([(bx + bj * tile, by + k0, bx + (bj + 1) * tile, by + k0 + tile)], B_COLOUR, B_COLOUR,
                    f"Bs: the tile of B in shared memory ({tile} x {tile})",
                    hover=f"Bs = B[{k0}:{k0 + tile}, {bj * tile}:{(bj + 1) * tile}]"),
        boxes_trace([(cx + bj * tile, cy + bi * tile, cx + (bj + 1) * tile, cy + (bi + 1) * tile)],
                    "rgba(214,39,40,0.35)", C_COLOUR, f"the block's tile of C: {tile * tile} threads, one result each",
                    hover=f"C[{bi * tile}:{(bi + 1) * tile}, {bj * tile}:{(bj + 1) * tile}] after step {step + 1} of "
                          f"{steps}: k < {min(k0 + tile, K)} summed", width=2),
    ]


def block_tile(tiles=None, M: int = 64, N: int = 64, K: int = 96, block=(1, 1), gap: int = 8) -> go.Figure:
    """One block of C (TILE x TILE threads) walking K: a slider over its k-steps shows the tiles of A
    and B in shared memory at each step; a menu picks TILE (default: the kernel's allowed values)."""
    spec = get("smem_tiling")
    tiles = list(tiles or next(p.allowed for p in spec.params if p.name == "TILE"))
    default = spec.defaults()["TILE"]
    active_tile = tiles.index(default) if default in tiles else len(tiles) - 1
    fig, owner = go.Figure(), []
    for ti, t in enumerate(tiles):
        for s in range(-(-K // t)):
            for tr in block_tile_step(t, s, M, N, K, block, gap):
                tr.visible = ti == active_tile and s == 0
                fig.add_trace(tr)
                owner.append((ti, s))

    def visible(ti, s):
        return [o == (ti, s) for o in owner]

    def title(t, s):
        return f"TILE = {t}: k-step {s + 1} of {-(-K // t)}, k from {s * t} to {min((s + 1) * t, K) - 1}"

    def slider(ti):
        t = tiles[ti]
        return dict(active=0, currentvalue=dict(prefix="k-step: ", font=dict(size=style.FONT)), x=0, len=1,
                    pad=dict(t=style.SLIDER_TOP, b=10, l=0, r=0),
                    steps=[dict(label=str(s + 1), method="update",
                                args=[{"visible": visible(ti, s)}, {"title.text": style.wrap(title(t, s), style.TITLE_LINE)}])
                           for s in range(-(-K // t))])

    fig.update_layout(
        sliders=[slider(active_tile)],
        updatemenus=[dict(active=active_tile, type="dropdown", x=0, xanchor="left", y=1.0, yanchor="bottom",
                          pad=dict(b=8), buttons=[dict(label=f"TILE = {t}", method="update",
                                                       args=[{"visible": visible(ti, 0)},
                                                             {"sliders": [slider(ti)],
                                                              "title.text": style.wrap(title(t, 0), style.TITLE_LINE)}])
                                                  for ti, t in enumerate(tiles)])])
    # each name beside its matrix, where no grid line runs: A above it and B left of it (the empty
    # corner), C right of it
    at = block_tile_layout(tiles[active_tile], M, N, K, gap)
    (ax, ay), (bx, by), (cx, cy) = at["A"], at["B"], at["C"]
    for name, x, y, xanchor, yanchor in (("A", ax + K / 2, ay - 1, "center", "bottom"),
                                          ("B", bx - 1, by + K / 2, "right", "middle"),
                                          ("C", cx + N + 1, cy + M / 2, "left", "middle")):
        fig.add_annotation(x=x, y=y, text=f"<b>{name}</b>", showarrow=False, xanchor=xanchor, yanchor=yanchor,
                           font=dict(size=22, color="rgba(0,0,0,0.45)"))
    size = K + gap + max(M, N)
    fig.update_xaxes(range=[-1, size + 2 * gap], visible=False, constrain="domain")
    fig.update_yaxes(range=[size + 1, -1], visible=False, scaleanchor="x", constrain="domain")
    fig = style.finish(fig, title(tiles[active_tile], 0), None, None,
                       f"A {M} x {K}, B {K} x {N}; block ({block[0]}, {block[1]}) of C; the kernel's index math",
                       height=620)
    for menu in fig.layout.updatemenus:                 # the sliders a menu puts in keep finish's padding
        for b in menu.buttons:
            b.args[1]["sliders"][0]["pad"] = fig.layout.sliders[0].pad.to_plotly_json()
    return fig


# ------------------------------------------------------------------ chapter 5: thread tiles
def thread_cells(params: dict, tid: int) -> tuple[list[int], int]:
    """The rows of the block tile (TM of them) and the column that thread ``tid`` computes."""
    bn, tm = params["BN"], params["TM"]
    trow, tcol = tid // bn, tid % bn
    return list(range(trow * tm, trow * tm + tm)), tcol


def thread_tile_traces(params: dict, gap: int = 4) -> list[go.Scatter]:
    """One config's picture: As (BM x BK) left, Bs (BK x BN) on top, the block tile of C; the
    threads' columns of TM results as a grid, warp 0 in blue, thread 0 in red, and what they read."""
    bm, bn, bk, tm = params["BM"], params["BN"], params["BK"], params["TM"]
    ax, ay, bx, by, cx, cy = 0, bk + gap, bk + gap, 0, bk + gap, bk + gap
    warp = [thread_cells(params, t) for t in range(min(WARP_SIZE, bm * bn // tm))]
    rows0, col0 = warp[0]
    warp_rows = sorted({r for rows, _ in warp for r in rows})
    warp_cells = [(cx + c, cy + rows[0], cx + c + 1, cy + rows[-1] + 1) for rows, c in warp[1:]]
    return [
        grid_trace(ax, ay, bk, bm, bk, tm), grid_trace(bx, by, bn, bk, 1, bk), grid_trace(cx, cy, bn, bm, 1, tm),
        boxes_trace(warp_cells, "rgba(31,119,180,0.35)", A_COLOUR, f"warp 0: threads 1 to {len(warp) - 1}",
                    hover=f"warp 0: {len(warp)} threads, columns {min(c for _, c in warp)}-{max(c for _, c in warp)}"),
        boxes_trace([(bx + c, by, bx + c + 1, by + bk) for _, c in warp[1:]], "rgba(31,119,180,0.35)", A_COLOUR,
                    "", legend=False),
        boxes_trace([(ax, ay + r, ax + bk, ay + r + 1) for r in warp_rows], "rgba(31,119,180,0.2)", A_COLOUR,
                    "", legend=False),
        boxes_trace([(cx + col0, cy + rows0[0], cx + col0 + 1, cy + rows0[-1] + 1)], C_COLOUR, C_COLOUR,
                    f"thread 0: {tm} results of column 0",
                    hover=f"thread 0: rows {rows0[0]}-{rows0[-1]} of column {col0}", width=2),
        boxes_trace([(bx + col0, by, bx + col0 + 1, by + bk)], C_COLOUR, C_COLOUR,
                    "thread 0 reads one value of Bs per k", hover=f"Bs[0:{bk}][{col0}]"),
        boxes_trace([(ax, ay + rows0[0], ax + bk, ay + rows0[-1] + 1)], "rgba(214,39,40,0.5)", C_COLOUR,
                    f"thread 0 reads {tm} values of As per k, one per result",
                    hover=f"As[{rows0[0]}:{rows0[-1] + 1}][0:{bk}]"),
    ]


def thread_tile_names(params: dict, gap: int) -> list[dict]:
    """The names of the three tiles: As and Bs in the empty corner beside them, C over its middle."""
    bm, bn, bk = params["BM"], params["BN"], params["BK"]
    font = dict(size=style.FONT + 2, color="rgba(0,0,0,0.55)")
    names = [dict(x=bk / 2, y=bk + gap / 2, text="<b>As</b>", xanchor="center", yanchor="bottom"),
             dict(x=bk + gap / 2, y=bk / 2, text="<b>Bs</b>", xanchor="right", yanchor="middle"),
             dict(x=bk + gap + bn / 2, y=bk + gap + bm * 0.6, text="<b>C</b>", xanchor="center", yanchor="middle")]
    return [dict(a, xref="x", yref="y", showarrow=False, font=font) for a in names]


def thread_tile_configs() -> list[dict]:
    """The configs of the chapter's sweep (the k-outer loop), smallest block tile and TM first."""
    from ..runtime.specs import thread_tile_1d

    spec = get("thread_tile_1d")
    seen = {}
    for _, p, _ in thread_tile_1d.SWEEP:
        full = spec.resolve(p)
        if full["LOOP"] == 1:
            seen[(full["BM"], full["BN"], full["BK"], full["TM"])] = full
    return [seen[k] for k in sorted(seen)]


def thread_tiles(configs: list[dict] | None = None, gap: int = 4) -> go.Figure:
    """The block tile of the 1D thread-tile kernel and which results each thread computes; a slider
    (a menu for a few) picks the config."""
    spec = get("thread_tile_1d")
    configs = [spec.resolve(p) for p in (configs or thread_tile_configs())]
    default = spec.defaults()
    active = next((i for i, p in enumerate(configs) if p == default), 0)
    steps, layouts = [], []
    for p in configs:
        threads = p["BM"] * p["BN"] // p["TM"]
        label = f"{p['BM']}x{p['BN']}x{p['BK']}, TM={p['TM']}"
        steps.append((label, thread_tile_traces(p, gap),
                      f"{p['BM']} x {p['BN']} tile, {threads} threads of {p['TM']} results"))
        w, h = p["BK"] + gap + p["BN"], p["BK"] + gap + p["BM"]
        layouts.append({"xaxis.range": [-1, w + 1], "yaxis.range": [h + 1, -1],
                        "annotations": thread_tile_names(p, gap)})
    fig = style.steps_figure(steps, active=active, prefix="BM x BN x BK: ", layouts=layouts)
    if fig.layout.sliders:
        fig.layout.sliders[0].update(font=dict(color="rgba(0,0,0,0)", size=2), ticklen=4, pad=dict(l=0, r=0))
        fig.layout.sliders[0].currentvalue.font = dict(color="#222", size=style.FONT)
    fig.update_xaxes(visible=False, constrain="domain")
    fig.update_yaxes(visible=False, scaleanchor="x", constrain="domain")
    return style.finish(fig, steps[active][2], None, None,
                        "As left, Bs on top, the block tile of C below; the kernel's index math", height=640)


def memory_of(rs) -> go.Figure:
    """:func:`memory_hierarchy` of the device a chapter's rows come from (its memory size from the
    record's device block, or from the GPU present in live mode)."""
    gib = None
    try:
        if rs.live:
            import cupy  # noqa: PLC0415  (live mode: a GPU is present)

            gib = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["totalGlobalMem"] / 2**30
        else:
            from ..measure import datafile  # noqa: PLC0415

            gib = datafile.load().chapter(rs.chapter)["device"].get("memory_gib")
    except Exception:         # the size of device memory is a detail of the picture: drawn without it
        gib = None
    return memory_hierarchy(rs.device, gib, rs.source)
