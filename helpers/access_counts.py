"""Memory accesses per result of C: as the source is written, and as the compiler emits them.

Taught in the chapter "1D thread tiles". Two views of the same kernel:

* ``per_result``: loads per element of C that the source code asks for, derived
  from the tile parameters. Over a whole K loop, a block tile of BM x BN results
  loads (BM + BN) * K floats from global memory, so each result costs
  ``K * (1/BM + 1/BN)`` global loads; a thread with TM results reads one value of
  B and TM values of A from shared memory per k, ``K * (TM + 1) / TM`` per result.
  The shared-memory kernel of the previous chapter is the case BM = BN = TILE,
  TM = 1: ``2K / TILE`` global and ``2K`` shared loads.
* ``sass_counts``: the instructions of the compiled inner loop (sm_90, offline:
  NVRTC + cuobjdump, no GPU), counted by opcode: what actually runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .registry import get


# ------------------------------------------------------------- source level
def tile_of(kernel: str, params: dict | None) -> dict:
    """BM, BN, BK, TM of a tiled kernel config (the smem kernel as TM = 1)."""
    spec = get(kernel)
    p = spec.resolve(params)
    if kernel.startswith("smem_tiling"):
        return {"BM": p["TILE"], "BN": p["TILE"], "BK": p["TILE"], "TM": 1, "LOOP": 1}
    if kernel == "thread_tile_1d":
        return {k: p[k] for k in ("BM", "BN", "BK", "TM", "LOOP")}
    raise ValueError(f"no access model for {kernel!r}; this module covers smem_tiling and thread_tile_1d")


def per_result(kernel: str, params: dict | None, K: int, as_written: bool = False) -> dict:
    """Loads per element of C over the whole K loop, in floats.

    ``as_written=True`` counts the source's shared reads literally: the dot-product
    order (LOOP=0) re-reads B for every result, 2 per k.
    """
    t = tile_of(kernel, params)
    glob = K * (t["BM"] + t["BN"]) / (t["BM"] * t["BN"])
    if as_written and t["LOOP"] == 0:
        shared = 2 * K
    else:
        shared = K * (t["TM"] + 1) / t["TM"]
    return {"global": glob, "shared": shared, "ffma": K,
            "shared_per_ffma": shared / K, "ffma_per_global": K / glob}


def as_fraction_of_K(x: float, K: int) -> str:
    """1024 of K=4096 -> 'K/4'; 4608 -> '9K/8'."""
    from fractions import Fraction

    f = Fraction(x / K).limit_denominator(256)
    if f.denominator == 1:
        return "K" if f.numerator == 1 else f"{f.numerator}K"
    return f"K/{f.denominator}" if f.numerator == 1 else f"{f.numerator}K/{f.denominator}"


# ---------------------------------------------------------------- SASS level
@dataclass
class LoopCounts:
    """Opcode counts of one compiled inner loop, and what they mean per k and per result."""

    kernel: str
    params: dict
    counts: dict          # opcode -> instructions in one pass of the loop
    k_per_pass: int       # k values one pass covers (BK, or a multiple if the K loop was unrolled)
    results_per_thread: int

    def per_k(self, op: str) -> float:
        return self.counts.get(op, 0) / self.k_per_pass

    @property
    def shared_load_instructions(self) -> int:
        return sum(v for k, v in self.counts.items() if k.startswith("LDS"))

    @property
    def shared_floats(self) -> int:
        """Floats the shared loads fetch (LDS.128 = 4, LDS.64 = 2, LDS = 1)."""
        width = {"LDS": 1, "LDS.64": 2, "LDS.128": 4}
        return sum(v * width.get(k, 1) for k, v in self.counts.items() if k.startswith("LDS"))


def sass_counts(kernel: str, params: dict | None = None) -> LoopCounts:
    """Count FFMA, LDS, LDS.64, LDS.128, LDG, STS and barriers in the kernel's inner loop."""
    from .resources import inner_loop, opcode_counts, sass

    spec = get(kernel)
    full = spec.validate(params)
    loop = inner_loop(sass(spec, full))
    counts = dict(opcode_counts(loop, ("FFMA", "LDS", "LDS.64", "LDS.128", "LDG", "STS")))
    counts["BAR"] = len(re.findall(r"\bBAR\.SYNC", loop))
    t = tile_of(kernel, full)
    per_pass = counts.get("FFMA", 0) // t["TM"] if t["TM"] else 0   # one FFMA per k per result
    return LoopCounts(kernel, full, counts, max(per_pass, 1), t["TM"])


