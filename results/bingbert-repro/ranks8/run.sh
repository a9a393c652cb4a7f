#!/usr/bin/env bash
# Runs the multi-rank reproduction (docs/STUDY.md, "The report's launch: 8 ranks"): protocol
# A at 8 ranks (results/bingbert-repro/ranks8/) and protocol B8, all of SQuAD's training set
# at 8 ranks (results/bingbert-repro/ranks8-full/), one cell at a time in the order below,
# so that it can be stopped at any moment and resumed by running it again: finished cells
# are kept, a killed cell resumes from its training-state checkpoint
# (train.checkpoint_every = 100). From the repository root:
#
#   nohup bash results/bingbert-repro/ranks8/run.sh > /dev/null 2>&1 &
#
# Every cell runs on one build: the commit PIN, built into .study-build/<commit>/ (ignored
# by git) when missing, so that a fresh clone rebuilds the same binary. Needs `make data`
# and `make model`, and OpenMPI (.ci/run installs it). On 2 cores (8 processes of one
# thread) a step at 8 ranks takes about 2.5 s (fp32) or 3.3 s (the pre-0.13.3 bf16 cell)
# with the machine to itself and up to about 5 s beside builds and tests: a protocol-A
# cell (382 steps) trained in 15-80 minutes (train_seconds 929-4,756 in its records), a
# protocol-B8 cell (3,694 steps) 2.5-3.5 hours alone, up to 5 beside other work.
# Stop it with Ctrl-C, or kill -TERM on this script and on the cell's `mpx run` (the
# launcher passes the signal to mpirun and records the cell as killed; the next run
# resumes it). Not on the pinned build's `mpx sweep` alone: that build predates the sweep
# passing a signal on to its cell (827dd2e), so the sweep dies and the cell trains on,
# orphaned. Killing mpirun or a rank alone records the cell as failed with the pinned
# build, and a failed cell runs again only under `mpx sweep --retry-failed`.
#   ORDER="ranks8/lp-grads ranks8/fp32" bash ...   only those sweeps, one cell per mention
#   MPX=/path/to/mpx bash ...                      another binary (its cells record its commit)
set -u
cd "$(dirname "$0")/../../.."
PIN=${PIN:-6eca5c9529ec85b60e7e66477e21f73b301846e6}
STUDY=results/bingbert-repro
if [ -z "${MPX:-}" ]; then
    B=.study-build/$PIN
    if [ ! -x "$B/build/bin/mpx" ]; then
        rm -rf "$B" && git worktree prune && git worktree add --detach "$B" "$PIN" &&
            make -C "$B" -j2 all >"$B.log" 2>&1 || { echo "run.sh: cannot build $PIN (see $B.log)" >&2; exit 1; }
    fi
    MPX=$B/build/bin/mpx
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# protocol A's key pair first (each mention runs one cell of that sweep), then the other
# policies, the other seeds and the rank-count controls; then protocol B8
A="ranks8/lp-grads ranks8/fp32 ranks8/fixed ranks8/lp-grads ranks8/fp32 ranks8/fixed ranks8/lp-grads ranks8/fp32"
A="$A ranks8/lp-grads-2 ranks8/lp-grads-4 ranks8/lp-grads-1"
B8="ranks8-full/lp-grads ranks8-full/fp32 ranks8-full/lp-grads ranks8-full/lp-grads"
ORDER=${ORDER:-"$A $B8"}
for part in $ORDER; do
    out=$("$MPX" sweep "$STUDY/$part.cfg" --max-cells 1 2>&1)
    rc=$?
    printf '%s\n' "$out" >> "$STUDY/$(dirname "$part")/study.log"
    case "$out" in *interrupted*) exit 1 ;; esac
    [ "$rc" -eq 0 ] || echo "run.sh: $part: exit $rc (study.log)" >&2
done
