#!/usr/bin/env bash
# Everything the book needs from a GPU, in one go (on a machine set up with
# `. scripts/device_setup.sh` or a venv from requirements.txt):
#   kernels vs cuBLAS on odd shapes, the recorded data of every chapter, the
#   sanitizer table, the leaderboard table, and every chapter run live under nbval.
# Logs go to ${OUT:-.scratch/gpu}. Usage: scripts/gpu_all.sh [tests] [record] [bench] [notebooks]
set -o pipefail
LOG=${OUT:-.scratch/gpu}; mkdir -p "$LOG"
steps=${*:-tests record bench notebooks}
status=0
for step in $steps; do
    echo "== $step ==" | tee -a "$LOG/summary.log"
    case $step in
        tests)     python3 -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tee "$LOG/gpu_tests.log" | tail -3 ;;
        record)    python3 -m helpers record 2>&1 | tee "$LOG/record.log" | grep -E "==|4096x4096x4096|WRONG|saved" ;;
        bench)     python3 -m helpers bench 2>&1 | tee "$LOG/bench.log" | tail -40 ;;
        notebooks) SGEMM_BOOK_QUICK=1 python3 -m pytest -q -m notebooks -p no:cacheprovider tests/test_notebooks.py 2>&1 | tee "$LOG/nbval_live.log" | tail -5 ;;
        *) echo "unknown step $step"; false ;;
    esac
    rc=$?; [ $rc = 0 ] || status=$rc
    echo "   exit $rc" | tee -a "$LOG/summary.log"
done
cp book/data/*.json "$LOG/" 2>/dev/null
exit $status
