"""Figures, tables and sentences of the chapters "Tensor cores and TF32" (book/14_tensor_cores.md)
and "Float32 accuracy at tensor-core speed" (book/15_3xtf32.md).

Each function takes a :class:`helpers.measure.tensor_cores.Run` (recorded or live); where the
run is None (the chapter is not recorded yet) it returns a short note instead. The fragment
layout and the split need no data.
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from ..measure import tensor_cores as data
from ..measure.tensor_cores import LABELS, METHODS, UNPROMOTED, Run
from ..models import tf32
from ..tables import Table, Text
from . import style

# cuBLAS TF32 not grey: the ceilings figure draws its ceilings grey
COLOURS = {"simt": style.PALETTE[0], "cublas_fp32": style.CUBLAS, "cublas_tf32": "#00606b",
           "tf32": style.PALETTE[1], "tf32x3": style.PALETTE[2], "wgmma_tf32": style.PALETTE[3],
           "wgmma_tf32x3": style.PALETTE[4]}


# ------------------------------------------------------------------ notes
def not_recorded() -> Text:
    """The note shown in place of the measurements while the chapters are not recorded."""
    return Text("**Not recorded yet.** The measurements on this page come from "
                f"`{data.RECORD_COMMAND}` on a GPU of compute capability 8.0 or newer; none are in `book/data` "
                "yet. On such a GPU the notebook measures them as it runs.")


def mode_note() -> Text | None:
    """Why a live page shows recorded rows (a GPU without TF32 mma.sync); None otherwise."""
    note = data.mode_note()
    return Text(f"**Note.** {note}") if note else None


needs_run = style.needs_run(data.RECORD_COMMAND)
show = style.show_or_note


# ------------------------------------------------------------------ the fragment layout
MATRICES = {  # name: (rows, cols, registers, (lane, register) -> (row, col))
    "A": (16, 8, 4, lambda lane, r: (lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2))),
    "B": (8, 8, 2, lambda lane, r: (lane % 4 + 4 * r, lane // 4)),
    "C": (16, 8, 4, lambda lane, r: (lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2)),
}
REGISTER = {"A": "a", "B": "b", "C": "c"}


def fragment_owners(name: str) -> np.ndarray:
    """(rows, cols, 2): the lane and the register index holding each element of A, B or C
    (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32)."""
    rows, cols, regs, where = MATRICES[name]
    owner = np.full((rows, cols, 2), -1, dtype=int)
    for lane in range(32):
        for r in range(regs):
            i, j = where(lane, r)
            owner[i, j] = (lane, r)
    return owner


def fragment_layout() -> go.Figure:
    """The 32 lanes' share of one mma.sync.m16n8k8: a menu over A (16 x 8), B (8 x 8) and
    C/D (16 x 8); colour = lane, text = lane and register, hover says both."""
    steps = []
    for name, (rows, cols, _, _) in MATRICES.items():
        owner = fragment_owners(name)
        lane, reg = owner[..., 0], owner[..., 1]
        text = [[f"{lane[i, j]}<br>{REGISTER[name]}{reg[i, j]}" for j in range(cols)] for i in range(rows)]
        hover = [[f"{name}({i}, {j}): lane {lane[i, j]}, register {REGISTER[name]}{reg[i, j]}"
                  f" (groupID {lane[i, j] // 4}, threadID_in_group {lane[i, j] % 4})" for j in range(cols)]
                 for i in range(rows)]
        trace = go.Heatmap(z=lane, text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                           colorscale="Turbo", zmin=0, zmax=31, showscale=False, xgap=1, ygap=1,
                           x=list(range(cols)), y=list(range(rows)), textfont=dict(size=9))
        what = {"A": "A (16 x 8, rows m, columns k)", "B": "B (8 x 8, rows k, columns n)",
                "C": "C and D (16 x 8, rows m, columns n)"}[name]
        steps.append((name, [trace], f"mma.sync.m16n8k8 (TF32): which lane holds each element of {what}"))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(autorange="reversed", title="row", dtick=1)
    fig.update_xaxes(title="column", dtick=1)        # below the grid: the menu sits on its top edge
    return style.finish(fig, steps[0][2], source="lane l: groupID = l / 4, threadID_in_group = l % 4 (PTX ISA)",
                        height=560, legend=False)


# ------------------------------------------------------------------ speed
def _speed_rows(run: Run, methods, n: int) -> list[dict]:
    return [r for m in methods if (r := run.speed(m, n)) is not None]


@needs_run
def speed_bars(run: Run, methods: tuple, title: str) -> go.Figure:
    """TFLOP/s of each method at the largest n, with its error against float64 in the label."""
    n = run.largest
    rows = _speed_rows(run, methods, n)
    fills = [COLOURS[r["method"]] for r in rows]
    labels = [f"{r['tflops']:.0f} TFLOP/s<br>error {r['error']:.0e}" for r in rows]
    fig = go.Figure(go.Bar(
        y=[r["label"] for r in rows], x=[r["tflops"] for r in rows], orientation="h", marker_color=fills,
        text=labels, **style.bar_labels(fills), hovertemplate="%{y}: %{x:.1f} TFLOP/s<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    left = max(style.text_px(r["label"]) for r in rows) + 10
    fig.update_xaxes(range=[0, style.inside_or_after([r["tflops"] for r in rows], labels, left)])
    return style.finish(fig, f"{title}, n = {n}", xtitle="TFLOP/s", source=run.source, legend=False,
                        height=220 + 50 * len(rows))


@needs_run
def speed_vs_n(run: Run, methods: tuple) -> go.Figure:
    fig = go.Figure()
    for m in methods:
        rows = [r for n in run.sizes if (r := run.speed(m, n)) is not None]
        if not rows:
            continue
        fig.add_trace(go.Scatter(x=[r["M"] for r in rows], y=[r["tflops"] for r in rows], name=LABELS[m],
                                 mode="lines+markers", line=dict(color=COLOURS[m])))
    style.log_axis(fig, "x", run.sizes, exact=True)
    return style.finish(fig, "Throughput against n", xtitle="n (M = N = K)", ytitle="TFLOP/s", source=run.source)


@needs_run
def accurate(run: Run, kernel: str, r: dict) -> bool:
    """Whether a config's row keeps its kernel's accuracy: for a kernel of float32 accuracy, within 4
    times cuBLAS FP32's error at its n (a config whose accumulation drifts does not)."""
    ref = run.speed("cublas_fp32", r["M"])
    return data.get(kernel).precision != "fp32" or ref is None or r["error"] <= 4 * ref["error"]


