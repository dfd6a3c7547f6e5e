"""Tuning the final kernel on a GPU: the plan, the compiles, the timing (``scripts/tune_final.py`` runs it).

    python scripts/tune_final.py OUT.json [--budget 330] [--jobs 16] [--stages squares,layouts,broad]
    python scripts/tune_final.py OUT.json --dry-run        # the plan only, no GPU needed

Three stages, cuBLAS (cupy.matmul, TF32 off) timed at every shape and layout in the same run:

1. squares: every inner-loop variant of VARIANTS (k-loop unrolling, stream-K, tile shape,
   stages) at n = 4096 and 8192, A and B row-major; cuBLAS timed before and after them;
2. layouts: NT, TN and TT (A and/or B a transposed view) at 4096, 8192 and the suite
   shapes: the dispatcher's choice and the large variants, against cuBLAS on the same views;
3. broad: every option of every candidate of the dispatcher (block tile x split of K x
   stream-K; on the suite's shapes also packing, without a split) on the suite and the broad suite
   (helpers.shapes): the table from which
   scripts/fit_dispatch.py fits the model's constants.

Every config is compiled first, in parallel processes (CuPy's disk cache keeps the
binaries), and checked against cuBLAS on fresh random data in [-1, 1] before it is timed
(C starts as NaN). The JSON is rewritten after every shape, so an interrupted run keeps
what it measured; a summary is printed last. Stages stop starting new shapes once the
budget (seconds since the start) is spent; the rows say what was skipped.
"""
from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import secrets
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path


from ..runtime.spec import cdiv
from ..runtime.specs import final
from ..runtime.specs.final import CANDIDATES, MAX_PARTS, SPEC, choose_config, label, options
from ..shapes import SUITE, broad_suite
from .record import git_commit

D = SPEC.defaults()
L = dict(D, BM=128, BN=256, BK=32, WM=64, WN=64, TM=16, TN=8, STAGES=2, GROUP=8, KU=0, SPLITK=1, STREAMK=0)
T = dict(L, BM=256, BN=128)                       # 256 x 128: the other orientation of the same work
F = dict(L, BM=64, BN=256, BK=16, TM=8, TN=16, STAGES=5, KU=2)   # 64 x 256: half the block, 2 per SM
# Inner-loop variants timed at n = 4096 and 8192 (A, B row-major).
VARIANTS = {
    "L": L,                                       # the whole k-slice of 32 unrolled (the old default)
    "L.u4": dict(L, KU=4),                        # 4 k-steps per trip: the loop fits the instruction cache
    "L.u8": dict(L, KU=8),
    "L.u16": dict(L, KU=16),
    "L.sk": dict(L, STREAMK=1),                   # stream-K over the last tiles
    "L.u4.sk": dict(L, KU=4, STREAMK=1),
    "L.u8.sk": dict(L, KU=8, STREAMK=1),
    "L.s3.u4": dict(L, STAGES=3, KU=4),           # three stages of 32
    "L.k16.s3.u4": dict(L, BK=16, STAGES=3, KU=4),
    "L.k16.s4": dict(L, BK=16, STAGES=4),
    "L.t8x16.u4": dict(L, TM=8, TN=16, KU=4),     # 8 x 16 per thread: 2 A and 4 B fragment loads
    "L.g16.u4.sk": dict(L, GROUP=16, KU=4, STREAMK=1),
    "T.u4": dict(T, KU=4),
    "T.u4.sk": dict(T, KU=4, STREAMK=1),
    "F.s5.u2": F,                                 # the "flat" candidate
    "F.s4.u2": dict(F, STAGES=4),
    "F.s5.u4": dict(F, KU=4),
}
SQUARES = (4096, 8192)
LAYOUT_NAMES = ("NT", "TN", "TT")
LAYOUT_EXTRA = ("L.u4", "L.u4.sk", "L.u8.sk", "T.u4.sk", "F.s5.u2")     # besides the choice, at the square sizes


