#!/usr/bin/env bash
# make device-check: the checks that need an NVIDIA GPU, in one command (under 8 minutes
# on an H200): build (nvcc for sm_90 + PTX), run the CUDA suites — on a device a skip is
# a failure — and time one training step per precision policy for a MiniLM-sized and a
# bert-base-sized BERT (random weights) against the cuBLAS GEMM ceiling measured in the
# same run (tests/bench_cuda_step.c), and runs compute-sanitizer's memcheck over the
# suites and a tiny-BERT run per policy, and its racecheck and synccheck over the row
# kernels. Figures go to results/anchors/ (cuda_step.md,
# cuda_step.json, cuda_tests.txt, cuda_errors.tsv: each compared output's error against
# its bound; cuda_tf32_check.txt: the fp32 GEMM cases failing with TF32 allowed, as they
# must; cuda_memcheck.txt; cuda_bench.txt: the timing's whole output, with where the fp32
# and bf16-master steps' time goes by op class; cuda_nccl.txt: comm/nccl at one rank against
# comm/local) and, when $OUT is set (the device machine's return
# folder), to $OUT as well (device-check.tar.gz, with the suites' logs).
#
# What it needs on the device machine: the packages .ci/run installs and the CUDA
# toolkit at /usr/local/cuda; the tiny-BERT suite reads datasets/data (SQuAD, ignored by
# git, 35 MB): carry it with the working tree. No registry is reached: the timing uses
# random weights, no checkpoint. A device machine without those packages (this
# workplace's) takes tests/device-pack.sh's pack instead: MPX_DEVICE_PREBUILT=1 skips the
# build and finds the libraries in .devcarry/lib. Each suite's whole output goes to
# build/device-check-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
dest=results/anchors
mkdir -p "$dest" build/device-check-logs
say() { printf '[device-check %4ds] %s\n' $(( $(date +%s) - t0 )) "$*"; }
finish() {
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        # everything in one archive (the return folder takes few files): the figures and
        # each suite's whole Criterion output, for a failure's assertion text
        tar -czf "$OUT"/device-check.tar.gz "$dest"/cuda_* "$dest"/attention-batched build/device-check-logs 2>/dev/null
        cp -f "$dest"/cuda_step.md "$OUT"/ 2>/dev/null || true
    fi
    say "done (exit $1)"
    exit "$1"
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck source=tests/device-env.sh
. tests/device-env.sh
if [ "${MPX_DEVICE_PREBUILT:-0}" != 1 ] && say "build (-j$jobs; nvcc runs one file at a time)" &&
    ! make -j"$jobs" all build/tests/test_cuda_ops build/tests/test_cuda_optim build/tests/test_cuda_bert \
        build/bench/bench_cuda_step >build/device-check-build.log 2>&1; then
    tail -30 build/device-check-build.log
    say "build failed (log: build/device-check-build.log)"
    finish 1
fi
[ -f build/plugins/backend-cuda.so ] || { say "no nvcc: backend-cuda.so was not built"; finish 1; }

say "CUDA suites"
rm -f "$dest/cuda_errors.tsv"
MPX_TEST_ERRLOG="$PWD/$dest/cuda_errors.tsv" RUN_TESTS_LOGDIR=build/device-check-logs timeout 300 bash tests/run-tests.sh build/tests/test_cuda_ops build/tests/test_cuda_optim build/tests/test_cuda_bert \
    2>&1 | tee "$dest/cuda_tests.txt"
rc=${PIPESTATUS[0]}
if grep -q '\[SKIP\]' "$dest/cuda_tests.txt"; then say "a CUDA suite skipped on the device machine: that is a failure here"; rc=1; fi

# the measured margins: each compared output's error against its bound, worst first
[ -f "$dest/cuda_errors.tsv" ] && sort -t$'\t' -k1,1gr -o "$dest/cuda_errors.tsv" "$dest/cuda_errors.tsv"

# the fp32 bound has teeth: with TF32 allowed, cuBLAS's fp32 GEMMs round their inputs to
# 10 bits and the fp32 GEMM cases must fail (the rest of the suite passes)
say "TF32 check (the fp32 GEMM cases must fail)"
MPX_TEST_CUDA_OPTIONS="device = -1; tf32 = true;" build/tests/test_cuda_ops --filter 'cuda_gemm/*' --verbose \
    >build/device-check-logs/tf32.log 2>&1
# (any GEMM computing in fp32 may fail so, since its 16-bit outputs' bounds are near the
# measured error too; those computing in fp16 or bf16 must not)
n32=$(grep -c 'compute fp32: normalised error' build/device-check-logs/tf32.log)
nother=$(grep 'normalised error' build/device-check-logs/tf32.log | grep -vc 'compute fp32: normalised error')
echo "with tf32 = true: $n32 fp32 GEMM cases over the bound, $nother others" | tee "$dest/cuda_tf32_check.txt"
grep 'normalised error' build/device-check-logs/tf32.log | sed 's/^\[----\] *//' >>"$dest/cuda_tf32_check.txt"
[ "$n32" -gt 0 ] && [ "$nother" -eq 0 ] || { say "the TF32 check did not fail as it must"; rc=1; }

# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses, API errors) over
# the op and optimizer suites and a 2-step tiny-BERT run per policy on the cuda backend
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$cs" ]; then
    say "memcheck"
    : >"$dest/cuda_memcheck.txt"
    for t in build/tests/test_cuda_ops build/tests/test_cuda_optim; do
        timeout 200 "$cs" --tool memcheck --target-processes all --error-exitcode 9 "$t" --jobs 1 \
            >>"$dest/cuda_memcheck.txt" 2>&1
        m=$?; echo "memcheck $(basename "$t"): exit $m" | tee -a "$dest/cuda_memcheck.txt"; [ $m -eq 0 ] || rc=1
    done
    # racecheck (shared-memory hazards) and synccheck (barriers) over the row kernels, the
    # ones with shared memory and __syncthreads
    for tool in racecheck synccheck; do
        timeout 200 "$cs" --tool "$tool" --error-exitcode 9 build/tests/test_cuda_ops --filter 'cuda_rows/*' --jobs 1 \
            >>"$dest/cuda_memcheck.txt" 2>&1
        m=$?; echo "$tool test_cuda_ops cuda_rows: exit $m" | tee -a "$dest/cuda_memcheck.txt"; [ $m -eq 0 ] || rc=1
    done
    for pol in fp32 amp fp16-scaled bf16-master pure-bf16; do
        d=$(mktemp -d)
        timeout 120 "$cs" --tool memcheck --error-exitcode 9 build/bin/mpx run configs/tiny_squad.cfg \
            -s train.max_steps=2 -s "precision.plugin=\"$pol\"" -s 'backend.plugin="cuda"' --out "$d/run" \
            >>"$dest/cuda_memcheck.txt" 2>&1
        m=$?; echo "memcheck tiny-BERT $pol: exit $m" | tee -a "$dest/cuda_memcheck.txt"; [ $m -eq 0 ] || rc=1
        rm -rf "$d"
    done
else
    say "no compute-sanitizer: memcheck not run"
fi

# comm/nccl on one GPU: one rank (NCCL refuses two ranks on one device), MPI started as a
# singleton without a launcher; every collective then moves a rank's own data, so the
# losses and gradient norms of a tiny-BERT run must equal comm/local's, at ZeRO stages 0,
# 2 and 3 (all-reduce; reduce-scatter and all-gather; the layer gathers) in fp32 and
# bf16-master. It checks the bootstrap, the device and stream plumbing and each
# collective's call, not the sums of several ranks.
nccl_lib=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnccl\.so\.2$' | head -1)
[ -n "$nccl_lib" ] || [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] || nccl_lib=/usr/local/cuda/lib64/libnccl.so.2
[ -n "$nccl_lib" ] || nccl_lib=$(find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)
if [ -z "$nccl_lib" ]; then
    say "no libnccl.so.2 on this machine: comm/nccl not checked"; rc=1
else
    say "comm/nccl, one rank ($nccl_lib)"
    : >"$dest/cuda_nccl.txt"
    for z in stage0 stage2 stage3; do
        for pol in fp32 bf16-master; do
            d=$(mktemp -d)
            for c in local nccl; do
                LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$nccl_lib")" \
                OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                    timeout 120 build/bin/mpx run configs/tiny_squad.cfg -s train.max_steps=4 \
                    -s "precision.plugin=\"$pol\"" -s 'backend.plugin="cuda"' -s "comm.plugin=\"$c\"" \
                    -s "zero.plugin=\"$z\"" --out "$d/$c" >"$d/$c.log" 2>&1 || { tail -5 "$d/$c.log"; }
                cut -d, -f2,4 "$d/$c/metrics.csv" 2>/dev/null | tail -n +2 | tr '\n' ' ' >"$d/$c.cols"
            done
            if [ -s "$d/local.cols" ] && cmp -s "$d/local.cols" "$d/nccl.cols"; then v=same; else v=DIFFERENT; rc=1; fi
            echo "zero $z, $pol: loss,grad_norm by step: local [$(cat "$d/local.cols")] nccl [$(cat "$d/nccl.cols")]: $v" |
                tee -a "$dest/cuda_nccl.txt"
            rm -rf "$d"
        done
    done
fi

say "step timing"
timeout 300 build/bench/bench_cuda_step --steps 10 --batch 32 --out "$dest" --profile | tee "$dest/cuda_bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# the same with the attention op issuing each attention GEMM as one batched call
# (backend.cuda.attention = "batched"; cuda_attention.c), the fused ops
# (backend.cuda.fused = true: softmax + dropout, dropout + residual + layernorm; cuda_rows.cu)
# and the linear layers' bias in cuBLASLt's epilogue (backend.cuda.epilogue = true; cuda_gemm.c)
say "step timing, attention = batched, fused ops, bias epilogue"
timeout 300 build/bench/bench_cuda_step --steps 10 --batch 32 --out "$dest/attention-batched" --attention batched \
    --fused --epilogue --profile |
    tee "$dest/cuda_bench_attention_batched.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
finish "$rc"
