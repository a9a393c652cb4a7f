#!/usr/bin/env bash
# Commits the study's finished cells (their records only: run.json, metrics.csv,
# diagnostics.csv, question_scores.csv, mpx.log; .gitignore keeps checkpoints and SQuAD
# text out), then rewrites results/bingbert-repro/matrices.md and the generated tables of
# docs/STUDY.md from the committed records alone, draws each part's curves
# (PART-curves.png; for the 8-rank parts ranks8-curves.png and ranks8-full-curves.png),
# and commits those. Unfinished cells stay
# uncommitted until they finish. From the repository root:
#
#   bash results/bingbert-repro/publish.sh [MPX]
#   PRUNE=1 bash ...   also deletes what git ignores in the finished cells it commits:
#                      checkpoint/ (the trained model), train_state/ (only an unfinished
#                      cell resumes from it), predictions.json and nbest_predictions.json
#                      (they quote SQuAD text); without it, it lists them
set -eu
cd "$(dirname "$0")/../.."
MPX=$(realpath "${1:-build/bin/mpx}")
S=results/bingbert-repro
added=0
left=
# the parts' cells, and the 8-rank parts' (their sweeps one folder deeper)
for rec in "$S"/*/*/run.json "$S"/ranks8/*/*/run.json "$S"/ranks8-full/*/*/run.json; do
    [ -f "$rec" ] || continue
    grep -q '"status": "finished"' "$rec" || continue
    cell=$(dirname "$rec")
    for f in run.json metrics.csv diagnostics.csv question_scores.csv mpx.log; do
        [ -f "$cell/$f" ] && git add "$cell/$f" && added=1
    done
    for f in checkpoint train_state predictions.json nbest_predictions.json; do
        [ -e "$cell/$f" ] || continue
        if [ "${PRUNE:-0}" = 1 ]; then rm -rf -- "${cell:?}/$f"; else left="$left $cell/$f"; fi
    done
done
[ -n "$left" ] && printf 'publish.sh: ignored by git, left in finished cells (PRUNE=1 deletes them):\n%s\n' \
    "$(printf '  %s\n' $left)" >&2
[ -f "$S/main/sweep.json" ] && git add "$S"/*/sweep.json
git diff --cached --quiet || git commit -q -m "results/bingbert-repro: finished cells' records"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive HEAD results docs | tar -x -C "$tmp"
(cd "$tmp" && bash "$S/matrices.sh" "$MPX" > "$S/matrices.md" && bash docs/regen.sh docs/STUDY.md "$MPX" >/dev/null)
cp "$tmp/$S/matrices.md" "$S/matrices.md"
cp "$tmp/docs/STUDY.md" docs/STUDY.md
git add "$S/matrices.md" docs/STUDY.md
# loss (mean of the last 100 steps), loss scale and lr of each part's committed cells
for d in "$tmp/$S"/*/; do
    part=$(basename "$d")
    ls "$d"*/metrics.csv >/dev/null 2>&1 || continue
    "$MPX" plot "$d" -o "$S/$part-curves.png" --smooth 100 >/dev/null 2>&1 && git add "$S/$part-curves.png"
done
# the 8-rank study's three policies, seed 1 each (docs/STUDY.md, "The report's launch: 8
# ranks"): its parts are sweeps one folder deeper
R=$tmp/$S/ranks8
if ls "$R"/fp32/fp32_1-*/metrics.csv "$R"/fixed/bf16-master_1-*/metrics.csv "$R"/lp-grads/bf16-master_1-*/metrics.csv \
    >/dev/null 2>&1; then
    "$MPX" plot "$R"/fp32/fp32_1-*/ "$R"/fixed/bf16-master_1-*/ "$R"/lp-grads/bf16-master_1-*/ -o "$S/ranks8-curves.png" \
        --smooth 20 >/dev/null 2>&1 && git add "$S/ranks8-curves.png"
fi
# protocol B8: fp32 and every committed seed of the pre-0.13.3 bf16 cell
R=$tmp/$S/ranks8-full
if ls "$R"/fp32/*/metrics.csv "$R"/lp-grads/*/metrics.csv >/dev/null 2>&1; then
    "$MPX" plot "$R"/fp32/*/ "$R"/lp-grads/*/ -o "$S/ranks8-full-curves.png" --smooth 100 >/dev/null 2>&1 &&
        git add "$S/ranks8-full-curves.png"
fi
git diff --cached --quiet || git commit -q -m "results/bingbert-repro: matrices and docs/STUDY.md tables regenerated from the committed records"
git log --oneline -3