# ------------------------------------------------------------------ the plan
def plan(stages, device, quick=False) -> list[dict]:
    """Work items: {stage, shape, layout, name, params}, in the order they run."""
    items = []
    if "squares" in stages:
        names = ["L", "L.u4", "L.u4.sk", "T.u4"] if quick else list(VARIANTS)
        for n in SQUARES[:1] if quick else SQUARES:
            items += [dict(stage="squares", shape=(n, n, n), layout="NN", name=v, params=VARIANTS[v]) for v in names]
    if "layouts" in stages:
        shapes = [(n, n, n) for n in SQUARES] + ([] if quick else list(SUITE))
        for lay in LAYOUT_NAMES[:1] if quick else LAYOUT_NAMES:
            a_t, b_t = final.LAYOUTS[lay]
            for shape in shapes:
                chosen = choose_config(*shape, device, a_t, b_t)
                got = [("chosen", chosen)]
                if shape[0] == shape[1] == shape[2] and shape[0] in SQUARES:
                    got += [(v, dict(VARIANTS[v], A_T=a_t, B_T=b_t)) for v in LAYOUT_EXTRA]
                seen = []
                for name, p in got:
                    if p not in seen and SPEC.is_valid(p, device):
                        seen.append(p)
                        items.append(dict(stage="layouts", shape=shape, layout=lay, name=name, params=p))
    if "broad" in stages:
        shapes = list(SUITE) + broad_suite()
        for shape in shapes[:6] if quick else shapes:
            for c in CANDIDATES:
                if not SPEC.is_valid(c.params, device):
                    continue
                # packing an operand first: on the suite's shapes only, and without a split of K
                # (where it pays), so that the run stays short; the pack's own cost is measured by
                # the question pack (helpers.measure.final_experiments)
                for p in options(c, *shape, device=device, packing=shape in SUITE):
                    if (p["PACK_A"] or p["PACK_B"]) and p["SPLITK"] > 1:
                        continue
                    items.append(dict(stage="broad", shape=shape, layout="NN", name=c.name, params=p))
    return items


def resolved(p: dict) -> dict:
    return SPEC.resolve(p)


def key(p: dict) -> str:
    return json.dumps(resolved(p), sort_keys=True)


# ------------------------------------------------------------- compiling
def _compile_one(params: dict, file: str | None = None) -> tuple[str, float, str]:
    """In a worker process: compile one config (of kernels/``file``, another version of the
    final kernel, if given) into CuPy's disk cache."""
    t0 = time.time()
    try:
        from .. import hardware
        from ..runtime.compile import compile_kernel

        spec = dataclasses.replace(SPEC, file=file) if file else SPEC
        compile_kernel(spec, SPEC.validate(params, device=hardware.current()), hardware.current())
        return key(params), time.time() - t0, ""
    except Exception as exc:  # a compile failure is a result
        return key(params), time.time() - t0, f"{type(exc).__name__}: {exc}"[:600]


def compile_all(configs: list[dict], jobs: int, log, file: str | None = None) -> dict:
    """Compile every config (of kernels/``file`` if given), ``jobs`` processes at a time;
    {key: error or ""}."""
    order = sorted(configs, key=lambda p: (p["KU"] != 0, -p["BK"]))      # the longest compiles first
    errors, t0 = {}, time.time()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_compile_one, p, file) for p in order]
        for i, f in enumerate(as_completed(futures), 1):
            k, secs, err = f.result()
            errors[k] = err
            if err or i % 10 == 0 or i == len(futures):
                log(f"  compiled {i}/{len(futures)} ({time.time() - t0:.0f} s){'  ERROR ' + err[:200] if err else ''}")
    return errors


