#!/usr/bin/env bash
# make device-study: protocol A's main cells on one NVIDIA GPU in one command
# (results/bingbert-repro/gpu.cfg: fp32, fp16-scaled and bf16-master, seeds 1-3, on
# backend/cuda), all nine at once (`mpx sweep --jobs 9`, one process each on the one
# device; MPX_DEVICE_STUDY_JOBS changes it), then their tables into results/bingbert-repro/gpu/tables.md and, when $OUT is
# set (the device machine's return folder), the records as $OUT/device-study.tar.gz.
# Resumable: finished cells are kept, so a second call runs only what the first did not
# finish. MPX_DEVICE_STUDY_LIMIT (seconds, default 420) bounds the sweep; progress
# (each cell's step) every 30 s.
#
# What it reads: datasets/data/{train,dev}-v1.1.json (all of SQuAD v1.1: make data) and
# models/checkpoints/minilm-l6-bf16/ (MiniLM-L6 rounded to bf16). A device machine takes
# 64 MiB of files and reaches no registry, so here, on a machine with make data, make
# model and nvcc:
#   bash tests/device-study.sh pack
# writes .devcarry/study.tar.xz (the binaries, the libraries they link, the SQuAD articles
# protocol A reads and the bf16 checkpoint); there, carrying .devcarry/study.tar.xz:
#   tar xJf .devcarry/study.tar.xz && MPX_DEVICE_PREBUILT=1 bash tests/device-study.sh
#
# MPX_DEVICE_STUDY_SMOKE=1 runs the same steps on backend/cpu, 2 steps and 8 dev questions
# a cell, 3 cells at a time, into a temporary folder (from the fp32 checkpoint when there is no bf16 one):
# the script's own check without a GPU (make test runs it: tests/test_device_study.c).
#
# Not here: protocol B8 (issue 45's 8-rank cells on all of SQuAD). Its fp32 cell is 1 rank
# with 8x accumulation only up to the summation order, and its pre-0.13.3 bf16 cells are
# not one rank on its shard (DeepSpeed gathers the ranks' partitions every step: RANKS.md),
# so they need 8 ranks; comm/nccl refuses two ranks on one GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
say() { printf '[device-study %4ds] %s\n' $(( $(date +%s) - t0 )) "$*"; }
CKPT=models/checkpoints/minilm-l6-bf16

