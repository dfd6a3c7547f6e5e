"""Pictures of the ideas of chapters 6-9, drawn from the chapters' own parameters and
interactive in the static book (a Plotly menu or slider, no kernel behind the page).

* :func:`thread_tiles` (chapter "2D thread tiles"): a block's tile of C cut into TM x TN
  thread tiles, and the TM + TN values one thread reads from shared memory at one k.
* :func:`float4_loads` (chapter "Vectorized float4 access"): which 16-byte vector each lane
  of a warp loads from a tile row, and the 128-byte segments the warp touches.
* :func:`bank_layouts` (chapter "Bank conflicts"): a warp's stores of A's tile mapped onto
  the 32 banks, per layout, with the wavefronts they take.
* :func:`stages_timeline` (chapter "Double buffering"): loads and arithmetic of each k-tile
  over time, for one or more stages.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..hardware import SMEM_BANKS
from ..models import banks
from ..runtime.specs.bank_conflicts import VARIANTS
from . import style
from .style import plural

WARP = 32
SEGMENT_BYTES = 128           # a global-memory transaction of a warp: 128-byte segments
LIGHT, DARK, SHADE = "#c6dbef", "#08519c", "#f0f0f0"


# ---------------------------------------------------------------- chapter 6
def thread_tile_cells(BM: int, BN: int, TM: int, TN: int, thread: int = 0) -> dict:
    """The grid of thread tiles of a BM x BN block (rows BM/TM, columns BN/TN), which one is
    ``thread``'s, and the rows of As and columns of Bs it reads at one k."""
    rows, cols = BM // TM, BN // TN
    trow, tcol = thread // cols, thread % cols
    return {"threads": rows * cols, "grid": (rows, cols), "trow": trow, "tcol": tcol,
            "a_rows": list(range(trow * TM, trow * TM + TM)), "b_cols": list(range(tcol * TN, tcol * TN + TN)),
            "loads": TM + TN, "fma": TM * TN}


def thread_tiles(configs: list[dict], thread: int = 0) -> go.Figure:
    """A block's tile of C (BM x BN) cut into thread tiles, checkered; one thread's tile dark,
    with the column of As (TM values) and the row of Bs (TN values) it reads at one k: their
    outer product is its TM x TN multiply-adds. A menu (or slider) over ``configs``
    (dicts with BM, BN, TM, TN)."""
    steps = []
    for p in configs:
        BM, BN, TM, TN = p["BM"], p["BN"], p["TM"], p["TN"]
        c = thread_tile_cells(BM, BN, TM, TN, thread)
        rows, cols = c["grid"]
        z = [[(i + j) % 2 * 0.25 for j in range(cols)] for i in range(rows)]
        z[c["trow"]][c["tcol"]] = 1
        hover = [[f"thread {i * cols + j}: rows {i * TM}..{i * TM + TM - 1}, columns {j * TN}..{j * TN + TN - 1}"
                  for j in range(cols)] for i in range(rows)]
        gap = max(BM, BN) / 16                          # room between C and the two operand strips
        a = [[1 if r in c["a_rows"] else 0.25] for r in range(BM)]
        b = [[1 if n in c["b_cols"] else 0.25 for n in range(BN)]]
        scale = [[0, SHADE], [0.25, LIGHT], [0.5, LIGHT], [1, DARK]]
        common = dict(colorscale=scale, zmin=0, zmax=1, showscale=False, xgap=0.5, ygap=0.5, hoverinfo="text")
        traces = [
            go.Heatmap(z=z, x0=TN / 2, dx=TN, y0=TM / 2, dy=TM, hovertext=hover, name="C", **common),
            go.Heatmap(z=a, x0=-gap, dx=gap / 2, y0=0.5, dy=1, name="As[:, k]",
                       hovertext=[[f"As row {r}, k" + (" (read by thread)" if r in c["a_rows"] else "")] for r in range(BM)],
                       **common),
            go.Heatmap(z=b, x0=0.5, dx=1, y0=-gap, dy=gap / 2, name="Bs[k, :]",
                       hovertext=[[f"Bs k, column {n}" + (" (read by thread)" if n in c["b_cols"] else "")
                                   for n in range(BN)]], **common),
        ]
        label = f"{BM}x{BN}, {TM}x{TN}"
        title = (f"{BM} × {BN} block, {TM} × {TN} thread tiles: {c['threads']} threads. Per k one thread reads "
                 f"{c['loads']} floats, does {c['fma']} FMAs")
        lay = {"xaxis.range": [-1.5 * gap, BN + 0.5], "yaxis.range": [BM + 0.5, -1.5 * gap]}
        steps.append((label, traces, title, lay))
    active = len(steps) // 2
    fig = style.steps_figure([s[:3] for s in steps], active=active, layouts=[s[3] for s in steps])
    # both axes constrained: the square cells shrink the plot rather than widen the range of n
    fig.update_xaxes(title="column of C (n)", zeroline=False, showgrid=False, constrain="domain")
    fig.update_yaxes(title="row of C (m)", zeroline=False, showgrid=False, scaleanchor="x", constrain="domain")
    return style.finish(fig, steps[active][2], source=f"dark: thread {thread}'s tile of C, the TM values of As and "
                        "the TN values of Bs it reads at one k (left, top); their outer product updates the whole tile",
                        height=520, legend=False)


