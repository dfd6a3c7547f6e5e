"""Register-bank clashes in the final kernel's FFMA loop, offline (no GPU): compiled for the
reference GPU with NVRTC, counted in the SASS by helpers.runtime.sass.bank_clashes.

    python scripts/register_banks.py [--before FILE.cu] [--candidates large,flat,...] [--banks 2]

For every candidate, plain and with split-K, slabs and stream-K, in NN and TN: registers
and the share of FFMAs in the innermost loop whose register reads clash, in the model's
bank layout. A ranking tool with a simple model, not a timer: it showed that split-K and
stream-K parts stored as float4 of the accumulators made about one clash per FFMA with 128
results per thread (kernels/12_final.cu, fresh4), which scripts/final_experiments.py
--only parts then measured. It ranks the inner-loop lengths (KU) of the 128-result candidates
as measured, not those of the smaller thread tiles (--only ku measures them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import hardware  # noqa: E402
from helpers.runtime import offline, sass  # noqa: E402
from helpers.runtime.spec import inline_includes  # noqa: E402
from helpers.runtime.specs.final import CANDIDATES, LAYOUTS, SPEC  # noqa: E402

VARIANTS = {"plain": {}, "split-K 3": dict(SPLITK=3), "slabs 4": dict(SPLITK=4, REDUCE=1), "stream-K": dict(STREAMK=1)}


def row(params: dict, source: str | None, banks: int) -> str:
    device = hardware.default()
    res = offline.resources(SPEC, params, device, validate=False, source=source)
    cubin, _, _ = offline.compile_config(SPEC, params, device, source=source, validate=False)
    ffmas, clashes = sass.bank_clashes(sass.innermost_loop(offline.cuobjdump(cubin, "--dump-sass")), banks)
    return (f"{res.registers:4d} regs {100 * clashes / max(ffmas, 1):5.0f}% of {ffmas:4d} FFMA"
            + (" spills" if res.spills else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another version of kernels/12_final.cu, side by side")
    ap.add_argument("--candidates", default=",".join(c.name for c in CANDIDATES))
    ap.add_argument("--banks", type=int, default=2)
    args = ap.parse_args(argv)
    sources = {"now": None}
    if args.before:
        copy = SPEC.path.with_name("12_final_before.cu")          # beside common.cuh for its #include
        copy.write_text(args.before.read_text())
        try:
            sources["before"] = inline_includes(copy)
        finally:
            copy.unlink()
    names = args.candidates.split(",")
    for c in (c for c in CANDIDATES if c.name in names):
        for lay in ("NN", "TN"):
            a_t, b_t = LAYOUTS[lay]
            for vname, extra in VARIANTS.items():
                p = dict(c.params, A_T=a_t, B_T=b_t, **extra)
                cells = "   ".join(f"{w}: {row(p, src, args.banks)}" for w, src in sources.items())
                print(f"{c.name:7s} {lay} {vname:10s} {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
