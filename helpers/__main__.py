"""Command line: ``python -m helpers {record,resources,list,sanitize,bench} ...``.

``sanitize`` and ``bench`` are handed to ``helpers.sanitize.main`` and
``helpers.leaderboard.main`` with the rest of the command line.
"""
from __future__ import annotations

import argparse
import sys


DELEGATED = {"sanitize": "helpers.sanitize", "bench": "helpers.leaderboard"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        return importlib.import_module(DELEGATED[argv[0]]).main(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="python -m helpers", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="measure chapter sweeps on a GPU into book/data/<device>.json")
    rec.add_argument("--chapter", action="append", help="chapter to record (repeatable; default: all)")
    res = sub.add_parser("resources", help="offline sm_90 resource report of a kernel config")
    res.add_argument("kernel")
    res.add_argument("params", nargs="*", help="NAME=VALUE template parameters")
    sub.add_parser("list", help="list the registered kernels and their parameters")
    sub.add_parser("sanitize", help="compute-sanitizer memcheck + racecheck over every kernel (GPU)")
    sub.add_parser("bench", help="every chapter's kernel vs cuBLAS over n and the shape suite (GPU)")
    args = parser.parse_args(argv)

    if args.cmd == "record":
        from .record import record

        record(args.chapter)
    elif args.cmd == "resources":
        from .resources import resources

        params = dict(kv.split("=", 1) for kv in args.params)
        print(resources(args.kernel, {k: int(v) for k, v in params.items()}))
    elif args.cmd == "list":
        from .registry import all_specs

        for s in all_specs():
            ps = ", ".join(f"{p.name}={p.default}" for p in s.params)
            print(f"{s.name:18s} kernels/{s.file:28s} {ps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
