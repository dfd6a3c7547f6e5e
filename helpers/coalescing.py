"""How many bytes a warp's load moves versus how many it uses, and the order blocks run in.

Taught in the chapter "Global-memory coalescing" (book/03_coalescing.md).

* ``warp_access`` / ``warp_load``: global memory is moved in 32-byte *sectors*, cached
  in 128-byte *lines*. A warp's load instruction costs as many sectors as its 32
  addresses touch, and the L1 handles it one line at a time. Counted here for the
  naive mapping (threadIdx.x walks rows, kernels/01_naive.cu) and the coalesced one
  (threadIdx.x walks columns, kernels/02_coalesced.cu), for any block shape.
* ``trace_schedule``: a copy of the coalesced kernel that writes, for every block,
  the SM it ran on and when it started and ended; ``schedule_summary`` turns that
  into which rows of A and columns of B the blocks running at one moment share.
  ``python -m helpers record --chapter coalescing_schedule`` records it.
"""
from __future__ import annotations

from .record import table_recorder

SECTOR = 32   # bytes: the unit DRAM, L2 and L1 move
LINE = 128    # bytes: the unit L1 tags (4 sectors)
WARP = 32


# ------------------------------------------------------------------ sector model
def lanes(BX: int, BY: int, warp: int = 0) -> list[tuple[int, int]]:
    """(threadIdx.x, threadIdx.y) of the 32 lanes of one warp in a BX x BY block.

    Warps take 32 consecutive linear ids ``threadIdx.y * BX + threadIdx.x``.
    """
    out = []
    for lane in range(WARP):
        t = warp * WARP + lane
        out.append((t % BX, t // BX))
    return out


def element(mapping: str, x: int, y: int) -> tuple[int, int]:
    """(row, col) of C that thread (x, y) of block (0, 0) computes."""
    if mapping == "naive":
        return x, y          # row = threadIdx.x, col = threadIdx.y
    if mapping == "coalesced":
        return y, x          # row = threadIdx.y, col = threadIdx.x
    raise ValueError(f"mapping must be 'naive' or 'coalesced', got {mapping!r}")


def warp_access(mapping: str, operand: str, BX: int, BY: int, K: int = 4096, N: int = 4096,
                k: int = 0, warp: int = 0) -> dict:
    """One warp's access to A or B at step k (a load), or to C (the store).

    Returns the distinct addresses, the 32-byte sectors and 128-byte lines they
    touch, the bytes moved (sectors x 32), the bytes used (distinct addresses x 4)
    and the efficiency used / moved. Matrices are assumed to start on a line.
    """
    addrs = []
    for x, y in lanes(BX, BY, warp):
        row, col = element(mapping, x, y)
        if operand == "A":
            addrs.append(4 * (row * K + k))
        elif operand == "B":
            addrs.append(4 * (k * N + col))
        elif operand == "C":
            addrs.append(4 * (row * N + col))
        else:
            raise ValueError(f"operand must be 'A', 'B' or 'C', got {operand!r}")
    distinct = set(addrs)
    sectors = {a // SECTOR for a in addrs}
    lines = {a // LINE for a in addrs}
    moved = SECTOR * len(sectors)
    used = 4 * len(distinct)
    return {"mapping": mapping, "operand": operand, "block": f"{BX}x{BY}", "distinct_addresses": len(distinct),
            "sectors": len(sectors), "lines": len(lines), "bytes_moved": moved, "bytes_used": used,
            "efficiency": used / moved}


def warp_load(mapping: str, operand: str, BX: int, BY: int, K: int = 4096, N: int = 4096, k: int = 0) -> dict:
    """Sectors touched and bytes used by one warp's load of A or B at step k."""
    return warp_access(mapping, operand, BX, BY, K, N, k)


def per_k_step(mapping: str, BX: int, BY: int, K: int = 4096, N: int = 4096) -> dict:
    """What one warp asks of memory for one k (its load of A plus its load of B).

    ``lines`` is the number of 128-byte lines the two load instructions touch: the
    L1 serves a load one line per pass, so this is the number of passes per k.
    ``outputs`` is the number of elements of C the warp computes (always 32).
    """
    a = warp_access(mapping, "A", BX, BY, K, N)
    b = warp_access(mapping, "B", BX, BY, K, N)
    return {"block": f"{BX}x{BY}", "mapping": mapping, "sectors": a["sectors"] + b["sectors"],
            "lines": a["lines"] + b["lines"], "bytes_moved": a["bytes_moved"] + b["bytes_moved"],
            "bytes_used": a["bytes_used"] + b["bytes_used"], "outputs": WARP,
            "rows": len({element(mapping, x, y)[0] for x, y in lanes(BX, BY)}),
            "cols": len({element(mapping, x, y)[1] for x, y in lanes(BX, BY)})}


def figure(blocks=((32, 32), (64, 4), (32, 8), (16, 16), (8, 8), (4, 64)), K: int = 4096, N: int = 4096):
    """Per warp access: sectors touched, bytes moved vs used, both mappings; a menu over block shapes."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE, with_menu

    steps = []
    for bx, by in blocks:
        traces = []
        rows = [warp_access(m, op, bx, by, K, N) for m in ("naive", "coalesced") for op in ("A", "B", "C")]
        xs = [f"{r['mapping']}<br>{'store of C' if r['operand'] == 'C' else 'load of ' + r['operand']}" for r in rows]
        hover = [f"{r['distinct_addresses']} distinct addresses, {r['sectors']} sectors, {r['lines']} lines<br>"
                 f"{r['bytes_used']} B used of {r['bytes_moved']} B moved: {100 * r['efficiency']:.1f}%" for r in rows]
        traces.append(go.Bar(x=xs, y=[r["bytes_moved"] for r in rows], name="bytes moved (32-byte sectors)",
                             marker_color="#d62728", hovertext=hover, hoverinfo="text",
                             text=[f"{r['sectors']} sect." for r in rows], textposition="outside"))
        traces.append(go.Bar(x=xs, y=[r["bytes_used"] for r in rows], name="bytes the warp uses",
                             marker_color="#2ca02c", hovertext=hover, hoverinfo="text",
                             text=[f"{100 * r['efficiency']:.0f}%" for r in rows], textposition="outside"))
        steps.append((f"block {bx}x{by}", traces))
    fig = with_menu(steps)
    fig.update_layout(template=TEMPLATE, barmode="group", height=440, yaxis_title="bytes per warp instruction",
                      title="One warp, one k: bytes moved vs bytes used (labels: sectors, efficiency)",
                      legend=dict(orientation="h", y=-0.2), margin=dict(t=100))
    fig.update_yaxes(range=[0, 1150])
    return fig


# -------------------------------------------------------- block schedule trace
TRACE_SOURCE = r"""
// sgemm_coalesced from kernels/02_coalesced.cu, plus a trace: thread (0, 0) of each
// block writes the SM it ran on (%smid) and the GPU's nanosecond clock (%globaltimer)
// when the block started and when all its threads had finished.
template <int BX, int BY, int SWAP>
__global__ void sgemm_coalesced_traced(int M, int N, int K,
                                       const float* __restrict__ A,
                                       const float* __restrict__ B,
                                       float* __restrict__ C,
                                       unsigned long long* __restrict__ trace)
{
    unsigned long long t_start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));

    const int block_col = SWAP ? blockIdx.y : blockIdx.x;
    const int block_row = SWAP ? blockIdx.x : blockIdx.y;
    const int col = block_col * BX + threadIdx.x;
    const int row = block_row * BY + threadIdx.y;
    if (row < M && col < N) {                       // no early return: the barrier needs everyone
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }

    __syncthreads();                                // the block is done when its last warp is
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        unsigned int sm;
        unsigned long long t_end;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
        const unsigned long long b = (unsigned long long)blockIdx.y * gridDim.x + blockIdx.x;  // launch order
        trace[3 * b + 0] = sm;
        trace[3 * b + 1] = t_start;
        trace[3 * b + 2] = t_end;
    }
}
"""

TRACE_CONFIGS = ({"BX": 64, "BY": 4, "SWAP": 0}, {"BX": 64, "BY": 4, "SWAP": 1},
                 {"BX": 32, "BY": 32, "SWAP": 0}, {"BX": 32, "BY": 32, "SWAP": 1})


def trace_schedule(params: dict, n: int = 4096):
    """Run the traced kernel once (after a warm-up) on a GPU; return (trace array (blocks, 3), ms)."""
    import cupy
    import numpy as np

    from .check import random_matrix, require_fp32_cublas
    from .registry import get

    require_fp32_cublas()
    spec = get("coalesced")
    p = spec.validate(params)
    expr = f"sgemm_coalesced_traced<{p['BX']}, {p['BY']}, {p['SWAP']}>"
    mod = cupy.RawModule(code=TRACE_SOURCE, options=("-std=c++17",), name_expressions=[expr])
    kern = mod.get_function(expr)
    rng = cupy.random.default_rng(0)
    A, B = random_matrix(n, n, rng), random_matrix(n, n, rng)
    C = cupy.empty((n, n), dtype=cupy.float32)
    grid = spec.grid(p, n, n, n)
    blocks = grid[0] * grid[1] * grid[2]
    trace = cupy.zeros((blocks, 3), dtype=cupy.uint64)
    args = (np.int32(n), np.int32(n), np.int32(n), A, B, C, trace)
    kern(grid, spec.block(p), args)                 # warm-up: module load, clocks
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    kern(grid, spec.block(p), args)
    end.record()
    end.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, end)
    ref = A @ B
    err = float(cupy.linalg.norm(C - ref) / cupy.linalg.norm(ref))
    return cupy.asnumpy(trace), ms, err


def strips(params: dict, M: int, N: int):
    """Grid size and, per block in launch order, (row strip, column strip) of C it computes."""
    import numpy as np

    from .registry import get

    spec = get("coalesced")
    gx, gy, _ = spec.grid(params, M, N, 1)
    b = np.arange(gx * gy)
    bx, by = b % gx, b // gx
    if params["SWAP"]:
        return (gx, gy), bx, by        # blockIdx.x walks rows of C
    return (gx, gy), by, bx


def schedule_summary(trace, params: dict, M: int, N: int, K: int, samples: int = 19) -> dict:
    """What the blocks running at the same moment share, from a trace (blocks, 3): sm, start, end.

    At ``samples`` moments spread over the middle of the run, over the blocks in flight:
    how many there are, how many distinct row strips (rows of A) and column strips
    (columns of B) they cover in total and per SM, and the bytes of A and B those
    strips span. Also the SM of the first 2 x 132 blocks (placement order).
    """
    import numpy as np

    trace = np.asarray(trace, dtype=np.int64)
    sm, t0, t1 = trace[:, 0], trace[:, 1] - trace[:, 1].min(), trace[:, 2] - trace[:, 1].min()
    _, row_strip, col_strip = strips(params, M, N)
    run = float(t1.max())
    out = []
    for s in range(samples):
        t = run * (0.05 + 0.9 * s / max(samples - 1, 1))
        live = np.nonzero((t0 <= t) & (t < t1))[0]
        if live.size == 0:
            continue
        per_sm_rows, per_sm_cols, per_sm_blocks = [], [], []
        for s_id in np.unique(sm[live]):
            mine = live[sm[live] == s_id]
            per_sm_blocks.append(mine.size)
            per_sm_rows.append(np.unique(row_strip[mine]).size)
            per_sm_cols.append(np.unique(col_strip[mine]).size)
        rows_n, cols_n = np.unique(row_strip[live]).size, np.unique(col_strip[live]).size
        out.append({"t_frac": t / run, "in_flight": int(live.size), "row_strips": int(rows_n), "col_strips": int(cols_n),
                    "a_mb": rows_n * params["BY"] * K * 4 / 2**20, "b_mb": cols_n * params["BX"] * K * 4 / 2**20,
                    "sm_blocks": float(np.mean(per_sm_blocks)), "sm_row_strips": float(np.mean(per_sm_rows)),
                    "sm_col_strips": float(np.mean(per_sm_cols))})
    keys = ("in_flight", "row_strips", "col_strips", "a_mb", "b_mb", "sm_blocks", "sm_row_strips", "sm_col_strips")
    med = {k: float(np.median([o[k] for o in out])) if out else 0.0 for k in keys}
    first = np.argsort(t0, kind="stable")
    dur = t1 - t0
    return {"params": dict(params), "M": M, "N": N, "K": K, "blocks": int(len(trace)), "run_ms": run / 1e6,
            "sms": int(np.unique(sm).size), "block_ms_median": float(np.median(dur)) / 1e6,
            "median": med, "samples": out,
            "first_blocks_sm": [int(v) for v in sm[:264]],
            "start_order_is_launch_order": float(np.mean(np.diff(first[:2000]) > 0))}


@table_recorder("coalescing_schedule")
def record_schedule(configs=TRACE_CONFIGS, n: int = 4096, log=print) -> list[dict]:
    """Trace the block schedule of a few coalesced configs at n x n x n (needs a GPU)."""
    rows = []
    for p in configs:
        trace, ms, err = trace_schedule(p, n)
        row = schedule_summary(trace, p, n, n, n)
        row.update(kernel_ms=ms, rel_err=err)
        rows.append(row)
        m = row["median"]
        if log:
            log(f"   {p}: {ms:.2f} ms, {row['blocks']} blocks on {row['sms']} SMs; in flight {m['in_flight']:.0f}, "
                f"per SM {m['sm_blocks']:.1f} blocks over {m['sm_row_strips']:.1f} row / {m['sm_col_strips']:.1f} "
                f"column strips; A {m['a_mb']:.1f} MB, B {m['b_mb']:.1f} MB in flight")
    return rows


def simulate_trace(params: dict, M: int, N: int, sms: int = 132, per_sm: int = 8, block_ns: int = 1000):
    """A toy trace: blocks issued in launch order to SMs round-robin, equal durations.

    What a scheduler that fills every SM in turn would produce; for tests and to
    compare a recorded trace with.
    """
    import numpy as np

    (gx, gy), _, _ = strips(params, M, N)
    blocks = gx * gy
    trace = np.zeros((blocks, 3), dtype=np.int64)
    slots = sms * per_sm
    for b in range(blocks):
        wave, pos = divmod(b, slots)
        trace[b] = (pos % sms, wave * block_ns, (wave + 1) * block_ns)
    return trace


def schedule_figure(rows: list[dict], source: str):
    """Bars: per SM, how many distinct column strips (B) and row strips (A) its resident blocks read."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE, label_source

    def name(r):
        p = r["params"]
        return f"{p['BX']}x{p['BY']}, {'SWAP=1 (x walks M)' if p['SWAP'] else 'SWAP=0 (x walks N)'}"

    xs = [name(r) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[r["median"]["sm_blocks"] for r in rows], name="blocks resident per SM",
                         marker_color="#7f7f7f"))
    fig.add_trace(go.Bar(x=xs, y=[r["median"]["sm_col_strips"] for r in rows], name="distinct column strips (of B) per SM",
                         marker_color="#1f77b4"))
    fig.add_trace(go.Bar(x=xs, y=[r["median"]["sm_row_strips"] for r in rows], name="distinct row strips (of A) per SM",
                         marker_color="#ff7f0e"))
    fig.update_layout(template=TEMPLATE, barmode="group", height=440, yaxis_title="count (median over the run)",
                      title="Blocks that share an SM: which strips of A and B they read",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return label_source(fig, source)


# ------------------------------------------------------- the L1 line ceiling
def l1_ceiling(BX: int, BY: int, sm_count: int = 132, clock_ghz: float = 1.98) -> float:
    """TFLOP/s if each SM's L1 serves one 128-byte line per cycle and nothing else limits.

    A warp does 32 multiply-adds per k and its two loads touch ``per_k_step(...)["lines"]``
    lines; the L1 data path of an SM (128 bytes per cycle) handles one line per cycle,
    a broadcast of a single float included. So an SM finishes at most
    32 / lines multiply-adds per cycle.
    """
    lines = per_k_step("coalesced", BX, BY)["lines"]
    return sm_count * clock_ghz * 1e9 * 2 * WARP / lines / 1e12


def _label(p: dict) -> str:
    return f"{p['BX']}x{p['BY']}"


def blocks_figure(rows: list[dict], source: str, title: str = "Coalesced kernel: block shape and grid order"):
    """Bars of TFLOP/s per block shape, one colour per grid order, a slider over n.

    Hover a bar for its time band; cuBLAS at that size is the dashed line.
    """
    import plotly.graph_objects as go

    from .plots import CUBLAS_COLOUR, PALETTE, _hover, with_slider

    rows = [r for r in rows if r["kernel"] == "coalesced" and r["M"] == r["N"] == r["K"]]
    sizes = sorted({r["M"] for r in rows})
    order = sorted({(r["params"]["BX"], r["params"]["BY"]) for r in rows}, key=lambda s: (s[0] / s[1], s[0]))
    steps = []
    for n in sizes:
        sel = [r for r in rows if r["M"] == n]
        shapes = [s for s in order if any((r["params"]["BX"], r["params"]["BY"]) == s for r in sel)]
        xs = [f"{bx}x{by}" for bx, by in shapes]
        traces = []
        for swap, colour in ((0, PALETTE[0]), (1, PALETTE[1])):
            by_shape = {(r["params"]["BX"], r["params"]["BY"]): r for r in sel if r["params"]["SWAP"] == swap}
            ys = [by_shape[s]["tflops"] if s in by_shape else None for s in shapes]
            traces.append(go.Bar(x=xs, y=ys, name=f"SWAP={swap}: blockIdx.x walks {'rows (M)' if swap else 'columns (N)'}",
                                 marker_color=colour, text=[f"{y:.2f}" if y else "" for y in ys], textposition="outside",
                                 hovertext=[_hover(by_shape[s]) if s in by_shape else "not measured" for s in shapes],
                                 hoverinfo="text"))
        traces.append(go.Scatter(x=xs, y=[sel[0]["cublas_tflops"]] * len(xs), mode="lines", name="cuBLAS",
                                 line=dict(color=CUBLAS_COLOUR, dash="dash"), hoverinfo="y"))
        steps.append((f"n={n}", traces))
    fig = with_slider(steps, prefix="size: ", active=len(steps) - 1)
    fig.update_layout(barmode="group")
    from .plots import _layout
    fig = _layout(fig, title, "block BX x BY (BX along a row of C), narrow to wide", "TFLOP/s", source)
    top = max(r["tflops"] for r in rows) * 1.25 if rows else 1
    fig.update_yaxes(range=[0, top])
    return fig


def ceiling_figure(rows: list[dict], source: str, n: int | None = None, sm_count: int = 132, clock_ghz: float = 1.98):
    """Measured TFLOP/s per block shape (best grid order) next to the L1-line ceiling."""
    import plotly.graph_objects as go

    from .plots import PALETTE, TEMPLATE, _layout

    rows = [r for r in rows if r["kernel"] == "coalesced" and r["M"] == r["N"] == r["K"]]
    n = n or max(r["M"] for r in rows)
    best: dict = {}
    for r in rows:
        if r["M"] == n:
            s = (r["params"]["BX"], r["params"]["BY"])
            if s not in best or r["tflops"] > best[s]["tflops"]:
                best[s] = r
    shapes = sorted(best, key=lambda s: (s[0] / s[1], s[0]))
    xs = [f"{bx}x{by}" for bx, by in shapes]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[l1_ceiling(*s, sm_count, clock_ghz) for s in shapes], name="ceiling: one L1 line per cycle",
                         marker_color="#dddddd", text=[f"{per_k_step('coalesced', *s)['lines']} lines/k" for s in shapes],
                         textposition="inside"))
    fig.add_trace(go.Bar(x=xs, y=[best[s]["tflops"] for s in shapes], name="measured (better grid order)",
                         marker_color=PALETTE[0], text=[f"{best[s]['tflops']:.2f}" for s in shapes], textposition="outside"))
    fig.update_layout(barmode="overlay", template=TEMPLATE)
    return _layout(fig, f"n = {n}: measured vs the L1 ceiling (lines each warp touches per k)", "block BX x BY",
                   "TFLOP/s", source)


