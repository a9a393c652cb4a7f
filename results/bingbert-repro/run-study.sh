#!/usr/bin/env bash
# Runs the reproduction study (docs/STUDY.md) in its order, one cell at a time, and
# rewrites the matrices after each cell, so that it can be stopped at any moment and
# resumed by running it again (finished cells are kept; a killed cell resumes from its
# training-state checkpoint). From the repository root:
#
#   bash results/bingbert-repro/run-study.sh            # everything still to do
#   MPX=/path/to/mpx bash results/bingbert-repro/run-study.sh
#
# One cell is about 35-60 minutes on 2 cores (MiniLM-L6, 3,049 steps of 3 windows, then
# 2,000 dev questions); the whole study is 34 cells (eval-logits's 4 only evaluate: minutes each).
#   ORDER="main amp" bash ...   only those parts (sweep files), in that order
#   BEFORE_CELL='cmd'           run before every cell (e.g. rebuild MPX from a newer tree)
set -u
cd "${STUDY_ROOT:-$(dirname "$0")/../..}"
MPX=${MPX:-build/bin/mpx}
STUDY=results/bingbert-repro
# seed 1 of the report's three modes, then what needs their weights, then the other seeds (the
# seed-to-seed spread), then the ablations and the other policies, and last main's seed-1
# cells again on the current build (main-rebuild: what a build alone moves), then bf16-master's
# seeds 2 and 3 on it (main-rebuild-seeds: pure-bf16 against bf16-master on one build)
ORDER=${ORDER:-"main-seed1 eval-logits main islands amp pure-bf16 lr comm pure-bf16-seeds main-rebuild main-rebuild-seeds"}
for part in $ORDER; do
    while :; do
        [ -n "${BEFORE_CELL:-}" ] && eval "$BEFORE_CELL"
        out=$("$MPX" sweep "$STUDY/$part.cfg" --max-cells 1 2>&1)
        rc=$?
        printf '%s\n' "$out" >> "$STUDY/study.log"
        bash "$STUDY/matrices.sh" "$MPX" > "$STUDY/matrices.md.tmp" 2>/dev/null &&
            mv "$STUDY/matrices.md.tmp" "$STUDY/matrices.md"
        [ "$rc" -eq 0 ] && break                   # every cell finished or skipped
        case "$out" in *"ran 0 now"*) break ;; esac  # only failed cells left: go on
        case "$out" in *interrupted*) exit 1 ;; esac
    done
done
