#!/usr/bin/env bash
# The subnormal census of issue 47 (docs/SPEED.md, "bf16 GEMMs on AMX tiles"): for each
# precision policy, protocol A's configuration (configs/study/bingbert_repro.cfg, MiniLM-L6
# on SQuAD) for its first 300 training questions (100 steps of 3 windows) and an evaluation
# of 8 dev questions, with backend.cpu.subnormal_census = true: every GEMM the AMX path
# would take runs on the FMA path and counts its subnormal inputs (after rounding to bf16)
# and fp32 results. Writes POLICY.log here: the command, the commit of the build, then
# mpx's stderr, whose last note is the census. The run folders go to a temporary folder
# (their predictions hold SQuAD text, and an fp8-delayed run.json with its amax histories
# is some 85 MB: neither is kept). From the repository root, after `make all data model`:
#   bash results/subnormal-census/run.sh [POLICY...]
set -u
cd "$(dirname "$0")/../.."
OUT=results/subnormal-census
MPX=${MPX:-build/bin/mpx}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
policies=${*:-"fp32 amp fp16-scaled bf16-master pure-bf16 fp8-delayed mxfp8"}
for p in $policies; do
    args=(run configs/study/bingbert_repro.cfg -s "precision.plugin=\"$p\"" -s data.squad.train_questions=300
          -s data.squad.dev_questions=8 -s backend.cpu.subnormal_census=true -s train.save_model=false
          -s "run.output_dir=\"$TMP\"" --out "$TMP/$p")
    { printf 'command: mpx'; printf ' %q' "${args[@]}"; printf '\n'
      printf 'build: %s, commit %s%s\n' "$("$MPX" --version)" "$(git rev-parse HEAD)" \
          "$(git diff --quiet HEAD -- core plugins models datasets || echo ' (with changes)')"
      date -u '+date: %Y-%m-%d %H:%M UTC'; } > "$OUT/$p.log"
    "$MPX" "${args[@]}" >> "$OUT/$p.log" 2>&1
    rc=$?
    printf '%-12s exit %d  %s\n' "$p" "$rc" "$(grep -o 'subnormal census: .*' "$OUT/$p.log" || echo 'no census note')"
done
