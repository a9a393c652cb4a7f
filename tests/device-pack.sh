#!/usr/bin/env bash
# For a device machine that reaches no package registry (this workplace's: the CUDA
# toolkit and a newer glibc, but none of .ci/run's packages): build here, then pack into
# .devcarry/pack.tar.xz (ignored by git) what `make device-check` needs there —
#   build/                the binaries and plugins built here (x86-64, glibc 2.36), the
#                         CUDA suites and bench_cuda_step
#   .devcarry/lib/        the shared libraries they link that are not glibc's, the
#                         compiler's or CUDA's (Criterion and its needs, libconfig,
#                         jansson, utf8proc, OpenBLAS, OpenMPI's libraries)
#   .devcarry/debs/       OpenMPI's runtime as Debian packages (comm/nccl's bootstrap)
#   datasets/data/        a cut of SQuAD (the first 3 train and 2 dev articles): enough
#                         for configs/tiny_squad.cfg (24 train, 8 dev questions), which
#                         is all the tiny-BERT suite reads
# On the device machine, carrying .devcarry with the working tree:
#   tar xJf .devcarry/pack.tar.xz && MPX_DEVICE_PREBUILT=1 bash tests/device-check.sh
# (device-check.sh then skips the build and puts .devcarry/lib on LD_LIBRARY_PATH).
# The CUDA libraries (cudart, cuBLAS) are the device machine's own: the build here links
# them by soname (13) with an rpath to /usr/local/cuda/lib64.
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" all build/tests/test_cuda_ops build/tests/test_cuda_optim build/tests/test_cuda_bert \
    build/bench/bench_cuda_step >/dev/null
[ -f build/plugins/backend-cuda.so ] || { echo "device-pack: no nvcc here, backend-cuda.so was not built" >&2; exit 1; }
[ -f datasets/data/train-v1.1.json ] || make data

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/.devcarry/lib" "$stage/datasets/data"
# only what device-check.sh and device-study.sh run (not the other suites, the fuzzers,
# the objects): the pack and the study's data share the device machine's 64 MiB
mkdir -p "$stage/build/tests" "$stage/build/bench"
cp -a build/bin build/plugins "$stage/build/"
cp -a build/tests/test_cuda_ops build/tests/test_cuda_optim build/tests/test_cuda_bert "$stage/build/tests/"
cp -a build/bench/bench_cuda_step "$stage/build/bench/"
[ -f build/git-commit.txt ] && cp build/git-commit.txt "$stage/build/"
# every non-system library the built programs and plugins link, resolved through links
for f in build/bin/* build/plugins/*.so build/tests/test_cuda_* build/bench/bench_cuda_step; do
    ldd "$f" 2>/dev/null | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libmvec|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -v '^/usr/local/cuda' | while read -r lib; do cp -L "$lib" "$stage/.devcarry/lib/$(basename "$lib")"; done
# OpenMPI's runtime for comm/nccl's bootstrap (device-check.sh adds the files to a machine
# that has none): libopenmpi3 and what its components load
mkdir -p "$stage/.devcarry/debs"
(cd "$stage/.devcarry/debs" && apt-get download -q libopenmpi3 openmpi-common libpmix2 libhwloc15 libhwloc-plugins \
    libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libibverbs1 libmunge2 libnl-3-200 libnl-route-3-200 \
    libpsm-infinipath1 libpsm2-2 libucx0 librdmacm1 libnuma1 >/dev/null 2>&1) ||
    echo "device-pack: apt-get download of OpenMPI's runtime failed: comm/nccl will not be checked where it is missing" >&2
python3 - "$stage/datasets/data" <<'EOF'
import json, sys
for name, articles in (("train", 3), ("dev", 2)):
    with open(f"datasets/data/{name}-v1.1.json") as f:
        d = json.load(f)
    d["data"] = d["data"][:articles]
    with open(f"{sys.argv[1]}/{name}-v1.1.json", "w") as f:
        json.dump(d, f)
EOF
mkdir -p .devcarry
tar -C "$stage" -cJf .devcarry/pack.tar.xz build .devcarry/lib .devcarry/debs datasets/data
echo "device-pack: .devcarry/pack.tar.xz, $(du -h .devcarry/pack.tar.xz | cut -f1) ($(ls "$stage/.devcarry/lib" | wc -l) libraries)"