def fastest_variant(run: Run, kernel: str, n: int) -> dict | None:
    """The fastest accurate config of ``kernel`` measured at n x n x n (the variants table's "yes")."""
    rows = [r for r in run.of("speed", method=kernel) if r["M"] == n and accurate(run, kernel, r)]
    return max(rows, key=lambda r: r["tflops"], default=None)


def variants_table(run: Run, kernel: str) -> Table:
    rows = [r for r in run.of("speed", method=kernel)]
    best = {n: (fastest_variant(run, kernel, n) or {}).get("tflops") for n in {r["M"] for r in rows}}
    return Table([{"n": r["M"], "config": r["config"], "TFLOP/s": r["tflops"], "error": r["error"],
                   "fastest accurate config at this n": r["tflops"] == best[r["M"]]}
                  for r in sorted(rows, key=lambda r: r["M"])])


def ratio(run: Run, a: str, b: str, n: int | None = None) -> float:
    n = n or run.largest
    return run.speed(a, n)["tflops"] / run.speed(b, n)["tflops"]


# ------------------------------------------------------------------ error
@needs_run
def error_vs_k(run: Run, methods: tuple = tuple(METHODS)) -> go.Figure:
    fig = go.Figure()
    ks = sorted({r["K"] for r in run.of("error_k")})
    for m in methods:
        rows = sorted(run.of("error_k", method=m), key=lambda r: r["K"])
        fig.add_trace(go.Scatter(x=[r["K"] for r in rows], y=[r["error"] for r in rows], name=METHODS[m],
                                 mode="lines+markers", line=dict(color=COLOURS[m])))
    style.log_axis(fig, "x", ks, exact=True)
    fig.update_yaxes(type="log", exponentformat="power")
    mn = run.of("error_k")[0]["M"]
    return style.finish(fig, f"Error against a float64 product as K grows (M = N = {mn})", xtitle="K",
                        ytitle="max |C - C64| / max |C64|", source=run.source)


@needs_run
def error_table(run: Run, what: str = "speed") -> Table:
    """Each method's error at the largest n (``what="wide"``: on operands spanning six orders)."""
    if what == "wide":
        rows = run.of("wide")
    else:
        rows = _speed_rows(run, METHODS, run.largest)
    return Table([{"method": r["label"], "n": r["M"], "max |C - C64| / max |C64|": r["error"]} for r in rows])


@needs_run
def check_table(run: Run, kernel: str) -> Table:
    rows = run.of("check", kernel=kernel)
    return Table([{"shape": f"{r['M']}x{r['N']}x{r['K']}", "operands": "x 10^U(-3,3)" if r["wide"] else "U(-1,1)",
                   "relative error": r["rel_err"], "tolerance": r["tol"],
                   "worst element / bound": r["worst_element"], "passes": r["ok"]} for r in rows])


