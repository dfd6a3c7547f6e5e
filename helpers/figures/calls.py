"""The leaderboard's section on library calls from Python (book/13_leaderboard.md, "Called from Python").

Rows come from ``python -m helpers bench --suite calls`` (:mod:`helpers.measure.calls`), live or
recorded (data source ``calls``): per product, helpers.sgemm and cupy.matmul on the same operands,
their GPU time, their host time per call and their time per call in a loop.
"""
from __future__ import annotations

from ..measure import datafile
from ..measure.bench import geomean, measured_ok
from ..measure.results import ResultSet, results
from ..tables import Table, Text

CAPTION = ("helpers.sgemm / cupy.matmul on the same operands. GPU: one call between CUDA events, queued back to "
           "back. Host: the CPU's time to issue one call, in a loop of {calls} calls over 8 operand sets queued "
           "while the GPU waits. Loop: time per call of that loop run freely, synchronised once at the end. "
           "Throughput: cupy.matmul's loop time over helpers.sgemm's (above 100%: more calls per second). {source}")


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
        out.append({"product": r["shape"], "helpers.sgemm runs": f"{r['path']} ({r['launches']} launch"
                                                                 f"{'es' if r['launches'] > 1 else ''})",
                    "GPU µs": f"{1e3 * r['ms']:.1f} / {1e3 * r['cublas_ms']:.1f}",
                    "host µs per call": f"{r['host_us']:.1f} / {r['cublas_host_us']:.1f}",
                    "loop µs per call": f"{r['loop_us']:.1f} / {r['cublas_loop_us']:.1f}",
                    "throughput": f"{r['pct_loop']:.0f}%"})
    from ..measure.calls import CALLS

    return Table(out, caption=CAPTION.format(calls=CALLS, source=rs.source))


def summary(rows: list[dict]) -> dict:
    """The numbers :func:`calls_text` states, from the rows."""
    good = good_rows(rows)
    low, high = min(good, key=lambda r: r["pct_loop"]), max(good, key=lambda r: r["pct_loop"])
    return dict(count=len(good), total=len([r for r in rows if r.get("suite") == "calls"]),
                geomean=geomean(r["pct_loop"] for r in good), low=low, high=high,
                host=(min(r["host_us"] for r in good), max(r["host_us"] for r in good)),
                cublas_host=(min(r["cublas_host_us"] for r in good), max(r["cublas_host_us"] for r in good)),
                below=[r["shape"] for r in good if r["pct_loop"] < 100])


def calls_text(rs: ResultSet | Text) -> Text:
    """The loop's throughput against cupy.matmul's, and the host's time per call of each."""
    if isinstance(rs, Text):
        return rs
    if not good_rows(rs.rows):
        return Text("No correct measurement of calls from Python in these rows.")
    s = summary(rs.rows)
    below = (f" It falls behind on {len(s['below'])}: {', '.join(s['below'])}." if s["below"]
             else " It keeps up with cupy.matmul or better on every one.")
    return Text(f"{s['count']} of {s['total']} products measured and correct. In a loop, helpers.sgemm ran "
                f"{s['geomean']:.0f}% of cupy.matmul's calls per second (geometric mean), from "
                f"{s['low']['pct_loop']:.0f}% ({s['low']['shape']}) to {s['high']['pct_loop']:.0f}% "
                f"({s['high']['shape']}).{below} The host spent {s['host'][0]:.1f} to {s['host'][1]:.1f} µs per "
                f"call of helpers.sgemm, {s['cublas_host'][0]:.1f} to {s['cublas_host'][1]:.1f} µs per call of "
                "cupy.matmul.")
