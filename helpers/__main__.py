"""Command line: ``python -m helpers {record,resources} ...``."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="measure chapter sweeps on a GPU into book/data/<device>.json")
    rec.add_argument("--chapter", action="append", help="chapter to record (repeatable; default: all)")
    res = sub.add_parser("resources", help="offline sm_90 resource report of a kernel config")
    res.add_argument("kernel")
    res.add_argument("params", nargs="*", help="NAME=VALUE template parameters")
    sub.add_parser("list", help="list the registered kernels and their parameters")
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
