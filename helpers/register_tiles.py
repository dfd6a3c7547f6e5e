"""2D register tiles: what a TM x TN thread tile buys, what it costs, and its index math.

Taught in the chapters "2D thread tiles", "float4 loads" and "Bank conflicts".

* :func:`fma_per_load` -- a thread reads TM values of A and TN of B from shared
  memory per k and does TM * TN multiply-adds with them: the ratio is what the
  register tile buys.
* :func:`live_registers` / :func:`register_budget` -- what it costs: the TM * TN
  accumulators and TM + TN operands stay in registers, against what a thread may
  have when two blocks share an SM.
* :func:`emulate` -- a NumPy model of the *index math* of kernels 05, 06 and 07,
  block by block and thread by thread: which elements each thread loads, where
  it stores them in shared memory, what it reads back and which elements of C it
  writes. It asserts every global access is in bounds (and 16-byte aligned where
  the kernel uses float4), every shared tile is completely filled, and returns C
  with a count of writes per element, so a CPU test can check an odd shape before
  any GPU runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .registry import cdiv


# ------------------------------------------------------------------ the model
def fma_per_load(TM: int, TN: int) -> float:
    """Multiply-adds per float read from shared memory in the inner product.

    One k step: TM loads of A, TN loads of B, TM * TN FMAs. 1 for a 1x1 tile,
    TM / (TM + 1) for the 1D tile of TM x 1, 4 for 8 x 8.
    """
    return TM * TN / (TM + TN)


def shared_loads_per_fma(TM: int, TN: int) -> float:
    return 1 / fma_per_load(TM, TN)


def live_registers(TM: int, TN: int) -> int:
    """Values the inner product keeps in registers: TM*TN accumulators + TM + TN operands."""
    return TM * TN + TM + TN


def register_budget(threads: int) -> int:
    """Registers one thread may use when blocks of ``threads`` threads run 2 per SM
    (up to 256 threads) or 1 per SM (more): 65536 per SM, at most 255 per thread."""
    from .specs.thread_tile_2d import register_budget as budget

    return budget(threads)


@dataclass(frozen=True)
class TileCost:
    TM: int
    TN: int
    threads: int
    fma_per_load: float
    live: int        # accumulators + operands
    needed: int      # + loads in flight and ~16 for addresses: the kernel's register rule
    budget: int

    @property
    def fits(self) -> bool:
        return self.needed <= self.budget


def tile_cost(BM: int, BN: int, TM: int, TN: int, BK: int = 16, vector: bool = False) -> TileCost:
    """What a TM x TN tile costs in a BM x BN block (kernel 05's register rule, or 06's)."""
    from .specs.thread_tile_2d import registers_needed

    threads = (BM // TM) * (BN // TN)
    p = dict(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
    return TileCost(TM, TN, threads, fma_per_load(TM, TN), live_registers(TM, TN),
                    registers_needed(p, vector), register_budget(threads))


def resource_table(kernel: str, configs: list[dict]) -> list[dict]:
    """Offline sm_90 compile of each config: registers, spills, shared memory, occupancy.

    A config the spec refuses gets a row whose ``refused`` says why.
    """
    from .occupancy import occupancy
    from .registry import ConfigError, get
    from .resources import resources

    spec = get(kernel)
    rows = []
    for cfg in configs:
        row = {"config": spec.label_of(spec.resolve(cfg))}
        try:
            full = spec.validate(cfg)
        except ConfigError as exc:
            row["refused"] = str(exc).split(": ", 1)[-1].split(". A valid")[0]
            rows.append(row)
            continue
        res = resources(spec, full)
        threads = spec.block(full)[0]
        occ = occupancy(threads, res.registers, res.smem)
        row.update(threads=threads, registers=res.registers, spill_bytes=res.spill_stores + res.spill_loads,
                   smem_bytes=res.smem, blocks_per_sm=occ.blocks_per_sm,
                   warps_per_sm=f"{occ.active_warps}/{occ.max_warps}", limited_by=occ.limiter)
        rows.append(row)
    return rows


# ------------------------------------------------------------- the emulation
class IndexError_(AssertionError):
    """The emulated kernel made an access it must never make."""


@dataclass
class Emulated:
    C: np.ndarray        # the result, NaN where nothing was written
    writes: np.ndarray   # how many times each element of C was written
    float4_loads: int    # global float4 loads issued (06, 07)
    scalar_loads: int    # global scalar loads issued


def _check(cond, what):
    if not np.all(cond):
        raise IndexError_(what)


def _load4(X, r, c, aligned, stats):
    """Vector of float4 loads as load4_guarded does them: r, c are arrays of lanes."""
    rows, cols = X.shape
    out = np.zeros((len(r), 4), dtype=np.float64)
    vec = aligned & (r < rows) & (c + 3 < cols)
    if vec.any():
        flat = r[vec] * cols + c[vec]
        _check(flat % 4 == 0, "misaligned float4 load")
        for j in range(4):
            out[vec, j] = X[r[vec], c[vec] + j]
        stats[0] += int(vec.sum())
    for j in range(4):
        ok = ~vec & (r < rows) & (c + j < cols)
        out[ok, j] = X[r[ok], c[ok] + j]
        stats[1] += int(ok.sum())
    return out


def emulate(kernel: str, A: np.ndarray, B: np.ndarray, params: dict | None = None) -> Emulated:
    """Run kernel 05, 06 or 07's index math in NumPy (float64) on A @ B."""
    from .registry import get

    spec = get(kernel)
    p = spec.validate(params)
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    M, K = A.shape
    N = B.shape[1]
    C = np.full((M, N), np.nan)
    writes = np.zeros((M, N), dtype=np.int64)
    stats = [0, 0]
    gx, gy, _ = spec.grid(p, M, N, K)
    for by in range(gy):
        for bx in range(gx):
            {"thread_tile_2d": _block_2d, "vectorized": _block_vec, "bank_conflicts": _block_vec}[kernel](
                kernel, p, A, B, C, writes, bx, by, stats)
    return Emulated(C, writes, stats[0], stats[1])