if [ "${1:-}" = pack ]; then
    # one self-sufficient pack: the device machine has the CUDA toolkit and a newer glibc
    # but none of .ci/run's packages, and takes 64 MiB of files with the working tree
    # (about 20 MB)
    set -e
    [ -f datasets/data/train-v1.1.json ] && [ -f datasets/data/dev-v1.1.json ] || make data
    [ -f models/checkpoints/minilm-l6/model.safetensors ] || make model
    make -j"$(nproc 2>/dev/null || echo 2)" all >/dev/null
    [ -f build/plugins/backend-cuda.so ] || { say "no nvcc here: backend-cuda.so was not built"; exit 1; }
    mkdir -p "$CKPT" .devcarry
    python3 tests/safetensors_bf16.py models/checkpoints/minilm-l6/model.safetensors "$CKPT/model.safetensors"
    cp models/checkpoints/minilm-l6/config.json models/checkpoints/minilm-l6/vocab.txt "$CKPT/"
    (cd "$CKPT" && sha256sum model.safetensors config.json vocab.txt > SHA256SUMS)
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build" "$stage/.devcarry/lib" "$stage/datasets/data"
    cp -a build/bin build/plugins "$stage/build/"
    [ -f build/git-commit.txt ] && cp build/git-commit.txt "$stage/build/"
    # the libraries mpx and its plugins link that are not glibc's, the compiler's or CUDA's
    for f in build/bin/* build/plugins/*.so; do ldd "$f" 2>/dev/null | awk '$3 ~ /^\// { print $3 }'; done | sort -u |
        grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libmvec|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
        grep -v '^/usr/local/cuda' | while read -r lib; do cp -L "$lib" "$stage/.devcarry/lib/$(basename "$lib")"; done
    # SQuAD's articles up to the last of protocol A's questions (the first 9,000 train and
    # 2,000 dev questions: the same windows as the whole files give); the records' data
    # hashes are the cut files'
    python3 - "$stage/datasets/data" <<'PY'
import json, sys
for name, need in (("train", 9000), ("dev", 2000)):
    with open(f"datasets/data/{name}-v1.1.json") as f:
        d = json.load(f)
    keep, n = [], 0
    for art in d["data"]:
        if n >= need:
            break
        keep.append(art)
        n += sum(len(p["qas"]) for p in art["paragraphs"])
    d["data"] = keep
    with open(f"{sys.argv[1]}/{name}-v1.1.json", "w") as f:
        json.dump(d, f)
PY
    cp datasets/data/vocab.txt "$stage/datasets/data/"
    mkdir -p "$stage/$(dirname "$CKPT")" && cp -a "$CKPT" "$stage/$CKPT"
    tar -C "$stage" -cf - build .devcarry/lib datasets/data "$CKPT" | xz -T0 -9 > .devcarry/study.tar.xz
    tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    pack=$(stat -c %s .devcarry/study.tar.xz)
    say ".devcarry/study.tar.xz: $((pack / 1048576)) MiB; with the working tree ($((tree / 1048576)) MiB):" \
        "$(((pack + tree) / 1048576)) MiB of the 64 MiB a device machine takes"
    exit 0
fi

cfg=results/bingbert-repro/gpu.cfg
out_dir=results/bingbert-repro/gpu
extra=()
jobs=${MPX_DEVICE_STUDY_JOBS:-9}
if [ "${MPX_DEVICE_STUDY_SMOKE:-0}" = 1 ]; then
    # the same sweep on the cpu backend, cut down, in a folder of its own
    smoke=$(mktemp -d)
    # without the pack's bf16 checkpoint (make test's machine), MiniLM's own fp32 one
    [ -f "$CKPT/model.safetensors" ] || CKPT=models/checkpoints/minilm-l6
    sed -e 's|^base = "../../configs|base = "'"$PWD"'/configs|' -e "s|models/checkpoints/minilm-l6-bf16|$CKPT|" \
        -e 's|"backend.plugin=\\"cuda\\""|"backend.plugin=\\"cpu\\"", "data.squad.train_questions=6", "data.squad.dev_questions=8", "train.max_steps=2", "backend.cpu.threads=1"|' \
        "$cfg" > "$smoke/gpu.cfg"
    cfg=$smoke/gpu.cfg
    out_dir=$smoke/gpu
    extra=(-s "run.output_dir=\"$smoke\"")
    # three at a time: a cell parses all of SQuAD (under the sanitizers 1.7 GB a process)
    jobs=${MPX_DEVICE_STUDY_JOBS:-3}
    say "smoke run on backend/cpu in $smoke, from $CKPT"
    # shellcheck source=tests/device-env.sh
    . tests/device-env.sh
else
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    # shellcheck source=tests/device-env.sh
    . tests/device-env.sh
    if [ "${MPX_DEVICE_PREBUILT:-0}" != 1 ]; then
        say "build"
        make -j"$(nproc 2>/dev/null || echo 2)" all >build/device-study-build.log 2>&1 ||
            { tail -30 build/device-study-build.log; say "build failed"; exit 1; }
    fi
    [ -f build/plugins/backend-cuda.so ] || { say "no backend-cuda.so (built without nvcc?)"; exit 1; }
fi
for f in datasets/data/train-v1.1.json datasets/data/dev-v1.1.json "$CKPT/model.safetensors"; do
    [ -f "$f" ] || { say "missing $f: see the head of tests/device-study.sh (pack, then unpack here)"; exit 1; }
done

say "sweep: 9 cells, $jobs at once ($(basename "$cfg"))"
timeout "${MPX_DEVICE_STUDY_LIMIT:-420}" build/bin/mpx sweep "$cfg" --jobs "$jobs" "${extra[@]}" >build/device-study-sweep.log 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
    sleep "${MPX_DEVICE_STUDY_EVERY:-30}"
    kill -0 "$pid" 2>/dev/null && say "$(build/bin/mpx sweep "$cfg" --status "${extra[@]}" 2>/dev/null |
        awk '/^  [a-z]/ { printf "%s%s %s", (n++ ? "; " : ""), $2, $1 } /^ +step / { sub(",", "", $2); printf " (step %s)", $2 }')"
done
wait "$pid"
rc=$?
tail -12 build/device-study-sweep.log
[ "$rc" -eq 124 ] && say "the sweep ran out of its ${MPX_DEVICE_STUDY_LIMIT:-420} s: run this again to finish the cells"

# the tables, from the records (every number traces to them)
mpx=build/bin/mpx
{
    echo "# Protocol A on one GPU: $out_dir/ (tests/device-study.sh)"
    echo
    echo '```'
    $mpx matrix "$out_dir" --rows precision.plugin --cols run.seed --metric exact_match,f1,final_loss_mean 2>&1
    echo '```'
    echo
    echo '```'
    $mpx matrix "$out_dir" --rows precision.plugin --metric exact_match,f1 --paired fp32 2>&1
    echo '```'
} > "$out_dir/tables.md"
cat "$out_dir/tables.md"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    # the records only, as git keeps them (results/.gitignore): no checkpoints, no SQuAD text
    tar -czf "$OUT/device-study.tar.gz" --exclude=checkpoint --exclude=train_state --exclude=predictions.json \
        --exclude=nbest_predictions.json --exclude=mpx.lock --exclude='*.tmp' "$out_dir" build/device-study-sweep.log
    say "records: \$OUT/device-study.tar.gz"
fi
[ -n "${smoke:-}" ] && [ "${MPX_DEVICE_STUDY_KEEP:-0}" != 1 ] && rm -rf "$smoke"
say "done (exit $rc)"
exit "$rc"
