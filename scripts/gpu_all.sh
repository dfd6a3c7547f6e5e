#!/usr/bin/env bash
# Everything the book needs from a GPU, in steps (on a machine set up with
# `. scripts/device_setup.sh` or a venv from requirements.txt). Logs and the recorded data go to
# ${OUT:-.scratch/gpu}. Usage: scripts/gpu_all.sh STEP... where a step is one of
#   tests              pytest -m gpu (kernels vs cuBLAS, split-K concurrency, live mode)
#   record[:CHAPTERS]  python -m helpers record (all, or the comma-separated chapters)
#   sanitize           compute-sanitizer memcheck + racecheck over every kernel
#   notebooks[:TARGET] every exported chapter live under nbval (quick sweeps), natively or
#                      for an emulated target (sm_75, sm_80, sm_86, sm_89)
#   tune               scripts/tune_final.py (the final kernel's candidates, for calibration)
set -o pipefail
LOG=${OUT:-.scratch/gpu}; mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
status=0
for step in "$@"; do
    name=${step%%:*}; arg=${step#*:}; [ "$arg" = "$step" ] && arg=""
    echo "== $step ($(date +%T))" | tee -a "$LOG/summary.log"
    case $name in
        tests)     python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 tests/ 2>&1 | tee "$LOG/gpu_tests${arg:+_$arg}.log" | tail -15 ;;
        record)    python3 -m helpers record ${arg:+$(echo "$arg" | tr ',' '\n' | sed 's/^/--chapter /' | tr '\n' ' ')} 2>&1 \
                       | tee -a "$LOG/record.log" | grep -E "^==|saved|WRONG|refused|error" ;;
        sanitize)  python3 -m helpers sanitize --json "$LOG/sanitize.json" 2>&1 | tee "$LOG/sanitize.log" | tail -25 ;;
        notebooks) env SGEMM_BOOK_QUICK=1 ${arg:+SGEMM_BOOK_TARGET=$arg} python3 -m pytest -q -m notebooks -n 8 \
                       -p no:cacheprovider tests/test_notebooks.py 2>&1 | tee "$LOG/nbval${arg:+_$arg}.log" | tail -8 ;;
        tune)      python3 scripts/tune_final.py "$LOG/tune.json" 2>&1 | tee "$LOG/tune.log" | tail -40 ;;
        *) echo "unknown step $step"; false ;;
    esac
    rc=$?; [ $rc = 0 ] || status=$rc
    echo "   exit $rc ($(date +%T))" | tee -a "$LOG/summary.log"
done
cp book/data/*.json "$LOG/" 2>/dev/null
exit $status
