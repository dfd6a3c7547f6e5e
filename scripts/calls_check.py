"""helpers.sgemm called from Python in a loop against cupy.matmul, one line per path a call can take.

For each case: the path (what a call launches), the host's time per call (a loop of calls over 8
operand sets queued while the GPU waits), the loop's time per call (run freely, synchronised once
at the end) and its throughput as a percentage of cupy.matmul's on the same operands. Each call is
checked against cupy.matmul first. Cases that name a config force the path; the others are the
dispatcher's choice. Run it before and after a change to the library call's host path:

    python scripts/calls_check.py [--calls 200] [--rounds 7]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import hardware  # noqa: E402
from helpers.measure.calls import measure_shape  # noqa: E402
from helpers.runtime.specs.final import SPEC, choose_config  # noqa: E402


def cases(device):
    """(name, batch, M, N, K, B shared, params or None, B transposed)."""
    def forced(M, N, K, b_t=0, **change):
        return dict(SPEC.resolve(choose_config(M, N, K, device, 0, b_t)), **change)
    return [
        ("chosen", None, 128, 128, 128, False, None, False),
        ("plain", None, 128, 128, 128, False, forced(128, 128, 128, SPLITK=1, REDUCE=0, STREAMK=0), False),
        ("chosen", None, 1209, 86, 1898, False, None, False),
        ("chosen", None, 451, 434, 319, False, None, False),
        ("chosen", None, 64, 50000, 64, False, None, False),
        ("chosen", None, 33, 4096, 4096, False, None, False),
        ("split-K", None, 64, 64, 8192, False, forced(64, 64, 8192, SPLITK=8, REDUCE=0, STREAMK=0), False),
        ("slabs", None, 64, 64, 8192, False, forced(64, 64, 8192, SPLITK=16, REDUCE=1, STREAMK=0), False),
        ("packed", None, 1000, 1000, 1000, False,
         forced(1000, 1000, 1000, 1, PACK_B=1, B_T=0, SPLITK=1, REDUCE=0, STREAMK=0), True),
        ("batched", 64, 128, 128, 128, False, None, False),
        ("batched", 256, 64, 64, 64, False, None, False),
        ("batched, B shared", 32, 256, 256, 256, True, None, False),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    device = hardware.current()
    print(f"{device.label}: helpers.sgemm / cupy.matmul, {args.calls} calls per loop over 8 operand sets, "
          f"median of {args.rounds} loops")
    print(f"{'case':>18s} {'product':>20s} {'path (launches)':>22s} {'host us/call':>15s} {'loop us/call':>17s} "
          f"{'throughput':>10s}  correct")
    bad = 0
    for name, batch, M, N, K, shared, params, b_t in cases(device):
        r = measure_shape(batch, M, N, K, shared, args.calls, args.rounds, params=params, b_t=b_t)
        bad += not r["ok"]
        path = f"{r['path']} ({r['launches']})"
        print(f"{name:>18s} {r['shape'].replace(' (B shared)', ''):>20s} {path:>22s} "
              f"{r['host_us']:6.1f} /{r['cublas_host_us']:6.1f} {r['loop_us']:7.1f} /{r['cublas_loop_us']:7.1f} "
              f"{r['pct_loop']:9.0f}%  {'yes' if r['ok'] else 'NO'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
