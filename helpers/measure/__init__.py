"""Data in and out: recorded files, live results, and the commands that measure on a GPU
(record, bench, sanitize, the Nsight Compute counters, the autotuner)."""
