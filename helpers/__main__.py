"""Command line: ``python -m helpers {record,bench,sanitize,resources,ncu,list,notebooks} ...``.

A user's mistake (an unknown kernel or chapter, a malformed parameter, no GPU where one
is needed, a data file that cannot be merged into) prints one line ``error: ...`` and
exits with status 2; a run that finds wrong results or sanitizer errors exits with 1.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import hardware, settings
from .hardware import Device
from .measure import autotune as tuning
from .measure import bench, calls, datafile, dispatch_fit, ncu, record, sanitize, sources
from .publish import notebooks
from .runtime import offline
from .runtime.spec import ConfigError
from .runtime.specs import ALL, UnknownKernel, final, get

USER_ERRORS = (ConfigError, UnknownKernel, sources.UnknownChapter, datafile.DataError, record.RecordError,
               settings.SettingError, hardware.DeviceError, offline.ToolMissing)

BENCH_CHAPTERS = {"default": "leaderboard", "broad": "broad_suite", "layouts": "layouts",   # bench --suite -> record key
                  "calls": "calls"}


class UsageError(Exception):
    """A malformed command line."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_params(items: list[str]) -> dict:
    """``["BM=128", "TM=8"]`` -> ``{"BM": 128, "TM": 8}``, with a clear error for anything else."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{item!r}: expected NAME=VALUE, e.g. BM=128")
        try:
            out[name] = int(value)
        except ValueError:
            raise UsageError(f"{item!r}: the value must be an integer") from None
    return out


def json_writer(path: str | None):
    """A function that rewrites ``path`` with the rows so far (atomically), checked writable at once."""
    if not path:
        return None
    if not Path(path).parent.is_dir():
        raise UsageError(f"cannot write {path}: no folder {Path(path).parent}")
    try:
        datafile.write_atomic(Path(path), "[]\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    return lambda rows: datafile.write_atomic(Path(path), json.dumps(rows, indent=1, allow_nan=False))


def need_gpu(what: str) -> None:
    if not hardware.gpu_available():
        raise hardware.DeviceError(f"{what} needs a CUDA GPU (cupy.cuda.is_available() is False)")


def build() -> Parser:
    p = Parser(prog="python -m helpers", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    r = sub.add_parser("record", help="measure chapters on a GPU into book/data/<device>.json")
    r.add_argument("--chapter", action="append", help="a chapter to record (repeatable; default: all)")
    b = sub.add_parser("bench", help="every chapter's kernel vs cuBLAS (GPU)")
    b.add_argument("--quick", action="store_true", help="small sizes and short timing (also SGEMM_BOOK_QUICK)")
    b.add_argument("--kernels", nargs="+", metavar="NAME", help="kernels to run (default: one per chapter)")
    b.add_argument("--suite", choices=tuple(BENCH_CHAPTERS), default="default",
                   help="default: square sizes and the shape suite; broad: the final kernel over the broad suite; "
                        "layouts: helpers.sgemm with A and B as given or transposed (NN, NT, TN, TT); "
                        "calls: helpers.sgemm and cupy.matmul called in a loop (GPU and host time per call)")
    b.add_argument("--json", metavar="PATH", help="also write the rows to this file, as they come")
    b.add_argument("--record", action="store_true",
                   help="store the rows as the chapter 'leaderboard' (or 'broad_suite', 'layouts', 'calls') in book/data")
    b.add_argument("--max-ms", type=float, default=bench.MAX_LAUNCH_MS,
                   help=f"skip a kernel at a shape where one launch would take longer (default {bench.MAX_LAUNCH_MS:g})")
    s = sub.add_parser("sanitize", help="compute-sanitizer memcheck + racecheck over every kernel (GPU)")
    s.add_argument("--tool", action="append", choices=sanitize.ALL_TOOLS, help="default: memcheck and racecheck")
    s.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    s.add_argument("--workers", type=int, help="sanitizer processes at once")
    s.add_argument("--json", metavar="PATH", help="also write the rows to this file, as they come")
    res = sub.add_parser("resources", help="registers, shared memory and spills of a config (offline, no GPU)")
    res.add_argument("kernel")
    res.add_argument("params", nargs="*", metavar="NAME=VALUE")
    n = sub.add_parser("ncu", help="Nsight Compute counters of one config (GPU): shared memory, or (--pipes) "
                       "the instructions each pipe ran")
    n.add_argument("kernel", help=f"a kernel, or {ncu.CUBLAS!r} for cupy.matmul")
    n.add_argument("params", nargs="*", metavar="NAME=VALUE")
    n.add_argument("--n", type=int, default=ncu.SIZE, help=f"the size n of the n x n x n product (default {ncu.SIZE})")
    n.add_argument("--pipes", action="store_true", help="instructions per pipe (FMA, ALU, LSU, uniform) and FFMAs "
                   "instead of the shared-memory counters")
    n.add_argument("--cublas", action="store_true", help="profile cupy.matmul at the same size too")
    n.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"), help="an M x N x K product instead of n^3")
    n.add_argument("--stalls", action="store_true", help="why warps waited (stall reasons per issued instruction) "
                   "instead of the shared-memory counters")
    sub.add_parser("list", help="the registered kernels and their parameters")
    sub.add_parser("funnels", help="count the tuned kernel's valid configs on every recorded device and store "
                   "the counts the autotuning chapter shows (offline, a few minutes)")
    rf = sub.add_parser("refit", help="fit the final kernel's dispatch numbers to the measured tables that "
                        "helpers/runtime/specs/final_dispatch.json names, and write it (offline, about a minute)")
    rf.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    nb = sub.add_parser("notebooks", help="write one self-contained .ipynb per chapter")
    nb.add_argument("--out", default="_build/notebooks", help="output folder (default _build/notebooks)")
    return p


def run(args) -> int:
    if args.cmd == "record":
        record.record(args.chapter)
        return 0
    if args.cmd == "bench":
        if args.record and (args.quick or settings.quick() or args.kernels or args.max_ms != bench.MAX_LAUNCH_MS):
            raise UsageError("--record stores the full default run only: drop --quick, --kernels and --max-ms "
                             "(and unset SGEMM_BOOK_QUICK)")
        if args.suite in ("layouts", "calls") and args.kernels:
            raise UsageError(f"--suite {args.suite} runs helpers.sgemm (the final kernel): drop --kernels")
        kernels = [get(k).name for k in args.kernels] if args.kernels else None
        quick, write = args.quick or settings.quick(), json_writer(args.json)
        need_gpu("bench")
        device = record.check_can_record([]) if args.record else None
        if args.suite == "layouts":
            rows = bench.run_layouts(target_s=0.1 if quick else None, on_row=write)
            print("\n" + bench.format_layouts(rows))
        elif args.suite == "calls":
            rows = calls.run(calls=40 if quick else calls.CALLS, rounds=3 if quick else calls.ROUNDS, on_row=write)
            print("\n" + calls.format_table(rows))
        else:
            rows = bench.run(kernels, quick=quick, suite=args.suite, max_launch_ms=args.max_ms, on_row=write)
            print("\n" + bench.format_table(rows, hardware.current().fp32_tflops))
        if args.record:
            chapter = BENCH_CHAPTERS[args.suite]
            cmd = "python -m helpers bench --record" + (f" --suite {args.suite}" if args.suite != "default" else "")
            path = datafile.save_chapter(chapter, record.entry(device, "table", rows, cmd))
            print(f"\n{chapter} saved to {path}")
        bad = [r for r in rows if r.get("status") == "failed" or (r.get("status") == "measured" and not r["ok"])]
        return 1 if bad else 0
    if args.cmd == "sanitize":
        kernels = [get(k).name for k in args.kernel] if args.kernel else None
        write = json_writer(args.json)
        need_gpu("sanitize")
        rows = sanitize.run_all(tools=tuple(args.tool or sanitize.TOOLS), kernels=kernels, workers=args.workers,
                                on_row=write)
        print(sanitize.format_table(rows))
        bad = [r for r in rows if not r["ok"]]
        for r in bad:
            print(f"\nFAILED: {r['tool']} {r['kernel']} {r['params']} {r['M']}x{r['N']}x{r['K']} "
                  f"(exit {r['returncode']}):\n{r['excerpt']}")
        print(f"{len(rows)} runs, {len(bad)} with unexpected errors")
        return 1 if bad else 0
    if args.cmd == "resources":
        print(offline.resources(get(args.kernel), parse_params(args.params)))
        return 0
    if args.cmd == "ncu":
        need_gpu("ncu")
        kernel = ncu.CUBLAS if args.kernel == ncu.CUBLAS else get(args.kernel).name
        items = [(kernel, parse_params(args.params))] + ([(ncu.CUBLAS, {})] if args.cublas else [])
        metrics = (ncu.STALL_METRICS if args.stalls else ()) + (ncu.PIPE_METRICS if args.pipes else ())
        rows = ncu.collect(items, tuple(args.shape) if args.shape else args.n, metrics or ncu.METRICS,
                           log=lambda *a: print(*a, file=sys.stderr))   # progress apart from the JSON
        print(json.dumps(ncu.stalls(rows) if args.stalls and not args.pipes else ncu.pivot(rows), indent=1))
        return 0 if rows and all(r["metric"] != "error" for r in rows) else 1
    if args.cmd == "list":
        for s in ALL:
            print(f"{s.name:24s} kernels/{s.file:24s} " + ", ".join(f"{p.name}={p.default}" for p in s.params))
        return 0
    if args.cmd == "funnels":
        tuning.store_chapter_counts([Device.from_record(datafile.load(d).chapter("autotuning")["device"])
                                     for d in datafile.device_files() if datafile.load(d).has("autotuning")])
        return 0
    if args.cmd == "refit":
        doc = dispatch_fit.refit_file()
        if args.check:
            diff = dispatch_fit.differences(json.loads(final.DISPATCH_FILE.read_text()), doc)
            print("\n".join(diff) if diff else f"{final.DISPATCH_FILE.name}: the re-fit reproduces it")
            return 1 if diff else 0
        final.DISPATCH_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {final.DISPATCH_FILE}: choice quality on the tables {doc['quality']}")
        return 0
    if args.cmd == "notebooks":
        for path in notebooks.export_all(args.out):
            print(path)
        return 0
    raise UsageError(f"unknown command {args.cmd!r}")


def main(argv=None) -> int:
    try:
        return run(build().parse_args(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