# ------------------------------------------------------------- measuring
class Tuner:
    def __init__(self, out: Path, budget_s: float, log=print):
        import cupy

        from .. import hardware
        from ..runtime.check import require_fp32_cublas

        require_fp32_cublas()
        self.cupy, self.out, self.budget_s, self.log = cupy, out, budget_s, log
        self.t0 = time.time()
        self.device = hardware.current()
        self.seed = secrets.randbits(31)
        self.rng = cupy.random.default_rng(self.seed)
        self.rows: list[dict] = []
        self.cublas: list[dict] = []
        self.compile_errors: dict = {}
        props = cupy.cuda.runtime.getDeviceProperties(0)
        self.meta = dict(device=dict(self.device.as_record(), label=self.device.label),
                         gpu=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                         cupy=cupy.__version__, driver=cupy.cuda.runtime.driverGetVersion(),
                         source_hash=SPEC.source_hash(), commit=git_commit(), seed=self.seed,
                         started=time.strftime("%Y-%m-%dT%H:%M:%S"),
                         candidates={c.name: {k: v for k, v in dataclasses.asdict(c).items() if k != "name"}
                                     for c in CANDIDATES},              # every number the model had
                         constants=dataclasses.asdict(final.CONSTANTS),
                         variants=VARIANTS)

    def left(self) -> float:
        return self.budget_s - (time.time() - self.t0)

    def operands(self, M, N, K, lay, count):
        """``count`` sets of (A, B, C) on the GPU in the layout (views of fresh random matrices)."""
        from ..runtime.check import random_matrix

        a_t, b_t = final.LAYOUTS[lay]
        out = []
        for _ in range(count):
            A = random_matrix(K, M, self.rng).T if a_t else random_matrix(M, K, self.rng)
            B = random_matrix(N, K, self.rng).T if b_t else random_matrix(K, N, self.rng)
            out.append((A, B, self.cupy.full((M, N), math.nan, dtype=self.cupy.float32)))
        return out

    def padded(self, bufs, which: str):
        """The same operands with the rows of B (``which`` has "B") or C ("C") 16 bytes apart:
        views of buffers whose rows are padded to a multiple of 4 floats (row-major only)."""
        cp = self.cupy

        def pad(X):
            rows, cols = X.shape
            P = cp.full((rows, cdiv(cols, 4) * 4), math.nan, dtype=cp.float32)
            P[:, :cols] = X
            return P[:, :cols]
        return [(A, pad(B) if "B" in which else B, pad(C) if "C" in which else C) for A, B, C in bufs]

    def time_cublas(self, bufs, target_s):
        from ..runtime.timing import time_fn

        return time_fn(lambda A, B, C: self.cupy.matmul(A, B, out=C), bufs, target_s=target_s)

    def shape(self, stage, shape, lay, items, target_s):
        """Check and time every item at one shape and layout, with cuBLAS before and after."""
        from ..runtime.check import compare
        from ..runtime.launch import prepare
        from ..runtime.timing import buffer_count, time_fn, tflops

        cp = self.cupy
        M, N, K = shape
        count = buffer_count(M, N, K, self.device.l2_bytes, cp.cuda.Device().mem_info[0])
        bufs = self.operands(M, N, K, lay, count)
        A, B, C = bufs[0]
        ref = cp.matmul(A, B)
        before = self.time_cublas(bufs, target_s)
        item_bufs = bufs
        for it in items:
            item_bufs = self.padded(bufs, it["pad"]) if it.get("pad") else bufs   # an item may pad rows
            A, B, C = item_bufs[0]
            p = resolved(it["params"])
            row = dict(stage=stage, M=M, N=N, K=K, layout=lay, name=it["name"], params=p, label=label(p),
                       **({"pad": it["pad"]} if it.get("pad") else {}))
            err = self.compile_errors.get(key(p), "")
            # an item may name another version of the kernel (spec) and another stream-K cap
            row.update({k: it[k] for k in ("max_parts", "model_ms") if k in it})
            try:
                if err:
                    raise RuntimeError(err)
                launcher = prepare(it.get("spec", SPEC), M, N, K, p, self.device,
                                   geometry=dict(max_parts=it.get("max_parts", MAX_PARTS)))

                def run(A, B, C, launcher=launcher):
                    launcher.launch(final.arguments(launcher.params, M, N, K, A, B, C, launcher.workspace()))

                C.fill(math.nan)
                run(A, B, C)
                c = compare(C, ref, A, B)
                t = time_fn(run, item_bufs, target_s=target_s)
                attrs = launcher.kernel.attributes
                row.update(ms=t.ms, ms_p20=t.ms_p20, ms_p80=t.ms_p80, reps=t.reps, tflops=tflops(M, N, K, t.ms),
                           ok=bool(c.ok), rel_err=c.rel_err if math.isfinite(c.rel_err) else None,
                           grid=list(launcher.grid), registers=attrs.get("num_regs"),
                           local_bytes=attrs.get("local_size_bytes"))
            except Exception as exc:  # a failure is a row, not the end of the run
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
            self.rows.append(row)
        after = self.time_cublas(bufs, target_s)
        cub = min(before.ms, after.ms)
        self.cublas.append(dict(stage=stage, M=M, N=N, K=K, layout=lay, ms=cub, ms_before=before.ms,
                                ms_after=after.ms, tflops=tflops(M, N, K, cub)))
        for row in self.rows[-len(items):]:
            row.update(cublas_ms=cub, cublas_tflops=tflops(M, N, K, cub))
            if "ms" in row:
                row["pct"] = 100 * cub / row["ms"]
        del bufs, item_bufs, A, B, C, ref
        cp.get_default_memory_pool().free_all_blocks()
        self.save()
        mine = [r for r in self.rows[-len(items):] if r.get("ok")]
        best = max(mine, key=lambda r: r["pct"]) if mine else None
        bad = [r for r in self.rows[-len(items):] if not r.get("ok")]
        self.log(f"[{time.time() - self.t0:5.0f} s] {stage:7s} {lay} {M}x{N}x{K}: cuBLAS {tflops(M, N, K, cub):6.2f} "
                 f"TFLOP/s; best {best['pct'] if best else 0:5.1f}% ({best['label'] if best else '-'})"
                 + (f"; {len(bad)} FAILED/WRONG: " + "; ".join(f"{r['label']}: {r.get('error', 'wrong result')}"
                                                            for r in bad[:3]) if bad else ""))

    def save(self):
        doc = dict(self.meta, elapsed_s=round(time.time() - self.t0, 1), cublas=self.cublas, rows=self.rows)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(self.out)