def error_growth(run: Run, method: str) -> float:
    """How much the method's error grows from the smallest K of the sweep to the largest."""
    rows = sorted(run.of("error_k", method=method), key=lambda r: r["K"])
    return rows[-1]["error"] / rows[0]["error"]


# ------------------------------------------------------------------ sentences
@needs_run
def tf32_text(run: Run) -> Text:
    n = run.largest
    ours, cub, cub32 = run.speed("tf32", n), run.speed("cublas_tf32", n), run.speed("cublas_fp32", n)
    best = fastest_variant(run, "tf32", n)
    faster = (f" Its fastest config measured there, {best['config']} (the table below), reached "
              f"{best['tflops']:.0f}." if best and best["tflops"] > 1.01 * ours["tflops"] else "")
    return Text(f"At n = {n} the TF32 kernel, in its default config ({ours['config']}), runs at "
                f"{ours['tflops']:.0f} TFLOP/s, "
                f"{100 * ours['tflops'] / cub['tflops']:.0f}% of cuBLAS in TF32 mode "
                f"({cub['tflops']:.0f} TFLOP/s) and {ours['tflops'] / cub32['tflops']:.1f} times cuBLAS's "
                f"float32 SGEMM.{faster} Its error against the float64 product is {ours['error']:.1e}, "
                f"{ours['error'] / cub32['error']:.0f} times that of the float32 product.")


@needs_run
def error_k_text(run: Run) -> Text:
    ks = sorted({r["K"] for r in run.of("error_k")})

    def change(method: str) -> str:
        g = error_growth(run, method)
        return f"changes by a factor of {g:.1f}" if g < 3 else f"grows {g:.0f}-fold"

    return Text(f"From K = {ks[0]} to K = {ks[-1]} the TF32 error {change('tf32')} and the float32 SIMT kernel's "
                f"{change('simt')}: each is divided by max |C64|, which grows like √K too. At every K, 3xTF32 "
                f"stays within {within(max_ratio(run, 'tf32x3', 'simt'))} times the SIMT kernel's error.")


def within(ratio: float) -> str:
    """A bound "within x times" as the text prints it: rounded up to one decimal, so that it holds."""
    return f"{math.ceil(10 * ratio) / 10:.1f}"


def max_ratio(run: Run, a: str, b: str) -> float:
    ea = {r["K"]: r["error"] for r in run.of("error_k", method=a)}
    eb = {r["K"]: r["error"] for r in run.of("error_k", method=b)}
    return max(ea[k] / eb[k] for k in ea)


@needs_run
@needs_run
def promotion_figure(run: Run) -> go.Figure:
    """3xTF32's error against K, with and without promotion, beside the float32 kernels'."""
    fig = go.Figure()
    ks = sorted({r["K"] for r in run.of("error_k")})
    lines = [("cublas_fp32", METHODS["cublas_fp32"], COLOURS["cublas_fp32"], "solid"),
             ("tf32x3", "3xTF32, promoted every k-tile", COLOURS["tf32x3"], "solid"),
             (UNPROMOTED, "3xTF32, one mma chain", COLOURS["tf32x3"], "dash")]
    for m, name, colour, dash in lines:
        rows = sorted(run.of("error_k", method=m), key=lambda r: r["K"])
        fig.add_trace(go.Scatter(x=[r["K"] for r in rows], y=[r["error"] for r in rows], name=name,
                                 mode="lines+markers", line=dict(color=colour, dash=dash)))
    style.log_axis(fig, "x", ks, exact=True)
    fig.update_yaxes(type="log", exponentformat="power")     # a relative error: 10⁻⁶, not 1µ
    mn = run.of("error_k")[0]["M"]
    return style.finish(fig, f"3xTF32's error with and without promotion (M = N = {mn})", xtitle="K",
                        ytitle="max |C - C64| / max |C64|", source=run.source)


def promotion_ratio(run: Run, K: int) -> float:
    """3xTF32's error without promotion over its error with it, at K."""
    e = {r["method"]: r["error"] for r in run.of("error_k", K=K)}
    return e[UNPROMOTED] / e["tf32x3"]


