#!/usr/bin/env bash
# make bench entry: MiniLM-L6 (configs/squad_quick.cfg) step time at 1 and 2 ranks, one
# backend thread per rank, and the scaling efficiency. Weak scaling, as DeepSpeed counts
# it: the micro-batch per rank stays 8, so 2 ranks train on twice the windows per step;
# efficiency = (windows/s at 2 ranks) / (2 × windows/s at 1 rank). The median step time
# over the steps after the first (warm-up) is reported. On a shared 2-core machine the
# figures are noisy: compare them within one run of this script.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${MPX_BENCH_RANKS_STEPS:-6}
out=$(mktemp -d /tmp/mpx-bench-ranks-XXXXXX)
trap 'rm -rf "$out"' EXIT
median_step() { # metrics.csv -> median of elapsed_s differences after the first step
    awk -F, 'NR > 1 { if (NR > 2) print $8 - prev; prev = $8 }' "$1" | sort -g |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
common=(-s train.max_steps=$STEPS -s train.diagnostics=false -s eval.batch_size=16
        -s data.squad.dev_questions=1 -s backend.cpu.threads=1 -s train.log_every=1)
build/bin/mpx run configs/squad_quick.cfg --out "$out/r1" "${common[@]}" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
build/bin/mpx run configs/squad_quick.cfg --out "$out/r2" "${common[@]}" --ranks 2 >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
t1=$(median_step "$out/r1/metrics.csv")
t2=$(median_step "$out/r2/metrics.csv")
awk -v t1="$t1" -v t2="$t2" -v steps="$STEPS" 'BEGIN {
    printf "MiniLM-L6 squad_quick, micro-batch 8 per rank, 1 thread per rank, median of %d steps after the first\n", steps - 1
    printf "  1 rank : %.3f s/step  %.1f windows/s\n", t1, 8 / t1
    printf "  2 ranks: %.3f s/step  %.1f windows/s\n", t2, 16 / t2
    printf "  scaling efficiency (weak): %.1f %%\n", 100 * (16 / t2) / (2 * 8 / t1)
}'
