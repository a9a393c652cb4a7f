#!/usr/bin/env bash
# Runs every benchmark program under build/bench/ (figures, not pass/fail). Exit 77 from
# one means it has nothing to measure here (bench_cuda_step without a GPU): skipped.
set -u
rc=0
for b in build/bench/*; do
    [ -x "$b" ] || continue
    echo "== $(basename "$b")"
    "$b"; r=$?
    if [ "$r" -eq 77 ]; then echo "   ($(basename "$b") skipped: nothing to measure on this machine)"
    elif [ "$r" -ne 0 ]; then rc=1; fi
done
exit $rc
