#!/usr/bin/env bash
# Keeps the generated blocks of a Markdown file true. A block is
#
#   <!-- mpx: ARGS -->
#   ```
#   (the output of `mpx ARGS`, run from the repository root)
#   ```
#   <!-- /mpx -->
#
#   bash docs/regen.sh FILE.md [MPX]          rewrites every block from the command's output
#   bash docs/regen.sh --check FILE.md [MPX]  exit 1 and name the first stale block
#
# MPX defaults to build/bin/mpx. Every number in such a block is the output of the command
# written above it, on the records committed with it.
set -u
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
file=${1:?usage: regen.sh [--check] FILE.md [MPX]}
mpx=${2:-build/bin/mpx}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
in_block=0; skipping=0; n=0; stale=""
while IFS= read -r line || [ -n "$line" ]; do
    if [ $in_block -eq 0 ]; then
        printf '%s\n' "$line" >> "$out"
        case "$line" in
        "<!-- mpx: "*" -->")
            args=${line#"<!-- mpx: "}; args=${args%" -->"}
            n=$((n + 1)); in_block=1
            printf '```\n' >> "$out"
            # shellcheck disable=SC2086
            eval "\"\$mpx\" $args" >> "$out" 2>&1 || printf '(exit %d)\n' $? >> "$out"
            printf '```\n' >> "$out"
            ;;
        esac
    elif [ "$line" = "<!-- /mpx -->" ]; then
        printf '%s\n' "$line" >> "$out"; in_block=0
    fi
done < "$file"
[ $in_block -eq 0 ] || { echo "regen.sh: $file: a block is not closed by <!-- /mpx -->" >&2; exit 2; }
if [ $check -eq 1 ]; then
    if ! cmp -s "$out" "$file"; then
        echo "regen.sh: $file: generated blocks are stale (bash docs/regen.sh $file rewrites them):" >&2
        diff "$file" "$out" | head -20 >&2
        exit 1
    fi
    echo "regen.sh: $file: $n block(s) up to date"
else
    cp "$out" "$file"
    echo "regen.sh: $file: $n block(s) written"
    # in a checkout whose results/ holds what git does not (a running or unpublished cell),
    # a block over a folder shows it: the committed page is regenerated on an archive of
    # HEAD (results/bingbert-repro/publish.sh does)
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
       [ -n "$(git status --porcelain --untracked-files=all -- results 2>/dev/null | head -1)" ]; then
        echo "regen.sh: warning: results/ holds files git does not (git status -- results): blocks over" \
             "their folders show them; regenerate on 'git archive HEAD results docs' to write only" \
             "committed records" >&2
    fi
fi
