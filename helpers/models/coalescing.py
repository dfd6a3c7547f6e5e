"""How many bytes a warp's load moves versus how many it uses, and which blocks run together.

Taught in the chapter "Global-memory coalescing" (book/03_coalescing.md).

* :func:`warp_access`: global memory moves 32-byte *sectors*, cached in 128-byte *lines*.
  A warp's load costs as many sectors as its 32 addresses touch, and the L1 serves it
  one line at a time. Counted for the naive mapping (threadIdx.x walks rows) and the
  coalesced one (threadIdx.x walks columns), for any block shape.
* :func:`l1_ceiling`: the TFLOP/s an SM's L1 allows when it serves one line per cycle.
* :func:`schedule_summary`: from a trace of which SM ran each block and when
  (:mod:`helpers.measure.schedule`), what the blocks in flight at one moment share.
"""
from __future__ import annotations

import numpy as np

from ..hardware import LINE_BYTES, SECTOR_BYTES, WARP_SIZE, Device
from ..runtime.specs import ALL, get
from ..runtime.specs.coalescing import strips

# The kernels with one thread per element of C: their specs say which element (``element``).
MAPPINGS = tuple(s.name for s in ALL if s.element is not None)


def lanes(BX: int, BY: int, warp: int = 0) -> list[tuple[int, int]]:
    """(threadIdx.x, threadIdx.y) of the 32 lanes of one warp in a BX x BY block
    (warps take 32 consecutive linear ids ``threadIdx.y * BX + threadIdx.x``)."""
    return [((warp * WARP_SIZE + lane) % BX, (warp * WARP_SIZE + lane) // BX) for lane in range(WARP_SIZE)]


def element(mapping: str, x: int, y: int) -> tuple[int, int]:
    """(row, col) of C that thread (x, y) of block (0, 0) computes in kernel ``mapping``
    (one of :data:`MAPPINGS`: the kernels with one thread per element of C)."""
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {MAPPINGS}, got {mapping!r}")
    return get(mapping).element(x, y)


def warp_access(mapping: str, operand: str, BX: int, BY: int, K: int = 4096, N: int = 4096, k: int = 0) -> dict:
    """One warp's access to A or B at step k (a load), or to C (the store).

    The distinct addresses, the sectors and lines they touch, the bytes moved (sectors x
    32), the bytes used (distinct addresses x 4) and the efficiency used / moved.
    Matrices are assumed to start on a line.
    """
    if operand not in ("A", "B", "C"):
        raise ValueError(f"operand must be 'A', 'B' or 'C', got {operand!r}")
    addrs = []
    for x, y in lanes(BX, BY):
        row, col = element(mapping, x, y)
        addrs.append(4 * {"A": row * K + k, "B": k * N + col, "C": row * N + col}[operand])
    moved = SECTOR_BYTES * len({a // SECTOR_BYTES for a in addrs})
    used = 4 * len(set(addrs))
    return {"mapping": mapping, "operand": operand, "block": f"{BX}x{BY}", "distinct_addresses": len(set(addrs)),
            "sectors": moved // SECTOR_BYTES, "lines": len({a // LINE_BYTES for a in addrs}),
            "bytes_moved": moved, "bytes_used": used, "efficiency": used / moved}


def per_k_step(mapping: str, BX: int, BY: int, K: int = 4096, N: int = 4096) -> dict:
    """What one warp asks of memory for one k: its load of A plus its load of B.

    ``lines`` is how many 128-byte lines the two loads touch: the L1 serves a load one
    line per pass, so it is the number of passes per k.
    """
    a, b = warp_access(mapping, "A", BX, BY, K, N), warp_access(mapping, "B", BX, BY, K, N)
    cells = [element(mapping, x, y) for x, y in lanes(BX, BY)]
    return {"block": f"{BX}x{BY}", "mapping": mapping, "sectors": a["sectors"] + b["sectors"],
            "lines": a["lines"] + b["lines"], "bytes_moved": a["bytes_moved"] + b["bytes_moved"],
            "bytes_used": a["bytes_used"] + b["bytes_used"], "outputs": WARP_SIZE,
            "rows": len({r for r, _ in cells}), "cols": len({c for _, c in cells})}


def l1_ceiling(BX: int, BY: int, device: Device, mapping: str = "coalescing") -> float:
    """TFLOP/s if each SM's L1 serves one 128-byte line per cycle and nothing else limits.

    A warp does 32 multiply-adds per k and its two loads touch ``lines`` lines, one per
    cycle, so an SM finishes at most ``32 / lines`` multiply-adds per cycle.
    """
    lines = per_k_step(mapping, BX, BY)["lines"]
    return device.sm_count * device.clock_mhz * 1e6 * 2 * WARP_SIZE / lines / 1e12


def swap_gain(rows: list[dict]) -> list[dict]:
    """Per (n, block shape) measured with both grid orders: the gain of SWAP=1 over SWAP=0 (medians),
    and the range it spans over the two rows' 20-80% time bands."""
    pairs: dict = {}
    for r in rows:
        if "SWAP" in r["params"] and r["M"] == r["N"] == r["K"]:
            pairs.setdefault((r["M"], r["params"]["BX"], r["params"]["BY"]), {})[r["params"]["SWAP"]] = r
    out = []
    for (n, bx, by), d in sorted(pairs.items()):
        if 0 in d and 1 in d:
            a, b = d[0], d[1]
            out.append({"n": n, "BX": bx, "BY": by, "tflops_0": a["tflops"], "tflops_1": b["tflops"],
                        "gain_pct": 100 * (b["tflops"] / a["tflops"] - 1), "rereads_b_over_a": bx / by,
                        # the gain if SWAP=0 had run at the fast / slow end of its band and SWAP=1 at the other
                        "gain_lo_pct": 100 * (a.get("ms_p20", a["ms"]) / b.get("ms_p80", b["ms"]) - 1),
                        "gain_hi_pct": 100 * (a.get("ms_p80", a["ms"]) / b.get("ms_p20", b["ms"]) - 1),
                        "ms_0": (a.get("ms_p20", a["ms"]), a.get("ms_p80", a["ms"])),
                        "ms_1": (b.get("ms_p20", b["ms"]), b.get("ms_p80", b["ms"]))})
    return out


def write_counts(params: dict, M: int, N: int) -> np.ndarray:
    """How many times each element of C is written, block by block, as the kernel's index math says."""
    rows, cols = strips(params, M, N)
    ty, tx = np.meshgrid(np.arange(params["BY"]), np.arange(params["BX"]), indexing="ij")
    hits = np.zeros((M, N), dtype=int)
    for r, c in zip(rows, cols):
        row, col = r * params["BY"] + ty, c * params["BX"] + tx
        inside = (row < M) & (col < N)
        np.add.at(hits, (row[inside], col[inside]), 1)
    return hits


# ------------------------------------------------------------ block schedule
def schedule_summary(trace, params: dict, M: int, N: int, K: int, samples: int = 19) -> dict:
    """What the blocks running at the same moment share, from a trace (blocks, 3): SM, start, end.

    At ``samples`` moments over the middle of the run, over the blocks in flight: how many
    there are, the distinct row strips (rows of A) and column strips (columns of B) they
    cover, overall and per SM, and the bytes of A and B those strips span.
    """
    trace = np.asarray(trace, dtype=np.int64)
    sm, t0, t1 = trace[:, 0], trace[:, 1] - trace[:, 1].min(), trace[:, 2] - trace[:, 1].min()
    row_strip, col_strip = (np.asarray(s) for s in strips(params, M, N))
    run = float(t1.max())
    out = []
    for s in range(samples):
        t = run * (0.05 + 0.9 * s / max(samples - 1, 1))
        live = np.nonzero((t0 <= t) & (t < t1))[0]
        if live.size == 0:
            continue
        per_sm = [live[sm[live] == s_id] for s_id in np.unique(sm[live])]
        rows_n, cols_n = np.unique(row_strip[live]).size, np.unique(col_strip[live]).size
        out.append({"t_frac": t / run, "in_flight": int(live.size), "row_strips": int(rows_n),
                    "col_strips": int(cols_n), "a_mb": rows_n * params["BY"] * K * 4 / 2**20,
                    "b_mb": cols_n * params["BX"] * K * 4 / 2**20,
                    "sm_blocks": float(np.mean([m.size for m in per_sm])),
                    "sm_row_strips": float(np.mean([np.unique(row_strip[m]).size for m in per_sm])),
                    "sm_col_strips": float(np.mean([np.unique(col_strip[m]).size for m in per_sm]))})
    keys = ("in_flight", "row_strips", "col_strips", "a_mb", "b_mb", "sm_blocks", "sm_row_strips", "sm_col_strips")
    med = {k: float(np.median([o[k] for o in out])) if out else 0.0 for k in keys}
    first = np.argsort(t0, kind="stable")
    return {"params": dict(params), "M": M, "N": N, "K": K, "blocks": int(len(trace)), "run_ms": run / 1e6,
            "sms": int(np.unique(sm).size), "block_ms_median": float(np.median(t1 - t0)) / 1e6,
            "median": med, "samples": out,
            "start_order_is_launch_order": float(np.mean(np.diff(first[:2000]) > 0))}


def simulate_trace(params: dict, M: int, N: int, device: Device, per_sm: int = 8, block_ns: int = 1000):
    """A toy trace: blocks issued in launch order to SMs round-robin, equal durations
    (what a scheduler that fills every SM in turn would produce)."""
    rows, _ = strips(params, M, N)
    trace = np.zeros((len(rows), 3), dtype=np.int64)
    slots = device.sm_count * per_sm
    for b in range(len(rows)):
        wave, pos = divmod(b, slots)
        trace[b] = (pos % device.sm_count, wave * block_ns, (wave + 1) * block_ns)
    return trace


# ------------------------------------------------------------ model vs measurement
def ceiling_fit(rows: list[dict], device: Device, mapping: str = "coalescing") -> list[dict]:
    """Each square row of a one-thread-per-element kernel next to its L1-line ceiling:
    lines per k, the ceiling, the measured TFLOP/s and the ratio measured / ceiling."""
    out = []
    for r in rows:
        if r["M"] == r["N"] == r["K"] and "BX" in r["params"]:
            bx, by = r["params"]["BX"], r["params"]["BY"]
            cap = l1_ceiling(bx, by, device, mapping)
            out.append({"n": r["M"], "BX": bx, "BY": by, "SWAP": r["params"].get("SWAP"),
                        "lines": per_k_step(mapping, bx, by)["lines"], "ceiling": cap, "tflops": r["tflops"],
                        "ratio": r["tflops"] / cap})
    return out


def swap_analysis(rows: list[dict], device: Device, tolerance_pct: float = 1.0) -> list[dict]:
    """The swap gains of :func:`swap_gain` per n, tested against the L2 argument.

    Per n: whether the three operands fit in the device's L2, the gains sorted by
    BX / BY, and the shapes that contradict "the gain grows with BX / BY": a shape whose
    median gain is more than ``tolerance_pct`` points below that of a shape with a smaller ratio
    (``within_spread``: the two gains' ranges over the time bands still overlap).
    """
    gains = swap_gain(rows)
    out = []
    for n in sorted({g["n"] for g in gains}):
        sel = sorted((g for g in gains if g["n"] == n), key=lambda g: (g["rereads_b_over_a"], g["BX"]))
        against = []
        for g in sel:
            before = [h for h in sel if h["rereads_b_over_a"] < g["rereads_b_over_a"]]
            if before:
                best = max(before, key=lambda h: h["gain_pct"])
                if g["gain_pct"] < best["gain_pct"] - tolerance_pct:
                    against.append({**g, "below": best,
                                    "within_spread": g["gain_hi_pct"] >= best["gain_lo_pct"] - tolerance_pct})
        operands = 3 * 4 * n * n
        out.append({"n": n, "operands_bytes": operands, "fits_in_l2": operands <= device.l2_bytes, "gains": sel,
                    "against": against, "min_pct": min(g["gain_pct"] for g in sel),
                    "max_pct": max(g["gain_pct"] for g in sel)})
    return out