@needs_run
def promotion_text(run: Run) -> Text:
    ks = sorted({r["K"] for r in run.of("error_k", method=UNPROMOTED)})
    lo, hi = ks[0], ks[-1]
    e = {(r["method"], r["K"]): r["error"] for r in run.of("error_k")}
    return Text(f"Without promotion the error grows {e[UNPROMOTED, hi] / e[UNPROMOTED, lo]:.0f}-fold from K = {lo} "
                f"to K = {hi}, and at K = {hi} it is {promotion_ratio(run, hi):.0f} times the promoted kernel's. "
                f"Promoted, 3xTF32 stays within {within(max_ratio(run, 'tf32x3', 'cublas_fp32'))} times cuBLAS FP32's "
                f"error at every K.")


@needs_run
def tf32x3_text(run: Run) -> Text:
    n = run.largest
    ours, cub32, cubtf = run.speed("tf32x3", n), run.speed("cublas_fp32", n), run.speed("cublas_tf32", n)
    return Text(f"At n = {n} the 3xTF32 kernel runs at {ours['tflops']:.0f} TFLOP/s, "
                f"{ours['tflops'] / cub32['tflops']:.2f} times cuBLAS's float32 SGEMM ({cub32['tflops']:.0f}), "
                f"with an error of {ours['error']:.1e} against the float64 product (cuBLAS FP32: "
                f"{cub32['error']:.1e}). cuBLAS's TF32 mode is {cubtf['tflops'] / ours['tflops']:.1f} times faster "
                "and as inaccurate as TF32.")


def peak(run: Run) -> dict:
    """The fastest row of the mma.sync loop."""
    return max(run.of("peak"), key=lambda r: r["tflops"])


