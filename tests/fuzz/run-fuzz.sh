#!/usr/bin/env bash
# Runs each libFuzzer target FUZZ_RUNS times (niced: fuzzing is CPU-heavy) from a copy of
# its committed seed corpus, one at a time, and prints executions, seconds and crashes.
set -u
dir=$1; shift
runs=${FUZZ_RUNS:-1000000}
status=0
printf '%-14s %10s %8s %8s\n' target execs seconds crashes
for t in "$@"; do
    work=$dir/work/$t
    rm -rf "$work" && mkdir -p "$work"
    cp tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null
    log=$dir/$t.log
    rm -f "$dir"/crash-$t-*   # a crasher of an earlier run is not this run's (keep it in the corpus)
    # inputs up to 4 KiB; a checkpoint (state.json and a small state.bin) needs more
    case $t in train_state) max_len=8192 ;; *) max_len=4096 ;; esac
    start=$(date +%s.%N)
    ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        nice -n 19 "$dir/fuzz_$t" -runs="$runs" -max_len=$max_len -timeout=20 -rss_limit_mb=4096 \
        -artifact_prefix="$dir/crash-$t-" "$work" >"$log" 2>&1 &
    pid=$!
    wait $pid
    rc=$?
    rm -rf "/dev/shm/mpx-fuzz-$pid"   # its input folder (fuzz_input.h), not another run's
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    execs=$(sed -nE 's/^Done ([0-9]+) runs.*/\1/p' "$log" | tail -1)
    crashes=$(ls "$dir"/crash-$t-* 2>/dev/null | wc -l)
    [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="1 (exit $rc, see $log)"
    printf '%-14s %10s %8s %8s\n' "$t" "${execs:-?}" "$secs" "$crashes"
    [ "$rc" -eq 0 ] || status=1
done
exit $status