def swap_gain(rows: list[dict]) -> list[dict]:
    """Per (n, block shape) measured with both grid orders: the gain of SWAP=1 over SWAP=0."""
    pairs: dict = {}
    for r in rows:
        if r["kernel"] != "coalesced" or not r["M"] == r["N"] == r["K"]:
            continue
        key = (r["M"], r["params"]["BX"], r["params"]["BY"])
        pairs.setdefault(key, {})[r["params"]["SWAP"]] = r
    out = []
    for (n, bx, by), d in sorted(pairs.items()):
        if 0 in d and 1 in d:
            out.append({"n": n, "BX": bx, "BY": by, "tflops_0": d[0]["tflops"], "tflops_1": d[1]["tflops"],
                        "gain_pct": 100 * (d[1]["tflops"] / d[0]["tflops"] - 1),
                        "rereads_b_over_a": bx / by})
    return out


def swap_figure(rows: list[dict], source: str):
    """Gain of SWAP=1 over SWAP=0 (%) per block shape, ordered by BX / BY; one colour per n."""
    import plotly.graph_objects as go

    from .plots import PALETTE, _layout

    gains = swap_gain(rows)
    shapes = sorted({(g["BX"], g["BY"]) for g in gains}, key=lambda s: (s[0] / s[1], s[0]))
    xs = [f"{bx}x{by}<br>B/A = {bx / by:g}" for bx, by in shapes]
    fig = go.Figure()
    for i, n in enumerate(sorted({g["n"] for g in gains})):
        by_shape = {(g["BX"], g["BY"]): g for g in gains if g["n"] == n}
        ys = [by_shape[s]["gain_pct"] if s in by_shape else None for s in shapes]
        fig.add_trace(go.Bar(
            x=xs, y=ys, name=f"n={n}", marker_color=PALETTE[i % len(PALETTE)],
            text=[f"{y:+.1f}%" if y is not None else "" for y in ys], textposition="outside",
            hovertext=[f"{s[0]}x{s[1]}, n={n}: {by_shape[s]['tflops_0']:.2f} -> {by_shape[s]['tflops_1']:.2f} TFLOP/s"
                       if s in by_shape else "not measured" for s in shapes], hoverinfo="text"))
    fig.update_layout(barmode="group")
    vals = [g["gain_pct"] for g in gains] or [0]
    fig.update_yaxes(range=[min(0, min(vals)) - 2, max(0, max(vals)) * 1.2 + 1])
    return _layout(fig, "Swapping the grid's M and N: gain of SWAP=1 over SWAP=0",
                   "block BX x BY; B/A = BX/BY = how much more often each piece of B is re-read than each piece of A",
                   "gain (%)", source)
