#!/usr/bin/env bash
# Runs every Criterion suite given on the command line, from the repository root, and
# prints one closing line over all of them. A suite that fails does not stop the rest.
# A skipped test (cr_skip_test: a missing device, package or file) is counted and its
# reason printed, so a skip is never silent (Criterion reports skips only with --verbose).
# RUN_TESTS_JOBS: Criterion workers per suite (default 2). RUN_TESTS_LOGDIR: a folder
# for each suite's whole output (NAME.log).
set -u
passed=0; failed=0; skipped=0; failed_suites=()
start=$(date +%s)
for t in "$@"; do
    name=$(basename "$t")
    t0=$(date +%s)
    out=$("$t" --jobs "${RUN_TESTS_JOBS:-2}" --verbose 2>&1); rc=$?
    if [ -n "${RUN_TESTS_LOGDIR:-}" ]; then mkdir -p "$RUN_TESTS_LOGDIR" && printf '%s\n' "$out" >"$RUN_TESTS_LOGDIR/$name.log"; fi
    t1=$(date +%s)
    synth=$(printf '%s\n' "$out" | grep -E '^\[====\] Synthesis' | tail -1)
    p=$(printf '%s' "$synth" | sed -nE 's/.*Passing: ([0-9]+).*/\1/p')
    f=$(printf '%s' "$synth" | sed -nE 's/.*Failing: ([0-9]+).*/\1/p')
    c=$(printf '%s' "$synth" | sed -nE 's/.*Crashing: ([0-9]+).*/\1/p')
    p=${p:-0}; f=${f:-0}; c=${c:-0}
    s=$(printf '%s\n' "$out" | grep -cE '^\[SKIP\]')
    skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ $((f + c)) -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f + c))
    if [ "$rc" -ne 0 ]; then
        failed_suites+=("$name")
        # which tests failed and their assertions first, then the output's end (a
        # sanitizer's report comes last and can be long)
        printf '%s\n' "$out" | grep -E '^\[FAIL\]|^\[----\] .*\.c:[0-9]+: |^\[----\]   ' | head -40
        printf '%s\n' "$out" | grep -vE '^\[----\]|^\[RUN |^\[PASS\]' | tail -40
    fi
    printf '%-28s %4d passed %3d failed  %4ds%s\n' "$name" "$p" $((f + c)) $((t1 - t0)) \
        "$([ "$s" -gt 0 ] && echo "  $s skipped")"
    printf '%s\n' "$out" | grep -E '^\[SKIP\]' | sed 's/^/    /'
done
echo "total time $(( $(date +%s) - start ))s"
[ ${#failed_suites[@]} -eq 0 ] || echo "failing suites: ${failed_suites[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
