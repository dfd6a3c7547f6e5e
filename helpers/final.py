"""The final kernel as a library call: pick a config per shape, then launch.

``choose_config(M, N, K)`` returns the template parameters of kernels/10_final.cu
for one problem shape: a small table of shapes measured by ``scripts/tune_final.py``
on the H200, and otherwise rules derived from the same measurements (how many
output tiles the shape has against the 132 SMs, how long K is). ``matmul(A, B)``
uses it. Split-K is part of the kernel (blocks along ``blockIdx.z`` that add their
partial tiles in a fixed order), so every choice is a single launch that
``helpers.bench.measure`` can time like any other kernel.

Taught in the chapter "The final kernel" (book/12_final.md).
"""
from __future__ import annotations

from .registry import cdiv

SMS = 132  # H100 / H200 SXM

# Blocks of 128 x 256 (8 warps of 64 x 64, 16 x 8 per thread), k-slices of 32 in two
# stages: one block per SM (248 registers per thread).
BIG = dict(BM=128, BN=256, BK=32, WM=64, WN=64, TM=16, TN=8, STAGES=2, SPLITK=1, GROUP=8)
# Blocks of 128 x 128 (4 warps of 64 x 64): two per SM, finer grain.
MID = dict(BIG, BN=128, BK=16, STAGES=4)
# Blocks of 128 x 64 (4 warps of 64 x 32, 8 x 8 per thread): mid-sized products.
NARROW = dict(BIG, BN=64, WN=32, TM=8, TN=8, BK=16, STAGES=4)
# Blocks of 64 x 64 (4 warps of 32 x 32, 4 x 8 per thread): for small products.
SMALL = dict(BIG, BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, BK=8, STAGES=3)

# Shapes measured on the H200 (scripts/tune_final.py, the run of record): exact
# (M, N, K) -> params. Percentages are of cuBLAS timed in the same run.
TUNED: dict[tuple[int, int, int], dict] = {
    (4096, 4096, 4096): dict(BIG),                          # 93% of cuBLAS
    (8192, 8192, 8192): dict(BIG),                          # 96%
    (1000, 3000, 777): dict(NARROW),                        # 102%
    (4097, 4097, 4097): dict(NARROW),                       # 87% (no float4 path: N % 4 != 0)
    (3000, 3000, 3000): dict(NARROW),                       # 98%
    (2048, 2048, 8192): dict(MID),                          # 87%
    (8192, 128, 8192): dict(MID, SPLITK=4),                 # 82%
    (128, 8192, 8192): dict(MID, SPLITK=4),                 # 83%
    (512, 512, 512): dict(SMALL, BK=16, SPLITK=2),          # above cuBLAS
}


def _waves(tiles: int, per_sm: int) -> float:
    """Fraction of the last wave that is busy: 1.0 means no idle SMs at the end."""
    slots = SMS * per_sm
    return tiles / (cdiv(tiles, slots) * slots)


def _split(tiles: int, per_sm: int, k_tiles: int, most: int = 8) -> int:
    """Smallest split of K that fills the GPU, keeping at least 16 k-tiles per block."""
    from .registry import get

    allowed = get("final").params[[p.name for p in get("final").params].index("SPLITK")].allowed
    best = 1
    for s in allowed:
        if s > most or k_tiles // s < 16:
            break
        best = s
        if tiles * s >= 0.9 * SMS * per_sm:
            break
    return best


def choose_config(M: int, N: int, K: int) -> dict:
    """Template parameters of the final kernel for an M x N x K product."""
    if (M, N, K) in TUNED:
        return dict(TUNED[(M, N, K)])
    big_tiles = cdiv(M, 128) * cdiv(N, 256)
    mid_tiles = cdiv(M, 128) * cdiv(N, 128)
    if big_tiles >= 2 * SMS and _waves(big_tiles, 1) >= 0.85:
        return dict(BIG)
    if mid_tiles >= SMS:
        return dict(MID)
    if M * N > 128 * 128 * 16 or min(M, N) <= 128:
        # few output tiles: split K so that the blocks fill the SMs
        return dict(MID, SPLITK=_split(mid_tiles, 2, cdiv(K, 8)))
    small_tiles = cdiv(M, 64) * cdiv(N, 64)
    return dict(SMALL, SPLITK=_split(small_tiles, 4, cdiv(K, 8)))


