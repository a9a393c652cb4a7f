#!/usr/bin/env bash
# Runs every benchmark program under build/bench/ (figures, not pass/fail).
set -u
rc=0
for b in build/bench/*; do
    [ -x "$b" ] || continue
    echo "== $(basename "$b")"
    "$b" || rc=1
done
exit $rc