# ---------------------------------------------------------------- chapter 7
def float4_cells(width: int) -> dict:
    """One warp of threads loading a tile of ``width`` floats per row in float4, consecutive
    lanes on consecutive vectors: for each lane its (row, first column); the rows the warp
    covers; and the 128-byte segments of global memory it touches (rows start aligned)."""
    per_row = width // 4
    lanes = [(lane // per_row, 4 * (lane % per_row)) for lane in range(WARP)]
    rows = WARP // per_row if per_row <= WARP else 1
    row_bytes = 4 * min(width, 4 * WARP)
    segments = rows * -(-row_bytes // SEGMENT_BYTES)
    return {"lanes": lanes, "rows": rows, "segments": segments, "bytes": 16 * WARP,
            "used": 16 * WARP / (segments * SEGMENT_BYTES)}


def float4_loads(widths=(8, 16, 32, 64, 128)) -> go.Figure:
    """Which 16-byte vector of a tile each lane of a warp loads with one LDG.128 (a cell per
    float, the even lanes' numbers on their vectors), for tile rows of each width (a menu): a warp moves
    512 bytes per instruction; dotted lines mark the 128-byte segments in each row."""
    steps, lays = [], []
    for w in widths:
        c = float4_cells(w)
        shown = min(w, 4 * WARP)
        z = [[None] * shown for _ in range(c["rows"])]
        text = [[""] * shown for _ in range(c["rows"])]
        hover = [[""] * shown for _ in range(c["rows"])]
        for lane, (r, col) in enumerate(c["lanes"]):
            for j in range(4):
                z[r][col + j] = lane % 8
                hover[r][col + j] = f"lane {lane}: row {r}, floats {col}..{col + 3} (bytes {4 * col}..{4 * col + 15})"
            # a vector is about 10 px wide on a phone, too narrow for two numbers side by side:
            # the even lanes are numbered (the hover names every lane)
            if lane % 2 == 0:
                text[r][col + 1] = str(lane)
        traces = [go.Heatmap(z=z, text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                             colorscale="Blues", zmin=-3, zmax=8, showscale=False, xgap=0, ygap=2,
                             textfont=dict(size=9))]
        for s in range(SEGMENT_BYTES // 4, shown, SEGMENT_BYTES // 4):
            traces.append(go.Scatter(x=[s - 0.5, s - 0.5], y=[-0.5, c["rows"] - 0.5], mode="lines",
                                     line=dict(color="#d62728", dash="dot"), hoverinfo="skip", showlegend=False))
        title = (f"Tile rows of {w} floats: one LDG.128 per lane covers {plural(c['rows'], 'row')}, "
                 f"{plural(c['segments'], '128-byte segment')}, {100 * c['used']:.0f}% of their bytes used")
        steps.append((f"{w} floats", traces, title))
        # 396: the plot's 200 px under a title of three lines and a note of three
        lays.append({"height": 396 + 28 * c["rows"] + style.MODEBAR_PX, "xaxis.range": [-0.5, 4 * WARP - 0.5]})
    active = widths.index(128) if 128 in widths else len(widths) - 1
    fig = style.steps_figure(steps, active=active, layouts=lays)
    fig.update_xaxes(title="float of the tile row", dtick=16, showgrid=False, zeroline=False)
    fig.update_yaxes(title="row", autorange="reversed", dtick=1, showgrid=False, zeroline=False)
    fig = style.finish(fig, steps[active][2], source="one warp, consecutive lanes on consecutive float4 (even "
                       "lanes numbered); red dots: 128-byte segments; each row starts 16-byte aligned", height=396 + 28 * 1,
                       legend=False)
    fig.update_layout(height=lays[active]["height"])
    return fig


# ---------------------------------------------------------------- chapter 8
LAYOUTS = {   # name: how the warp stores element j of its float4 of A into As
    "plain (As[m][k], row-major)": None,
    "transposed (As[k][m])": VARIANTS["split"],
    "transposed + pad 2": VARIANTS["split + pad 2"],
    "transposed + swizzle": VARIANTS["split + swizzle"],
}


def store_access(layout: str, BK: int = 16) -> banks.Access:
    """The first shared store a warp makes of A's tile, in ``layout``. Plain: As is (BM, BK), each
    lane stores its float4 as it came (STS.128). The others: the transposed store of element 0
    of the float4 (32-bit STS), from kernels/08_bank_conflicts.cu."""
    params = LAYOUTS[layout]
    if params is not None:
        return banks.kernel_access("A store", BK=BK, **params)
    words = [[(lane // (BK // 4)) * BK + 4 * (lane % (BK // 4)) + i for i in range(4)] for lane in range(WARP)]
    return banks.Access("A store (plain)", words, width=4, op="store",
                        where=[f"As[{lane // (BK // 4)}][{4 * (lane % (BK // 4))}..+3]" for lane in range(WARP)])


def bank_layouts(BK: int = 16) -> go.Figure:
    """Lanes (rows) x banks (columns) of a warp's store of A's tile, coloured by the wavefront that
    serves each word; a menu over the layouts, each titled with its count of wavefronts."""
    steps, accs = [], [store_access(name, BK) for name in LAYOUTS]
    top = max(max((max(s.values()) for s in banks.schedule(a.words, a.width) if s), default=1) for a in accs)
    for name, acc in zip(LAYOUTS, accs):
        sched = banks.schedule(acc.words, acc.width)
        z = [[None] * SMEM_BANKS for _ in acc.words]
        hover = [[""] * SMEM_BANKS for _ in acc.words]
        for lane, ws in enumerate(acc.words):
            for w in ws:
                z[lane][banks.bank(w)] = sched[lane][w]
                hover[lane][banks.bank(w)] = f"lane {lane}: {acc.where[lane]}, bank {banks.bank(w)}, wavefront {sched[lane][w]}"
        wf, ideal = acc.wavefronts(), acc.ideal()
        verdict = "no conflict" if wf == ideal else f"{wf // ideal}-way conflict"
        title = f"{name}: {acc.instruction}, {plural(wf, 'wavefront')} (min. {ideal}), {verdict}"
        steps.append((name, [go.Heatmap(z=z, hovertext=hover, hoverinfo="text", zmin=1, zmax=max(top, 2), xgap=1,
                                        ygap=1, colorscale="Turbo", colorbar=dict(title=dict(text="wave-<br>front",
                                        side="top"), thickness=12, dtick=1))], title))
    fig = style.steps_figure(steps, active=1)
    fig.update_xaxes(title="bank", dtick=4, range=[-0.5, SMEM_BANKS - 0.5], constrain="domain")
    fig.update_yaxes(title="lane", autorange="reversed", dtick=4)
    return style.finish(fig, steps[1][2], source=f"one warp's first store of A's tile, BK = {BK}, in the bank model "
                        "(helpers.models.banks); hover a cell for its address", height=560, legend=False)


# ---------------------------------------------------------------- chapter 9
def timeline(stages: int, tiles: int = 6, load: float = 0.8) -> list[dict]:
    """When each k-tile's loads and arithmetic run, in units of one tile's arithmetic, with
    ``load`` the time from issuing a tile's loads to their arrival. With one stage a tile's loads
    wait for the arithmetic on the tile before (one buffer); with S stages the loads of tile t
    are issued when the arithmetic of tile t - S + 1 starts (S - 1 tiles in flight), and the
    arithmetic of tile t starts when both its data and the arithmetic before it are done."""
    out = []
    for t in range(tiles):
        if stages == 1:
            start = out[t - 1]["compute_end"] if t else 0.0
        else:
            start = out[t - stages + 1]["compute_start"] if t >= stages - 1 else 0.0
        arrive = start + load
        begin = max(arrive, out[t - 1]["compute_end"] if t else 0.0)
        out.append({"tile": t, "load_start": start, "load_end": arrive, "compute_start": begin,
                    "compute_end": begin + 1.0})
    return out


def stages_timeline(stages=(1, 2, 3, 4), tiles: int = 6, load: float = 0.8) -> go.Figure:
    """One row per k-tile: its loads in flight (light) and its arithmetic (dark), over time; a
    menu over the number of stages. With two stages the loads of tile t + 1 run under the
    arithmetic of tile t."""
    steps = []
    for S in stages:
        tl = timeline(S, tiles, load)
        traces = []
        for r in tl:
            y = f"tile {r['tile']}"
            traces.append(go.Bar(y=[y], x=[r["load_end"] - r["load_start"]], base=[r["load_start"]], orientation="h",
                                 marker=dict(color=LIGHT), name="loads in flight", showlegend=r["tile"] == 0,
                                 hovertext=f"tile {r['tile']}: loads from {r['load_start']:.1f} to {r['load_end']:.1f}",
                                 hoverinfo="text"))
            traces.append(go.Bar(y=[y], x=[1.0], base=[r["compute_start"]], orientation="h",
                                 marker=dict(color=DARK), name="arithmetic (FFMA)", showlegend=r["tile"] == 0,
                                 hovertext=f"tile {r['tile']}: arithmetic from {r['compute_start']:.1f}",
                                 hoverinfo="text"))
        end = tl[-1]["compute_end"]
        title = (f"{plural(S, 'stage')}: {tiles} tiles take {end:g} tile-times, "
                 f"{100 * tiles / end:.0f}% of it arithmetic")
        steps.append((plural(S, "stage"), traces, title))
    active = list(stages).index(2) if 2 in stages else 0
    fig = style.steps_figure(steps, active=active)
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, max(timeline(min(stages), tiles, load)[-1]["compute_end"], 1)])
    return style.finish(fig, steps[active][2], "time (one unit: one tile's arithmetic)", None,
                        f"a model: a tile's loads take {load:g} units from issue to arrival; the loads of tile t "
                        "can start once a stage is free", height=480)
