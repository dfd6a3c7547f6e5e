"""The leaderboard's section on library calls from Python (book/13_leaderboard.md, "Called from Python").

Rows come from ``python -m helpers bench --suite calls`` (:mod:`helpers.measure.calls`), live or
recorded (data source ``calls``): per product, helpers.sgemm and cupy.matmul on the same operands,
their GPU time, their host time per call and their time per call in a loop.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from ..measure import datafile
from ..measure.bench import geomean, measured_ok
from ..measure.results import ResultSet, results
from ..tables import Table, Text
from . import style

# (menu label, row key of helpers.sgemm's time, of cupy.matmul's, µs per unit, what it is)
TIMES = [
    ("loop", "loop_us", "cublas_loop_us", 1.0,
     "Time per call in a loop of calls, synchronised once at the end: what a program gets"),
    ("host", "host_us", "cublas_host_us", 1.0, "The host's time to issue one call (the GPU held, so only the host counts)"),
    ("GPU", "ms", "cublas_ms", 1e3, "The GPU's time per call (CUDA events, calls back to back)"),
]

# what a call of each path launches, in words a reader of chapters 12 and 13 knows (path_of's names)
PATH_WORDS = {"plain": "one kernel", "split-K": "split-K", "stream-K": "stream-K",
              "slabs": "split-K, parts added by a 2nd kernel", "packed": "an operand packed first",
              "batched": "batched", "batched split-K": "batched split-K"}


def path_words(r: dict) -> str:
    return PATH_WORDS.get(r["path"], r["path"])


def launch_words(r: dict) -> str:
    """How a row's call launched its kernels: "2 kernels, one graph" or "2 launches"."""
    n = r["launches"]
    if r.get("graph"):
        return style.plural(n, "kernel") + (", one graph" if n > 1 else ", in a graph")
    return f"{n} launch" + ("" if n == 1 else "es")


CAPTION = ("helpers.sgemm / cupy.matmul on the same operands. GPU: each call between a pair of CUDA events, the "
           "calls queued back to back; the events' own cost can make it more than the loop's time per call, even "
           "where the loop waits on the GPU. Host: issuing "
           "one call, in a loop of {calls} over 8 operand sets, the GPU held. Loop: per call of that loop run freely, "
           "synchronised at the end. Throughput: cupy.matmul's loop time over helpers.sgemm's. First call (where "
           "recorded): helpers.sgemm's first call of the shape, choice and plan included, its kernels compiled already. "
           "Empty launch (where recorded): the host's time to launch an empty kernel the same way (one graph "
           "where the call's kernels go in one). {source}")


def calls_results() -> ResultSet | Text:
    """The calls run's rows (data source ``calls``), or a sentence saying they are missing."""
    try:
        return results("calls")
    except (datafile.DataError, KeyError) as exc:
        return Text(f"*Calls from Python have not been recorded here yet* ({exc}).")


def good_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("suite") == "calls" and measured_ok(r)]


def calls_table(rs: ResultSet | Text) -> Table | Text:
    """A row per product: GPU, host and loop time per call, both libraries, and the loop's throughput."""
    if isinstance(rs, Text):
        return rs
    out = []
    for r in (r for r in rs.rows if r.get("suite") == "calls"):
        if not measured_ok(r):
            out.append({"product": r["shape"], "helpers.sgemm runs": r.get("status") if r.get("status") != "measured"
                        else "WRONG"})
            continue
        out.append({"product": r["shape"], "helpers.sgemm runs": f"{path_words(r)} ({launch_words(r)})",
                    "GPU µs": f"{1e3 * r['ms']:.1f} / {1e3 * r['cublas_ms']:.1f}",
                    "host µs per call": f"{r['host_us']:.1f} / {r['cublas_host_us']:.1f}",
                    "loop µs per call": f"{r['loop_us']:.1f} / {r['cublas_loop_us']:.1f}",
                    "throughput": f"{r['pct_loop']:.0f}%"}
                   | ({"first call, ms": f"{r['first_call_ms']:.1f}"} if r.get("first_call_ms") else {})
                   | ({"empty launch, µs": f"{r['launch_floor_us']:.1f}"} if r.get("launch_floor_us") else {}))
    from ..measure.calls import CALLS

    return Table(out, caption=CAPTION.format(calls=CALLS, source=rs.source))