def _block_2d(kernel, p, A, B, C, writes, bx, by, stats):
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    M, K = A.shape
    N = B.shape[1]
    T = (BM // TM) * (BN // TN)
    tid = np.arange(T)
    tcol, trow = tid % (BN // TN), tid // (BN // TN)
    row0, col0 = by * BM, bx * BN
    inside = row0 + BM <= M and col0 + BN <= N
    a_step, b_step = T // BK, T // BN
    a_loads, b_loads = cdiv(BM, a_step), cdiv(BK, b_step)
    a_row, a_col = tid // BK, tid % BK
    b_row, b_col = tid // BN, tid % BN
    acc = np.zeros((T, TM, TN))
    for k0 in range(0, K, BK):
        As = np.full((BM, BK), np.nan)
        Bs = np.full((BK, BN), np.nan)
        fast = inside and k0 + BK <= K
        for l in range(a_loads):
            r = a_row + l * a_step
            live = r < BM if BM % a_step else np.ones(T, bool)
            gr, gc = row0 + r[live], k0 + a_col[live]
            if fast:
                _check((gr < M) & (gc < K), "fast path reads outside A")
                As[r[live], a_col[live]] = A[gr, gc]
            else:
                ok = (gr < M) & (gc < K)
                vals = np.zeros(len(gr))
                vals[ok] = A[gr[ok], gc[ok]]
                As[r[live], a_col[live]] = vals
            stats[1] += int(live.sum())
        for l in range(b_loads):
            r = b_row + l * b_step
            live = r < BK if BK % b_step else np.ones(T, bool)
            gr, gc = k0 + r[live], col0 + b_col[live]
            if fast:
                _check((gr < K) & (gc < N), "fast path reads outside B")
                Bs[r[live], b_col[live]] = B[gr, gc]
            else:
                ok = (gr < K) & (gc < N)
                vals = np.zeros(len(gr))
                vals[ok] = B[gr[ok], gc[ok]]
                Bs[r[live], b_col[live]] = vals
            stats[1] += int(live.sum())
        _check(~np.isnan(As), "a shared A-tile element was never stored")
        _check(~np.isnan(Bs), "a shared B-tile element was never stored")
        for k in range(BK):
            a = As[trow[:, None] * TM + np.arange(TM), k]
            b = Bs[k, tcol[:, None] * TN + np.arange(TN)]
            acc += a[:, :, None] * b[:, None, :]
    for m in range(TM):
        for n in range(TN):
            row, col = row0 + trow * TM + m, col0 + tcol * TN + n
            ok = np.ones(len(tid), bool) if inside else (row < M) & (col < N)
            _check((row[ok] < M) & (col[ok] < N), "store outside C")
            C[row[ok], col[ok]] = acc[ok, m, n]
            np.add.at(writes, (row[ok], col[ok]), 1)


def _block_vec(kernel, p, A, B, C, writes, bx, by, stats):
    """Kernels 06 (vectorized) and 07 (bank_conflicts): float4 loads, transposed A tile."""
    if kernel == "bank_conflicts":
        BM = BN = 128
        TM = TN = 8
        BK, SPLIT, PAD, SWIZZLE = p["BK"], p["SPLIT"], p["PAD"], p["SWIZZLE"]
    else:
        BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
        SPLIT = PAD = SWIZZLE = 0
    M, K = A.shape
    N = B.shape[1]
    T = (BM // TM) * (BN // TN)
    tid = np.arange(T)
    tcol, trow = tid % (BN // TN), tid // (BN // TN)
    row0, col0 = by * BM, bx * BN
    a_vec, b_vec = K % 4 == 0, N % 4 == 0
    inside = a_vec and b_vec and row0 + BM <= M and col0 + BN <= N
    a_step, b_step = T // (BK // 4), T // (BN // 4)
    a_loads, b_loads = cdiv(BM, a_step), cdiv(BK, b_step)
    a_row, a_col = tid // (BK // 4), 4 * (tid % (BK // 4))
    b_row, b_col = tid // (BN // 4), 4 * (tid % (BN // 4))
    rpw = 32 // (BK // 4)

    def a_idx(k, m):
        return m ^ ((k // 4) * rpw % 32) if SWIZZLE else m

    if SPLIT:
        m_of = [trow * 4, trow * 4 + BM // 2]
        n_of = [tcol * 4, tcol * 4 + BN // 2]
    else:
        m_of = [trow * TM + 4 * g for g in range(TM // 4)]
        n_of = [tcol * TN + 4 * g for g in range(TN // 4)]
    acc = np.zeros((T, TM, TN))
    for k0 in range(0, K, BK):
        As = np.full((BK, BM + PAD), np.nan)
        Bs = np.full((BK, BN), np.nan)
        fast = inside and k0 + BK <= K
        for l in range(a_loads):
            r = a_row + l * a_step
            live = r < BM if BM % a_step else np.ones(T, bool)
            gr, gc = row0 + r[live], k0 + a_col[live]
            if fast:
                _check((gr < M) & (gc + 3 < K), "fast path reads outside A")
                _check((gr * K + gc) % 4 == 0, "misaligned float4 load of A")
                v = np.stack([A[gr, gc + j] for j in range(4)], axis=1)
                stats[0] += len(gr)
            else:
                v = _load4(A, gr, gc, a_vec, stats)
            for j in range(4):
                kk = a_col[live] + j
                cols = np.array([a_idx(int(x), int(y)) for x, y in zip(kk, r[live])], dtype=np.int64)
                _check(cols < BM + PAD, "store outside the A tile's row")
                As[kk, cols] = v[:, j]
        for l in range(b_loads):
            r = b_row + l * b_step
            live = r < BK if BK % b_step else np.ones(T, bool)
            gr, gc = k0 + r[live], col0 + b_col[live]
            if fast:
                _check((gr < K) & (gc + 3 < N), "fast path reads outside B")
                _check((gr * N + gc) % 4 == 0, "misaligned float4 load of B")
                v = np.stack([B[gr, gc + j] for j in range(4)], axis=1)
                stats[0] += len(gr)
            else:
                v = _load4(B, gr, gc, b_vec, stats)
            for j in range(4):
                Bs[r[live], b_col[live] + j] = v[:, j]
        _check(~np.isnan(Bs), "a shared B-tile element was never stored")
        for k in range(BK):
            a = np.empty((T, TM))
            b = np.empty((T, TN))
            for g, m in enumerate(m_of):
                base = np.array([a_idx(k, int(x)) for x in m])
                _check(((k * (BM + PAD) + base) % 4 == 0) | (PAD % 4 != 0), "misaligned LDS.128 of As")
                for j in range(4):
                    a[:, 4 * g + j] = As[k, base + j]          # pa[j]: four floats from the same base
            for g, n in enumerate(n_of):
                _check((k * BN + n) % 4 == 0, "misaligned LDS.128 of Bs")
                for j in range(4):
                    b[:, 4 * g + j] = Bs[k, n + j]
            _check(~np.isnan(a), "read an A-tile element that was never stored")
            _check(~np.isnan(b), "read a B-tile element that was never stored")
            acc += a[:, :, None] * b[:, None, :]
    for m in range(TM):
        row = row0 + m_of[m // 4] + m % 4
        for g, n in enumerate(n_of):
            col = col0 + n
            vec = np.full(T, inside) | (b_vec & (row < M) & (col + 3 < N))
            _check((row[vec] < M) & (col[vec] + 3 < N), "float4 store outside C")
            _check((row[vec] * N + col[vec]) % 4 == 0, "misaligned float4 store to C")
            for j in range(4):
                C[row[vec], col[vec] + j] = acc[vec, m, 4 * g + j]
                np.add.at(writes, (row[vec], col[vec] + j), 1)
                ok = ~vec & (row < M) & (col + j < N)
                C[row[ok], col[ok] + j] = acc[ok, m, 4 * g + j]
                np.add.at(writes, (row[ok], col[ok] + j), 1)


# ------------------------------------------------------------ for the chapters
def html_table(rows: list[dict], columns: list[str] | None = None, caption: str = ""):
    """A small HTML table of dicts (the book has no pandas)."""
    import html

    from IPython.display import HTML

    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f"<table class='table'>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10000:
        return f"{v:,}"
    return str(v)


def fma_figure(BM: int = 128, BN: int = 128, sizes=(1, 2, 4, 8, 16)):
    """Heatmap over TM x TN: multiply-adds per shared load, with the registers the tile needs
    against what a thread may use when the block is BM x BN (crossed out where it does not fit)."""
    import plotly.graph_objects as go

    from .plots import TEMPLATE

    z, text, hover = [], [], []
    for TM in sizes:
        zr, tr, hr = [], [], []
        for TN in sizes:
            c = tile_cost(BM, BN, TM, TN)
            ok = c.fits and c.threads % 32 == 0 and c.threads <= 1024
            zr.append(c.fma_per_load)
            tr.append(f"{c.fma_per_load:.2g}" + ("" if ok else " ✗"))
            why = ("fits" if ok else "too many threads" if c.threads > 1024 else
                   "not whole warps" if c.threads % 32 else "does not fit")
            hr.append(f"TM={TM}, TN={TN}: {c.fma_per_load:.2f} FMA per shared load<br>"
                      f"{c.threads} threads per {BM}x{BN} block<br>{c.live} values live in registers, "
                      f"about {c.needed} registers needed, {c.budget} allowed: {why}")
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    fig = go.Figure(go.Heatmap(z=z, x=[str(s) for s in sizes], y=[str(s) for s in sizes], text=text,
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text", colorscale="Blues",
                               colorbar=dict(title="FMA per<br>shared load")))
    fig.update_xaxes(title="TN (columns per thread)", type="category")
    fig.update_yaxes(title="TM (rows per thread)", type="category", autorange="reversed")
    fig.update_layout(template=TEMPLATE, height=440, width=560,
                      title=f"TM·TN / (TM + TN) on a {BM}x{BN} block; ✗: needs more registers than a thread gets")
    return fig


MEMORY_OPS = ("LDG.E", "LDG.E.128", "STS", "STS.128", "LDS", "LDS.64", "LDS.128", "STG.E", "STG.E.128")


def memory_ops(sass_text: str) -> dict:
    """Count memory instructions by width (``.CONSTANT`` and other cache hints dropped)."""
    from .resources import instructions

    out = {op: 0 for op in MEMORY_OPS}
    for _, op in instructions(sass_text):
        parts = op.split(".")
        if parts[0] not in ("LDG", "STG", "LDS", "STS"):
            continue
        width = next((p for p in parts[1:] if p in ("64", "128")), None)
        key = parts[0] + (".E" if parts[0] in ("LDG", "STG") else "") + (f".{width}" if width else "")
        out[key] = out.get(key, 0) + 1
    return out


def slice_instructions(kernel: str, params: dict | None = None) -> dict:
    """Instructions one thread issues per k-slice on an inner tile (the fast path), by kind.

    Kernel 05 loads one float per instruction and stores it as is; kernel 06 loads
    float4 (LDG.E.128), stores A's four floats transposed (4 x STS) and B's as one
    STS.128. Both read operands with LDS.128: 06 explicitly, 05 because the compiler
    merges four consecutive k of a row of ``As`` (as its SASS shows).
    """
    from .registry import get
    from .specs.thread_tile_2d import loads_per_thread

    p = get(kernel).validate(params)
    BK, TM, TN = p["BK"], p["TM"], p["TN"]
    out = {"FFMA": BK * TM * TN, "LDS.128": BK * TM // 4 + BK * TN // 4}
    if kernel == "thread_tile_2d":
        a, b = loads_per_thread(p, vector=False)
        out.update({"LDG.E": a + b, "STS": a + b})
    elif kernel == "vectorized":
        a, b = loads_per_thread(p, vector=True)
        out.update({"LDG.E.128": a + b, "STS": 4 * a, "STS.128": b})
    else:
        raise ValueError(f"no instruction model for {kernel!r}")
    return out