@needs_run
def ceilings(run: Run) -> go.Figure:
    """A roofline-style ladder of ceilings and measurements, in TFLOP/s of C = A @ B."""
    n = run.largest
    p = peak(run)["tflops"]
    items = [
        ("FP32 peak (FFMA)", run.device.fp32_tflops, "#bbbbbb"),
        ("cuBLAS FP32", run.speed("cublas_fp32", n)["tflops"], COLOURS["cublas_fp32"]),
        # the long names on two lines: on a phone the names would take half the figure's width
        ("3xTF32 cap on mma.sync<br>(peak / 3)", p / 3, "#bbbbbb"),
        ("3xTF32 (ours)", run.speed("tf32x3", n)["tflops"], COLOURS["tf32x3"]),
        ("TF32 (ours)", run.speed("tf32", n)["tflops"], COLOURS["tf32"]),
        ("mma.sync loop,<br>registers only", p, "#bbbbbb"),
        ("cuBLAS TF32 (wgmma)", run.speed("cublas_tf32", n)["tflops"], COLOURS["cublas_tf32"]),
    ]
    fig = go.Figure(go.Bar(y=[i[0] for i in items], x=[i[1] for i in items], orientation="h",
                           marker_color=[i[2] for i in items], text=[f"{i[1]:.0f}" for i in items],
                           textposition="auto", hovertext=[i[0].replace("<br>", " ") for i in items],
                           hovertemplate="%{hovertext}: %{x:.0f} TFLOP/s<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return style.finish(fig, f"Ceilings and measurements, n = {n}", xtitle="TFLOP/s (2 M N K / time)",
                        source=run.source + "; grey: ceilings", legend=False, height=440)


@needs_run
def gap_text(run: Run) -> Text:
    n = run.largest
    p = peak(run)["tflops"]
    ours = run.speed("tf32x3", n)["tflops"]
    cub = run.speed("cublas_tf32", n)["tflops"]
    return Text(f"The register-only loop of `mma.sync` reaches {p:.0f} TFLOP/s, {100 * p / cub:.0f}% of what "
                f"cuBLAS's TF32 mode sustains on whole products. Three of them per product cap a 3xTF32 kernel "
                f"built on `mma.sync` at {p / 3:.0f} TFLOP/s before any memory traffic; the kernel here reaches "
                f"{100 * ours / (p / 3):.0f}% of that cap.")


@needs_run
def hopper_text(run: Run) -> Text:
    """The wgmma kernels at the largest n against cuBLAS, or why the run has none."""
    n = run.largest
    tf, x3 = run.speed("wgmma_tf32", n), run.speed("wgmma_tf32x3", n)
    if tf is None or x3 is None:
        return Text(f"*This run ({run.device.label}, compute capability {run.device.cc}) has no `wgmma` "
                    "rows: the instruction needs compute capability 9.0.* The kernels are shown all the same.")
    cub32, cubtf = run.speed("cublas_fp32", n), run.speed("cublas_tf32", n)
    return Text(f"At n = {n} the TF32 kernel on `wgmma` runs at {tf['tflops']:.0f} TFLOP/s, "
                f"{100 * tf['tflops'] / cubtf['tflops']:.0f}% of cuBLAS's TF32 mode and "
                f"{tf['tflops'] / run.speed('tf32', n)['tflops']:.1f} times the `mma.sync` kernel. "
                f"3xTF32 on `wgmma` runs at {x3['tflops']:.0f} TFLOP/s, {x3['tflops'] / cub32['tflops']:.2f} "
                f"times cuBLAS's float32 SGEMM, with an error of {x3['error']:.1e} against the float64 product "
                f"(cuBLAS FP32: {cub32['error']:.1e}). The TF32 kernel's error, {tf['error']:.1e}, is above the "
                f"`mma.sync` kernel's ({run.speed('tf32', n)['error']:.1e}): `wgmma` truncates the operands to "
                "TF32 where the `mma.sync` kernel rounds them.")


@needs_run
def hopper_gap_text(run: Run) -> Text | None:
    """How far 3xTF32 on wgmma stays from a third of the TF32 kernel's own rate (None without wgmma rows)."""
    n = run.largest
    tf, x3 = run.speed("wgmma_tf32", n), run.speed("wgmma_tf32x3", n)
    if tf is None or x3 is None:
        return None
    return Text(f"With three products where TF32 has one, 3xTF32 can run at a third of the TF32 kernel's rate, "
                f"{tf['tflops'] / 3:.0f} TFLOP/s at n = {n}; it runs at {x3['tflops']:.0f}, "
                f"{100 * x3['tflops'] / (tf['tflops'] / 3):.0f}% of that.")


# ------------------------------------------------------------------ the split
def split_table(a: float = np.pi, b: float = np.e) -> Table:
    """The four products of one split pair, against the float32 product."""
    t = tf32.product_terms(a, b)
    exact = t["exact"]
    rows = [{"term": k, "value": v, "relative to a*b": abs(v) / abs(exact)}
            for k, v in t.items() if k not in ("kept", "exact")]
    rows.append({"term": "3xTF32 (all but small * small)", "value": t["kept"],
                 "relative to a*b": abs(t["kept"] - exact) / abs(exact)})
    return Table(rows, caption=f"a = {float(np.float32(a)):.7g}, b = {float(np.float32(b)):.7g}; the last row: its error relative to a*b")


def split_bound_table(samples: int = 100_000, seed: int = 0) -> Table:
    """The split's worst error |x - big - small| / |x| on random floats of many magnitudes,
    against its bound 2^-22 and float32's rounding 2^-24."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-1, 1, samples) * 10.0 ** rng.uniform(-30, 30, samples)).astype(np.float32)
    big, small = tf32.split(x)
    err = np.abs(x.astype(np.float64) - big - small) / np.abs(x.astype(np.float64))
    tf = np.abs(x.astype(np.float64) - big) / np.abs(x.astype(np.float64))
    return Table([{"what": "big alone (TF32)", "worst relative error": float(tf.max()), "bound": tf32.UNIT},
                  {"what": "big + small", "worst relative error": float(err.max()), "bound": tf32.SPLIT_BOUND},
                  {"what": "float32's own rounding", "worst relative error": None, "bound": tf32.FLOAT32_UNIT}],
                 caption=f"{samples:,} random floats, magnitudes 10^-30 to 10^30")


# ------------------------------------------------------------------ the leaderboard's section
def beyond_simt_table() -> Table | Text:
    """FP32 (SIMT), TF32 and 3xTF32, ours and cuBLAS's, at the largest recorded n: speed and error
    side by side (book/13_leaderboard.md, "Beyond FP32 SIMT")."""
    runs = [r for c in data.CHAPTERS if (r := data.run(c)) is not None]
    if not runs:
        return Text(f"*Not recorded yet* (`{data.RECORD_COMMAND}`).")
    n = min(r.largest for r in runs)
    order = ("cublas_fp32", "simt", "cublas_tf32", "tf32", "wgmma_tf32", "tf32x3", "wgmma_tf32x3")
    precision = {"cublas_fp32": "FP32 (SIMT)", "simt": "FP32 (SIMT)", "cublas_tf32": "TF32", "tf32": "TF32",
                 "wgmma_tf32": "TF32", "tf32x3": "3xTF32", "wgmma_tf32x3": "3xTF32"}
    rows = []
    for m in order:
        row = next((x for r in runs if (x := r.speed(m, n)) is not None), None)
        if row is not None:
            rows.append({"arithmetic": precision[m], "by": "cuBLAS" if m.startswith("cublas") else "this book",
                         "kernel": row["label"], "TFLOP/s": row["tflops"], "max |C - C64| / max |C64|": row["error"]})
    return Table(rows, caption=f"n = {n}; {runs[0].source}")