def summary(rows: list[dict]) -> dict:
    """The numbers :func:`calls_text` states, from the rows."""
    good = good_rows(rows)
    low, high = min(good, key=lambda r: r["pct_loop"]), max(good, key=lambda r: r["pct_loop"])

    def spread(key):
        values = [r[key] for r in good if r.get(key)]
        return (min(values), max(values)) if values else None

    return dict(count=len(good), total=len([r for r in rows if r.get("suite") == "calls"]),
                geomean=geomean(r["pct_loop"] for r in good), low=low, high=high,
                host=spread("host_us"), cublas_host=spread("cublas_host_us"),
                floor=spread("launch_floor_us"), direct=spread("direct_launch_us"), first=spread("first_call_ms"),
                below=[r for r in good if r["pct_loop"] < 100])


def gpu_bound(r: dict) -> bool:
    """Whether a row's loop waits on the GPU: the host issues a call faster than the GPU runs it."""
    return r["host_us"] < 1e3 * r["ms"]


def value_text(us: float) -> str:
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def calls_figure(rs: ResultSet | Text) -> go.Figure | Text:
    """Per product, helpers.sgemm's and cupy.matmul's time per call: in a loop, on the host, on the
    GPU (a menu). Microseconds on a log axis, so each time is a dot, not a bar (a bar's length on a
    log axis would mean nothing); a product's two dots are joined, each with its value written on
    the side away from the other."""
    if isinstance(rs, Text):
        return rs
    good = good_rows(rs.rows)
    if not good:
        return Text("No correct measurement of calls from Python in these rows.")
    labels = [f"{r['shape']}, {path_words(r)}" for r in good]
    ys = list(range(len(good)))
    dots_y = [y + 0.3 for y in ys]
    values = [scale * r[key] for _, ours, theirs, scale, _ in TIMES for key in (ours, theirs) for r in good]
    lo, hi = min(values) / 3, max(values) * 3            # room for the values written beside the dots
    steps = []
    for name, ours, theirs, scale, what in TIMES:
        hover = [f"{r['shape']} ({path_words(r)}, {launch_words(r)})<br>GPU {1e3 * r['ms']:.1f} / "
                 f"{1e3 * r['cublas_ms']:.1f} µs, host {r['host_us']:.1f} / {r['cublas_host_us']:.1f} µs, loop "
                 f"{r['loop_us']:.1f} / {r['cublas_loop_us']:.1f} µs per call (helpers.sgemm / cupy.matmul)"
                 for r in good]
        a, b = [scale * r[ours] for r in good], [scale * r[theirs] for r in good]
        ours_left = [x <= y for x, y in zip(a, b)]
        link = go.Scatter(x=[v for pair in zip(a, b) for v in pair + (None,)],
                          y=[v for y in dots_y for v in (y, y, None)], mode="lines",
                          line=dict(color=style.GRID, width=3), showlegend=False, hoverinfo="skip")
        dots = [go.Scatter(x=xs, y=dots_y, mode="markers+text", name=lib, marker=dict(color=colour, size=11),
                           text=[value_text(v) for v in xs], textfont=dict(size=style.FONT - 1), cliponaxis=False,
                           textposition=["middle left" if left == first else "middle right" for left in ours_left],
                           hovertext=hover, hoverinfo="text")
                for lib, xs, colour, first in (("helpers.sgemm", a, style.colour("final"), True),
                                               ("cupy.matmul", b, style.CUBLAS, False))]
        # each product's name above its dots, not as an axis label: the dots keep the width on a phone
        # (a hair inside the axis's left end: a text point on the end itself is not drawn)
        names = go.Scatter(y=[y - 0.1 for y in ys], x=[lo * 1.01] * len(ys), mode="text", text=labels,
                           textposition="middle right", textfont=dict(size=style.FONT - 1), cliponaxis=False,
                           showlegend=False, hoverinfo="skip")
        steps.append((name, [link] + dots + [names], what))
    fig = style.steps_figure(steps, active=0)
    fig.update_yaxes(range=[len(good) - 0.3, -0.5], showticklabels=False, showgrid=False, zeroline=False)
    style.log_axis(fig, "x", [lo, hi])
    fig.update_xaxes(range=[math.log10(lo), math.log10(hi)])
    return style.finish(fig, TIMES[0][4], "µs per call (log scale)", None, rs.source, height=140 + 46 * len(good))