def loop_order_table(params: dict | None = None) -> list[dict]:
    """The two loop orders of the 1D kernel: loads as written vs instructions compiled."""
    rows = []
    for loop in (0, 1):
        p = dict(get("thread_tile_1d").resolve(params), LOOP=loop)
        t = tile_of("thread_tile_1d", p)
        c = sass_counts("thread_tile_1d", p)
        written = (2 * t["TM"] if loop == 0 else t["TM"] + 1) * t["BK"]
        rows.append({"loop order": "dot product per result (LOOP=0)" if loop == 0 else "k outer, B in a register (LOOP=1)",
                     "shared reads per step, as written": written,
                     "FFMA": c.counts.get("FFMA", 0) // (c.k_per_pass // t["BK"]),
                     "LDS": c.counts.get("LDS", 0) // (c.k_per_pass // t["BK"]),
                     "LDS.128": c.counts.get("LDS.128", 0) // (c.k_per_pass // t["BK"]),
                     "shared floats fetched per step": c.shared_floats // (c.k_per_pass // t["BK"])})
    return rows


def excerpt(kernel: str, params: dict | None = None, ops=("LDS", "FFMA"), lines: int = 14) -> str:
    """The first lines of the inner loop that use the given opcodes, without encodings."""
    from .resources import inner_loop, sass

    spec = get(kernel)
    loop = inner_loop(sass(spec, spec.validate(params)))
    out = []
    for line in loop.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m and any(re.search(rf"\b{op}\b", m.group(2)) for op in ops):
            out.append(f"/*{m.group(1)}*/  {m.group(2)}")
        if len(out) >= lines:
            break
    return "\n".join(out)


# ------------------------------------------------------------------- figure
def figure(configs: dict, K: int = 4096):
    """Global and shared loads per result (as multiples of K) for named configs, side by side.

    ``configs`` maps a label to (kernel, params).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .plots import PALETTE, TEMPLATE

    names = list(configs)
    counts = [per_result(k, p, K) for k, p in configs.values()]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("global-memory loads per result",
                                                        "shared-memory loads per result"))
    for col, key in ((1, "global"), (2, "shared")):
        ys = [c[key] / K for c in counts]
        fig.add_trace(go.Bar(x=names, y=ys, marker_color=PALETTE[col - 1], showlegend=False,
                             text=[as_fraction_of_K(c[key], K) for c in counts], textposition="outside",
                             hovertemplate="%{x}: %{text}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(range=[0, max(ys) * 1.25], title_text="loads / K", row=1, col=col)
    fig.update_layout(template=TEMPLATE, height=430, title="Loads per element of C, from the tile sizes")
    return fig


def heatmap(rows: list[dict], source: str, x: str = "BK", y: str = "TM", title: str = ""):
    """TFLOP/s of one kernel over two parameters (rows at one size), with occupancy in the hover."""
    import plotly.graph_objects as go

    from .occupancy import SM90, occupancy_of
    from .plots import TEMPLATE, label_source

    xs = sorted({r["params"][x] for r in rows})
    ys = sorted({r["params"][y] for r in rows})
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    hover = [[""] * len(xs) for _ in ys]
    for r in rows:
        i, j = ys.index(r["params"][y]), xs.index(r["params"][x])
        res, o = occupancy_of(r["kernel"], r["params"], limits=SM90)
        z[i][j] = r["tflops"]
        text[i][j] = f"{r['tflops']:.1f}<br>{o.active_warps} warps"
        hover[i][j] = (f"{x}={r['params'][x]}, {y}={r['params'][y]}: {r['tflops']:.2f} TFLOP/s "
                       f"({100 * r['tflops'] / r['cublas_tflops']:.0f}% of cuBLAS)<br>{res.registers} registers, "
                       f"{o.threads_per_block} threads/block; {o}" + ("" if r["ok"] else "<br>WRONG RESULT"))
    fig = go.Figure(go.Heatmap(z=z, x=[str(v) for v in xs], y=[str(v) for v in ys], text=text,
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                               colorscale="Blues", colorbar=dict(title="TFLOP/s")))
    fig.update_layout(template=TEMPLATE, height=420, title=title, xaxis_title=x, yaxis_title=y)
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    return label_source(fig, source + "; warps per SM from the offline sm_90 compile")


def shared_bound(kernel: str, params: dict | None, peak_tflops: float) -> float:
    """TFLOP/s ceiling if each shared-load instruction takes one 128-byte pass of shared memory.

    An sm_90 SM issues up to 4 warp-wide FFMAs per clock but its shared memory
    serves 128 bytes (one warp-wide 32-bit load) per clock, so the FFMA rate is at
    most FFMA / LDS instructions per clock, out of 4.
    """
    c = sass_counts(kernel, params)
    ffma = c.counts.get("FFMA", 0)
    return peak_tflops * min(1.0, ffma / max(c.shared_load_instructions, 1) / 4)
