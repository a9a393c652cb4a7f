#!/usr/bin/env bash
# Runs a fixed set of small trainings with one build and keeps what a refactor must not
# change, for comparing two builds bit for bit (issue 44: the core moved into layers).
#   bash tests/bitwise-runs.sh OUT            runs them with build/bin/mpx into OUT/
#   bash tests/bitwise-runs.sh --compare A B  cmp's every kept file of A against B
# The set: tiny_squad (configs/tiny_squad.cfg: the 2-layer test BERT on 24 SQuAD
# questions, 30 steps, the model saved) in each built-in precision policy: once straight,
# once killed at step 25 (its step-20 training state kept) and once resumed from there;
# and the toy at 2 ranks (OpenMPI) under ZeRO stages 0 and 3, its final fp32 weights dumped
# (MPX_DUMP_FINAL_WEIGHTS: the toy saves no checkpoint). Kept per run: metrics.csv
# (less its wall-clock columns), diagnostics.csv, train_state/state.bin and config.cfg, and
# checkpoint/model.safetensors or final_weights.bin, whichever it writes. Needs make data; minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
KEPT="metrics.csv diagnostics.csv train_state/state.bin train_state/config.cfg checkpoint/model.safetensors final_weights.bin"
# metrics.csv without its wall-clock columns (tokens_per_s, elapsed_s), config.cfg without
# run.output_dir (OUT itself)
det() {
    case "$1" in
    */metrics.csv) awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = ($i != "tokens_per_s" && $i != "elapsed_s") }
                            { o = ""; for (i = 1; i <= NF; i++) if (keep[i]) o = o (o == "" ? "" : ",") $i; print o }' "$1" ;;
    */config.cfg) grep -v '^  output_dir = ' "$1" ;;  # the one line that names OUT
    *) cat "$1" ;;
    esac
}
if [ "${1:-}" = "--compare" ]; then
    a=$2; b=$3; same=0; diff=0; missing=0
    for run in $(cd "$a" && ls); do
        for f in $KEPT; do
            if [ ! -f "$a/$run/$f" ] && [ ! -f "$b/$run/$f" ]; then continue; fi
            if [ ! -f "$a/$run/$f" ] || [ ! -f "$b/$run/$f" ]; then
                echo "missing  $run/$f"; missing=$((missing + 1))
            elif cmp -s <(det "$a/$run/$f") <(det "$b/$run/$f"); then
                printf 'same     %-44s %s\n' "$run/$f" "$(det "$a/$run/$f" | sha256sum | cut -c1-16)"; same=$((same + 1))
            else
                echo "DIFFERS  $run/$f"; diff=$((diff + 1))
            fi
        done
    done
    echo "$same files bitwise the same, $diff differ, $missing missing"
    [ "$diff" -eq 0 ] && [ "$missing" -eq 0 ]
    exit
fi
out=${1:?usage: bitwise-runs.sh OUT | --compare A B}
mkdir -p "$out"
out=$(cd "$out" && pwd)
MPX=build/bin/mpx
for p in fp32 amp fp16-scaled bf16-master pure-bf16 fp8-delayed mxfp8; do
    echo "== tiny_squad $p"
    set -- configs/tiny_squad.cfg -s "precision.plugin=\"$p\"" -s train.checkpoint_every=10 \
        -s train.save_model=true -s "run.output_dir=\"$out\""
    "$MPX" run "$@" -s "run.name=\"tiny-$p\"" >"$out/tiny-$p.log" 2>&1
    rc=0; MPX_FAULT_AT_STEP=25 MPX_FAULT_SIGNAL=KILL "$MPX" run "$@" -s "run.name=\"tiny-$p-killed\"" \
        >"$out/tiny-$p-killed.log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || { echo "tiny-$p-killed: the fault did not stop the run" >&2; exit 1; }
    cp -r "$out/tiny-$p-killed" "$out/tiny-$p-resumed"
    "$MPX" run --resume "$out/tiny-$p-resumed" >"$out/tiny-$p-resumed.log" 2>&1
done
for st in stage0 stage3; do
    echo "== toy 2 ranks $st"
    mkdir -p "$out/toy2-$st"
    MPX_DUMP_FINAL_WEIGHTS="$out/toy2-$st/final_weights.bin" "$MPX" run --ranks 2 configs/toy.cfg \
        -s "zero.plugin=\"$st\"" -s train.epochs=2 -s "run.output_dir=\"$out\"" -s "run.name=\"toy2-$st\"" \
        >"$out/toy2-$st.log" 2>&1
done
echo "runs in $out"
