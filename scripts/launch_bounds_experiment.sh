#!/usr/bin/env bash
# Experiment (GPU): kernels 07 and 08 with two blocks per SM (__launch_bounds__(256, 2),
# at most 128 registers, as committed) against one block per SM (256, 1). Times each
# config at n = 2048, 4096, 8192 next to cuBLAS; the kernel files are edited in a
# temporary copy of the repository only. Usage: scripts/launch_bounds_experiment.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp -r "$root/helpers" "$root/kernels" "$work/"
cat > "$work/time.py" <<'PY'
import sys
from helpers.bench import measure
for kernel, params in [("double_buffering", {}), ("double_buffering", {"BK": 16}), ("bank_conflicts", {}),
                       ("double_buffering_async", {}), ("double_buffering_async", {"BK": 32, "STAGES": 3})]:
    for n in (2048, 4096, 8192):
        r = measure(kernel, n, n, n, params)
        print(sys.argv[1], kernel, params, n, f"{r.tflops:.2f} cuBLAS {r.cublas_tflops:.2f} ok={r.ok}", flush=True)
PY
cd "$work"
PYTHONPATH="$work:${PYTHONPATH:-}" python3 time.py "launch_bounds(256,2)"
sed -i 's/__launch_bounds__(256, 2)/__launch_bounds__(256, 1)/' kernels/07_bank_conflicts.cu kernels/08_double_buffering.cu
PYTHONPATH="$work:${PYTHONPATH:-}" python3 time.py "launch_bounds(256,1)"