def matmul(A, B, params: dict | None = None):
    """C = A @ B with the final kernel and the config ``choose_config`` picks for the shape."""
    import cupy
    import numpy as np

    from .launch import check_operands, prepare

    check_operands(A, B)
    (M, K), N = A.shape, B.shape[1]
    launcher = prepare("final", M, N, K, params or choose_config(M, N, K))
    C = cupy.empty((M, N), dtype=np.float32)   # every element is written (split 0 stores)
    launcher(A, B, C)
    return C


# ====================================================================== figures
# Builders for the chapters "Warp tiling" (book/10_warptiling.md) and "The final
# kernel" (book/12_final.md).

def warp_layout(p: dict) -> dict:
    """The warp-tiling geometry of a warptiling/final config, as the kernels compute it."""
    warps_m, warps_n = p["BM"] // p["WM"], p["BN"] // p["WN"]
    wmiter, wniter = p["TM"] // 4, p["TN"] // 4
    return dict(warps_m=warps_m, warps_n=warps_n, threads=warps_m * warps_n * 32,
                wmiter=wmiter, wniter=wniter, lanes_m=p["WM"] // p["TM"], lanes_n=p["WN"] // p["TN"],
                sub_m=p["WM"] // wmiter, sub_n=p["WN"] // wniter)


def thread_cells(p: dict, warp: int, lane: int) -> tuple[list[int], list[int]]:
    """Rows and columns of the block tile that (warp, lane) computes."""
    g = warp_layout(p)
    wm0, wn0 = (warp // g["warps_n"]) * p["WM"], (warp % g["warps_n"]) * p["WN"]
    tr, tc = lane // g["lanes_n"], lane % g["lanes_n"]
    rows = [wm0 + i * g["sub_m"] + 4 * tr + a for i in range(g["wmiter"]) for a in range(4)]
    cols = [wn0 + j * g["sub_n"] + 4 * tc + b for j in range(g["wniter"]) for b in range(4)]
    return rows, cols


def _rects(boxes):
    """One Scatter path through several rectangles (x0, y0, x1, y1), separated by None."""
    xs, ys = [], []
    for x0, y0, x1, y1 in boxes:
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y0, y0, y1, y1, y0, None]
    return xs, ys


def tiling_figure(configs: list[dict], kernel: str = "warptiling"):
    """Block tile -> warp tiles -> thread sub-tiles, drawn to scale; a menu picks the config.

    Grey: the block tile with its warp tiles; blue: warp 0's sub-tiles (one per
    WMITER x WNITER iteration); red: the 4 x 4 pieces lane 0 computes; orange: lane 1.
    """
    import plotly.graph_objects as go

    from . import plots
    from .registry import get

    spec = get(kernel)
    steps = []
    for p in configs:
        p = spec.validate(p)
        g = warp_layout(p)
        traces = []
        warps = [(wn * p["WN"], wm * p["WM"], (wn + 1) * p["WN"], (wm + 1) * p["WM"])
                 for wm in range(g["warps_m"]) for wn in range(g["warps_n"])]
        x, y = _rects(warps)
        traces.append(go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor="rgba(200,200,200,0.25)",
                                 line=dict(color="#888", width=2), name=f"{len(warps)} warp tiles {p['WM']}x{p['WN']}",
                                 hoverinfo="skip"))
        subs = [(j * g["sub_n"], i * g["sub_m"], (j + 1) * g["sub_n"], (i + 1) * g["sub_m"])
                for i in range(g["wmiter"]) for j in range(g["wniter"])]
        x, y = _rects(subs)
        traces.append(go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor="rgba(31,119,180,0.12)",
                                 line=dict(color=plots.PALETTE[0], width=1),
                                 name=f"warp 0: {g['wmiter']}x{g['wniter']} sub-tiles of {g['sub_m']}x{g['sub_n']}",
                                 hoverinfo="skip"))
        for lane, colour in ((0, "#d62728"), (1, "#ff7f0e")):
            rows, cols = thread_cells(p, 0, lane)
            boxes = [(c, r, c + 4, r + 4) for r in rows[::4] for c in cols[::4]]
            x, y = _rects(boxes)
            traces.append(go.Scatter(x=x, y=y, fill="toself", mode="lines", fillcolor=colour,
                                     line=dict(color=colour, width=1),
                                     name=f"lane {lane}: {p['TM']}x{p['TN']} results in 4x4 pieces",
                                     hovertext=f"lane {lane}: rows {rows[::4]}, columns {cols[::4]} (+0..3)",
                                     hoverinfo="text"))
        label = f"{spec.label_of(p)} ({g['threads']} threads)"
        steps.append((label, traces))
    fig = plots.with_menu(steps)
    fig.update_yaxes(autorange="reversed", title="row of the block tile (M)", scaleanchor="x")
    fig.update_xaxes(title="column of the block tile (N)", side="top")
    fig.update_layout(template=plots.TEMPLATE, height=620, margin=dict(t=110),
                      title="Block tile, warp tiles, and what one lane computes",
                      legend=dict(orientation="h", y=-0.05, yanchor="top"))
    return fig