def calls_view(rs: ResultSet | Text) -> Text | None:
    """Show the figure, or return the sentence that says why there is none."""
    fig = calls_figure(rs)
    if isinstance(fig, Text):
        return fig
    style.show(fig)
    return None


NAMED = 3      # products the text names where helpers.sgemm's loop falls behind (the furthest first)


def calls_text(rs: ResultSet | Text) -> Text:
    """The loop's throughput against cupy.matmul's, where it falls behind and whether the GPU is
    why, and the host's time per call of each library."""
    if isinstance(rs, Text):
        return Text("")
    if not good_rows(rs.rows):
        return Text("No correct measurement of calls from Python in these rows.")
    s = summary(rs.rows)
    if s["below"]:
        worst = sorted(s["below"], key=lambda r: r["pct_loop"])[:NAMED]
        behind = ", ".join(f"{r['shape']} (GPU {1e3 * r['ms']:.1f} / {1e3 * r['cublas_ms']:.1f} µs)" for r in worst)
        if len(s["below"]) > NAMED:
            behind += f", and {len(s['below']) - NAMED} more (the deep dive lists them)"
        gap = max(abs(r["ms"] / r["cublas_ms"] - 1) for r in s["below"])
        why = (" Those loops wait on the GPU, not the host (helpers.sgemm issues a call faster than the GPU "
               f"runs it); there the two libraries' GPU times are within {100 * gap:.1f}% of each other."
               if all(gpu_bound(r) for r in s["below"]) else "")
        below = f" It falls behind on {len(s['below'])}: {behind}.{why}"
    else:
        below = " It keeps up with cupy.matmul or better on every one."
    text = (f"{s['count']} of {s['total']} products measured and correct. In a loop, helpers.sgemm ran "
            f"{s['geomean']:.0f}% of cupy.matmul's calls per second (geometric mean), from "
            f"{s['low']['pct_loop']:.0f}% ({s['low']['shape']}) to {s['high']['pct_loop']:.0f}% "
            f"({s['high']['shape']}).{below} The host spent {s['host'][0]:.1f} to {s['host'][1]:.1f} µs per "
            f"call of helpers.sgemm, {s['cublas_host'][0]:.1f} to {s['cublas_host'][1]:.1f} µs per call of "
            "cupy.matmul.")
    return Text(text.strip())


def calls_details_text(rs: ResultSet | Text) -> Text:
    """The least a launch costs the host, and the first call of a new shape (the deep dive)."""
    if isinstance(rs, Text) or not good_rows(rs.rows):
        return Text("")
    s, text = summary(rs.rows), ""
    if s["floor"]:
        (f0, f1), empty = s["floor"], "Launching an empty kernel as helpers.sgemm launches"
        if all(r.get("graph") for r in good_rows(rs.rows)):
            alone = (f", against {s['direct'][0]:.1f} to {s['direct'][1]:.1f} µs for a cuLaunchKernel of it alone"
                     if s["direct"] else "")
            text += (f"{empty} (a graph of one kernel, its parameters set, launched) cost the host {f0:.1f} to "
                     f"{f1:.1f} µs{alone}, measured beside each product. The graph's time is a floor under the "
                     "host's time per call on this machine; every call pays it once, whatever number of kernels "
                     "its graph holds.")
        else:
            text += (f"{empty} cost the host {f0:.1f} to {f1:.1f} µs, measured beside each product: a floor under "
                     "the host's time per call on this machine, which a call of two launches (slabs, packing) "
                     "pays twice.")
        text += " Hosts differ in it, so compare the two libraries within one run."
    if s["first"]:
        text += (f" The first call of a new shape took {s['first'][0]:.1f} to {s['first'][1]:.1f} ms: the choice "
                 "of a config and the plan, its kernels already compiled. Compiling them comes on top, the first "
                 "time a machine runs that config (CuPy keeps them on disk).")
    return Text(text.strip())