# ------------------------------------------------------------- summary
def geomean(values) -> float:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


def summary(rows: list[dict], device) -> list[str]:
    """The lines printed last: squares, layouts, the broad suite and the model's choices."""
    out = []
    ok = [r for r in rows if r.get("ok") and r.get("pct")]
    sq = [r for r in ok if r["stage"] == "squares"]
    if sq:
        out.append("== squares (NN): % of cuBLAS")
        for name in dict.fromkeys(r["name"] for r in sq):
            cells = [next((f"n={r['M']}: {r['pct']:5.1f}% {r['tflops']:5.1f} TF" for r in sq
                           if r["name"] == name and r["M"] == n), f"n={n}: -") for n in SQUARES]
            out.append(f"  {name:14s} " + "   ".join(cells))
        for n in SQUARES:
            here = [r for r in sq if r["M"] == n]
            if here:
                b = max(here, key=lambda r: r["pct"])
                out.append(f"  best at n={n}: {b['name']} {b['pct']:.1f}% of cuBLAS ({b['tflops']:.1f} vs "
                           f"{b['cublas_tflops']:.1f} TFLOP/s)")
    lay = [r for r in ok if r["stage"] == "layouts"]
    if lay:
        out.append("== layouts: the choice (best measured) % of cuBLAS on the same views")
        for name in LAYOUT_NAMES:
            here = [r for r in lay if r["layout"] == name]
            shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in here))
            cells = []
            for s in shapes:
                at = [r for r in here if (r["M"], r["N"], r["K"]) == s]
                ch = next((r["pct"] for r in at if r["name"] == "chosen"), float("nan"))
                cells.append(f"{'x'.join(map(str, s))} {ch:.0f} ({max(r['pct'] for r in at):.0f})")
            if cells:
                out.append(f"  {name}: " + "; ".join(cells))
    broad = [r for r in ok if r["stage"] == "broad"]
    if broad:
        out += model_lines(broad, device)
    failed = [r for r in rows if not r.get("ok")]
    if failed:
        out.append(f"== {len(failed)} failed or wrong: " + "; ".join(
            f"{r['stage']} {r['M']}x{r['N']}x{r['K']} {r['layout']} {r['label']}: {r.get('error', 'WRONG')}"
            for r in failed[:8]))
    return out


def model_lines(broad: list[dict], device) -> list[str]:
    """Best measured and the current model's choice, per broad/suite shape."""
    shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in broad))
    best_pct, chosen_pct, quality, low = [], [], [], []
    for s in shapes:
        at = [r for r in broad if (r["M"], r["N"], r["K"]) == s]
        best = max(at, key=lambda r: r["pct"])
        pick = choose_config(*s, device)
        got = next((r for r in at if r["params"] == SPEC.resolve(pick)), None)
        best_pct.append(best["pct"])
        if got:
            chosen_pct.append(got["pct"])
            quality.append(got["pct"] / best["pct"])
            if got["pct"] < 80:
                low.append(f"{'x'.join(map(str, s))} {got['pct']:.0f}% ({got['label']}; best {best['pct']:.0f}% "
                           f"{best['label']})")
    suite = [s for s in shapes if s in SUITE]
    out = ["== broad suite and suite (NN)",
           f"  shapes measured: {len(shapes)} ({len(suite)} of the suite)",
           f"  best measured config per shape: geometric mean {geomean(best_pct):.1f}% of cuBLAS, "
           f"lowest {min(best_pct):.1f}%",
           f"  the current model's choice: geometric mean {geomean(chosen_pct):.1f}% of cuBLAS over "
           f"{len(chosen_pct)} shapes, choice quality (chosen/best) {100 * geomean(quality):.1f}%"]
    if low:
        out.append("  chosen under 80%: " + "; ".join(low))
    return out