def lds_wavefronts(chunk_addresses) -> int:
    """Shared-memory wavefronts for one LDS.128 of a warp, in a simple bank model.

    Each lane reads a 16-byte chunk; equal chunks are broadcast; a wavefront serves
    at most one chunk per group of 4 banks (8 groups = 128 bytes).
    """
    groups: dict = {}
    for a in set(chunk_addresses):
        groups.setdefault((a // 16) % 8, set()).add(a)
    return max(len(v) for v in groups.values())


def smem_model(kernel: str, params: dict | None = None) -> dict:
    """Per warp and per k step: LDS.128 per thread, wavefronts, FFMA per thread.

    Covers the warp-tiled kernels (warptiling, final) and the 128 x 128, 8 x 8 per
    thread kernel of the double-buffering chapter (threads in a 16 x 16 grid, each
    owning two 4-row and two 4-column groups 64 apart).
    """
    from .registry import get

    p = get(kernel).resolve(params)
    if kernel in ("warptiling", "final"):
        g = warp_layout(p)
        lds_a, lds_b, ffma = g["wmiter"], g["wniter"], p["TM"] * p["TN"]
        a_addr = lambda i, lane: 4 * (i * g["sub_m"] + 4 * (lane // g["lanes_n"]))
        b_addr = lambda j, lane: 4 * (j * g["sub_n"] + 4 * (lane % g["lanes_n"]))
    else:   # 08_double_buffering.cu: tcol = tid % 16, trow = tid / 16, groups 64 apart
        lds_a, lds_b, ffma = 2, 2, 64
        a_addr = lambda g_, lane: 4 * (4 * (lane // 16) + 64 * g_)
        b_addr = lambda g_, lane: 4 * (4 * (lane % 16) + 64 * g_)
    waves = sum(lds_wavefronts([a_addr(i, l) for l in range(32)]) for i in range(lds_a))
    waves += sum(lds_wavefronts([b_addr(j, l) for l in range(32)]) for j in range(lds_b))
    distinct = sum(len({a_addr(i, l) for l in range(32)}) for i in range(lds_a))
    distinct += sum(len({b_addr(j, l) for l in range(32)}) for j in range(lds_b))
    return dict(lds_per_thread=lds_a + lds_b, ffma_per_thread=ffma, wavefronts=waves,
                distinct_bytes=16 * distinct, waves_per_1k_ffma=1000 * waves / (32 * ffma),
                ffma_share=ffma / (ffma + lds_a + lds_b))


def smem_figure(items: list[tuple[str, str, dict]]):
    """Bars: shared-memory wavefronts per 1000 FFMA (bank model) for named configs."""
    import plotly.graph_objects as go

    from . import plots

    names = [n for n, _, _ in items]
    models = [smem_model(k, p) for _, k, p in items]
    fig = go.Figure(go.Bar(
        x=names, y=[m["waves_per_1k_ffma"] for m in models], marker_color=plots.PALETTE[0],
        text=[f"{m['waves_per_1k_ffma']:.2f}" for m in models], textposition="outside",
        hovertext=[f"per warp and k step: {m['lds_per_thread']} LDS.128 per thread, {m['wavefronts']} wavefronts, "
                   f"{m['distinct_bytes']} distinct bytes, {m['ffma_per_thread']} FFMA per thread "
                   f"({100 * m['ffma_share']:.0f}% of the two)" for m in models], hoverinfo="text"))
    fig.update_layout(template=plots.TEMPLATE, height=420, title="Shared-memory work per 1000 FFMA (bank model)",
                      xaxis_title="kernel config", yaxis_title="wavefronts per 1000 warp FFMA")
    return plots.label_source(fig, "model: distinct 16-byte chunks per LDS.128, one per 4-bank group per wavefront")


# The chapter defaults that the final chapter lines up, in book order.
STEPS = [
    ("naive", "naive", "naive"),
    ("coalesced", "coalescing", "coalesced"),
    ("shared tiles", "smem_tiling", "smem_tiling"),
    ("1D thread tile", "thread_tile_1d", "thread_tile_1d"),
    ("2D thread tile", "thread_tile_2d", "thread_tile_2d"),
    ("float4", "vectorized", "vectorized"),
    ("bank conflicts", "bank_conflicts", "bank_conflicts"),
    ("double buffering", "double_buffering", "double_buffering"),
    ("warp tiling", "warptiling", "warptiling"),
    ("final", "final", "final"),
]


def step_rows(n: int = 4096) -> tuple[dict, str]:
    """Each chapter's default kernel at n x n x n: recorded, or measured now on a GPU.

    Returns ({step name: row}, source). Chapters without data are left out.
    """
    from . import plots
    from .data import DataError, results
    from .mode import is_live
    from .registry import get

    out, source = {}, ""
    for name, chapter, kernel in STEPS:
        try:
            spec = get(kernel)
            sweep = [(spec, spec.defaults(), (n, n, n))] if is_live() else None
            rs = results(chapter, sweep=sweep)
            out[name] = plots.default_row(rs, kernel, n)
            source = rs.source
        except (KeyError, DataError):
            continue
    return out, source


def waterfall_figure(named_rows: dict, source: str, title: str = "What each chapter added, n = 4096"):
    """A waterfall of TFLOP/s from step to step, with cuBLAS (same runs) as a line."""
    import plotly.graph_objects as go

    from . import plots

    names = list(named_rows)
    vals = [named_rows[n]["tflops"] for n in names]
    deltas = [vals[0]] + [b - a for a, b in zip(vals, vals[1:])]
    fig = go.Figure(go.Waterfall(
        x=names, y=deltas, measure=["absolute"] + ["relative"] * (len(names) - 1),
        text=[f"{v:.1f}" for v in vals], textposition="outside",
        hovertext=[f"{n}: {v:.2f} TFLOP/s ({plots.percent_of_cublas(named_rows[n]):.0f}% of cuBLAS), "
                   f"{d:+.2f} over the step before" for n, v, d in zip(names, vals, deltas)],
        hoverinfo="text", connector=dict(line=dict(color="#bbb")),
        increasing=dict(marker=dict(color=plots.PALETTE[2])), decreasing=dict(marker=dict(color=plots.PALETTE[3]))))
    cub = sum(named_rows[n]["cublas_tflops"] for n in names) / len(names)
    fig.add_trace(go.Scatter(x=names, y=[cub] * len(names), mode="lines", name="cuBLAS (mean of the same runs)",
                             line=dict(color=plots.CUBLAS_COLOUR, dash="dash")))
    fig.update_layout(template=plots.TEMPLATE, title=title, height=480, yaxis_title="TFLOP/s", showlegend=True,
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return plots.label_source(fig, source)


def suite_rows(rs, shapes) -> list[dict]:
    """The per-shape choice's row for each shape (the row whose params choose_config picks)."""
    out = []
    for s in shapes:
        want = choose_config(*s)
        rows = [r for r in rs.rows if r["kernel"] == "final" and (r["M"], r["N"], r["K"]) == tuple(s)
                and all(r["params"].get(k) == v for k, v in want.items())]
        if not rows:   # data recorded with an older table: the fastest final row at that shape
            rows = sorted((r for r in rs.rows if r["kernel"] == "final" and (r["M"], r["N"], r["K"]) == tuple(s)),
                          key=lambda r: -r["tflops"])
        if rows:
            out.append(rows[0])
    return out


def square_row(rs, n: int) -> dict:
    """The final kernel's row at n x n x n, with the config :func:`choose_config` picks.

    A quick live run sweeps small sizes only: there the kernel is measured at n now,
    so a figure labelled n never shows another size.
    """
    rows = suite_rows(rs, [(n, n, n)])
    if rows:
        return rows[0]
    if rs.live:
        from .data import results
        from .registry import get

        return results("final", sweep=[(get("final"), choose_config(n, n, n), (n, n, n))]).rows[0]
    raise KeyError(f"no row for the final kernel at n={n} in {rs.source}")


def geomean_pct(rows: list[dict]) -> float:
    """Geometric mean of TFLOP/s as a percentage of cuBLAS at the same shape."""
    import math

    return 100 * math.exp(sum(math.log(r["tflops"] / r["cublas_tflops"]) for r in rows) / len(rows))


def suite_figure(rows: list[dict], source: str, title: str = "The shape suite: final kernel vs cuBLAS"):
    """Grouped bars per shape (final, cuBLAS), labelled with % of cuBLAS."""
    import plotly.graph_objects as go

    from . import plots
    from .registry import get

    names = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[r["tflops"] for r in rows], name="final (per-shape config)",
                         marker_color=[plots.PALETTE[0] if r["ok"] else "#d62728" for r in rows],
                         text=[f"{plots.percent_of_cublas(r):.0f}%" for r in rows], textposition="outside",
                         hovertext=[f"{get('final').label_of(r['params'])}<br>{r['tflops']:.2f} TFLOP/s"
                                    for r in rows], hoverinfo="text"))
    fig.add_trace(go.Bar(x=names, y=[r["cublas_tflops"] for r in rows], name="cuBLAS, same run",
                         marker_color="#999"))
    fig.update_layout(template=plots.TEMPLATE, title=title, barmode="group", height=460,
                      yaxis_title="TFLOP/s", xaxis_title="M x N x K",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return plots.label_source(fig, source)


def pipeline_figure(stages_list=(2, 3, 4), tiles: int = 8):
    """Which shared stage holds which k-tile over time, for several pipeline depths.

    Each row is a stage; a bar is one tile's lifetime in it: copying (light) from the
    iteration its copies are issued to the one it is computed on (dark).
    """
    import plotly.graph_objects as go

    from . import plots

    steps = []
    for S in stages_list:
        traces = []
        for t in range(tiles):
            issue = max(0, t - (S - 1))       # tile t is issued at the start of iteration t - (S-1)
            stage = t % S
            colour = plots.PALETTE[t % len(plots.PALETTE)]
            traces.append(go.Bar(y=[f"stage {stage}"], x=[t - issue], base=[issue], orientation="h",
                                 marker=dict(color=colour, opacity=0.35), showlegend=False,
                                 hovertext=f"tile {t}: copies in flight from iteration {issue}", hoverinfo="text",
                                 text=f"copy {t}", textposition="inside"))
            traces.append(go.Bar(y=[f"stage {stage}"], x=[1], base=[t], orientation="h",
                                 marker=dict(color=colour), showlegend=False,
                                 hovertext=f"tile {t}: computed in iteration {t}", hoverinfo="text",
                                 text=f"FFMA {t}", textposition="inside"))
        steps.append((f"{S} stages", traces))
    fig = plots.with_slider(steps, prefix="pipeline: ", active=1)
    fig.update_layout(template=plots.TEMPLATE, barmode="overlay", height=360,
                      title="cp.async pipeline: copies in flight (light) and compute (dark) per stage",
                      xaxis_title="main-loop iteration (one k-tile each)")
    fig.update_yaxes(autorange="reversed")
    return fig


def hot_loop_counts(kernel: str, params: dict | None = None) -> dict:
    """Instruction mix of the main loop as interior tiles run it (offline, sm_90).

    The kernels branch (uniformly) between an unguarded path for tiles wholly inside
    the matrices and a guarded one for edge tiles; a static count of the loop would mix
    both. This compiles the kernel with the edge branches forced off, finds the main
    loop in the SASS and counts its opcodes: the FFMA share is what the SM issues
    per k-tile in the common case.
    """
    from collections import Counter

    from .compile import BASE_OPTIONS
    from .registry import get
    from .resources import _compile_cubin, _cuobjdump, inner_loop, instructions

    spec = get(kernel)
    full = spec.validate(params)
    src = spec.source()
    for guard in ("if (a_inside && k_inside)", "if (b_inside && k_inside)", "if (fast)"):
        src = src.replace(guard, "if (true)")
    cubin, _, _ = _compile_cubin(src, spec.file, spec.name_expression(full), BASE_OPTIONS + tuple(spec.options), "sm_90")
    ops = Counter(op for _, op in instructions(inner_loop(_cuobjdump(cubin, "--dump-sass"))))
    total = sum(ops.values())
    ffma = sum(v for k, v in ops.items() if k.startswith("FFMA"))
    lds128 = ops.get("LDS.128", 0)
    lds_other = sum(v for k, v in ops.items() if k.startswith("LDS") and k != "LDS.128")
    return dict(total=total, ffma=ffma, lds128=lds128, lds_other=lds_other, other=total - ffma - lds128 - lds_other,
                ffma_share=ffma / total if total else 0.0, ops=dict(ops))


def first_wave_bytes(p: dict, M: int, N: int, K: int, slots: int = SMS) -> float:
    """Distinct bytes of A and B that the first ``slots`` blocks of the grid read.

    Blocks that run together share A panels (same block-row) and B panels (same
    block-column); fewer distinct panels per wave means more hits in L2. Uses the
    kernel's rasterisation (GROUP) and ignores split-K.
    """
    gx, gy = cdiv(N, p["BN"]), cdiv(M, p["BM"])
    rows, cols = set(), set()
    for pid in range(min(slots, gx * gy)):
        by, bx = divmod(pid, gx)
        if p["GROUP"]:
            G = p["GROUP"]
            per = G * gx
            g, r = divmod(pid, per)
            here = min(gy - g * G, G)
            tm, tn = g * G + r % here, r // here
        else:
            tm, tn = by, bx
        rows.add(tm)
        cols.add(tn)
    return 4.0 * K * (len(rows) * p["BM"] + len(cols) * p["BN"])


def occupancy_slots(p: dict) -> int:
    """Blocks of this config that fit on one SM (offline compile + occupancy rules)."""
    from .occupancy import occupancy
    from .registry import get
    from .resources import resources

    spec = get("final")
    r = resources(spec, p)
    return occupancy(spec.block(p)[0], r.registers, r.smem).blocks_per_sm


def wave_table(shapes, choose=None) -> list[dict]:
    """Per shape: output tiles, blocks (with split-K), resident slots and how full the last wave is."""
    choose = choose or choose_config
    out = []
    for M, N, K in shapes:
        p = choose(M, N, K)
        tiles = cdiv(M, p["BM"]) * cdiv(N, p["BN"])
        blocks = tiles * p["SPLITK"]
        per_sm = occupancy_slots(p)
        slots = SMS * per_sm
        waves = cdiv(blocks, slots)
        out.append(dict(shape=f"{M}x{N}x{K}", config=p, tiles=tiles, blocks=blocks, per_sm=per_sm,
                        waves=waves, busy=blocks / (waves * slots)))
    return out
