#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (halt on the
# first error, leak checking on in every suite), in its own tree so the normal build stays
# as it is: the sources are copied to SAN_DIR (default build-asan/), built there with
# -fsanitize=address,undefined, and the suites run there (they run build/bin/mpx
# and build/plugins relative to their tree), outside make. The data and checkpoint folders are linked,
# not copied. Leaks inside libconfig's scanner, Criterion, OpenMPI's MPI_Init and PMIx's
# progress thread are suppressed (tests/lsan.supp); everything else fails the suite.
# Used by .ci/run.
#
# The ranks (every process mpirun starts: test_ranks, test_update_window) get two more
# settings, from an `mpirun` put first on PATH (build/san-bin/mpirun): no_dlclose.so
# preloaded (tests/support/no_dlclose.c), so that OpenMPI's components stay loaded after
# MPI_Finalize and LSan can name their frames (OpenMPI 4.1 has no MCA parameter to keep
# them), and malloc stacks unwound with DWARF (fast_unwind_on_malloc=0: OpenMPI is built
# without frame pointers, and the fast unwinder loses the stack at its first frame, before
# the frame a suppression names). That makes the ranks about 3 times slower, so it is
# kept to them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${SAN_DIR:-$root/build-asan}
rm -rf "$dir" && mkdir -p "$dir"
tar --exclude=./build --exclude=./build-asan --exclude=./runs --exclude=./.git \
    --exclude=./.study-build --exclude=./datasets/data --exclude=./models/checkpoints -cf - . | (cd "$dir" && tar xf -)
ln -s "$root/datasets/data" "$dir/datasets/data"
mkdir -p "$dir/models" && ln -s "$root/models/checkpoints" "$dir/models/checkpoints"
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
san="gcc -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cd "$dir"
make -j2 CC="$san" OPT="-O1 -g" test-build
# not instrumented: it is preloaded into mpirun as well
gcc -shared -fPIC -O1 -Wall -Wextra -Werror -o build/lib/no_dlclose.so tests/support/no_dlclose.c
real_mpirun=$(command -v mpirun || true)
if [ -n "$real_mpirun" ]; then
    mkdir -p build/san-bin
    {
        echo '#!/bin/sh'
        echo '# from tests/sanitize.sh: the ranks keep OpenMPI components loaded and unwind malloc'
        echo '# stacks with DWARF (verify_asan_link_order=0: no_dlclose.so comes before libasan)'
        echo "export LD_PRELOAD=\"$dir/build/lib/no_dlclose.so\${LD_PRELOAD:+:\$LD_PRELOAD}\""
        echo 'export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0:fast_unwind_on_malloc=0"'
        # leak checking off in every rank unless SAN_RANK_LEAKS=1 (below): the other suites
        # that start ranks (test_update_window, test_update_threads) get the same setting
        if [ "${SAN_RANK_LEAKS:-0}" != 1 ]; then echo 'export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"'; fi
        echo "exec \"$real_mpirun\" \"\$@\""
    } > build/san-bin/mpirun
    chmod +x build/san-bin/mpirun
    export PATH="$dir/build/san-bin:$PATH"
fi
# run outside make: test_install runs `make install` itself, which must not inherit
# this make's variables
# the multi-rank suites one test at a time: each test starts 2-3 ranks and mpirun, and
# under ASan with DWARF unwinding two such tests at once on 2 cores crowd each other
rc=0
bash tests/run-tests.sh $(grep -v '/test_ranks$' build/tests.list) || rc=1
ranks=$(grep '/test_ranks$' build/tests.list || true)
# Leak checking in the ranks is off by default: LeakSanitizer's own tracer sometimes
# crashes at a rank's exit ("Tracer caught signal 11 ... LeakSanitizer has encountered a
# fatal error", with OpenMPI's progress threads alive), failing a test that is fine. ASan
# and UBSan stay on. SAN_RANK_LEAKS=1 turns leak checking on there too (the wrapper and
# suppressions above make it meaningful). The mpirun wrapper applies the same setting to
# the ranks the other suites start; their own processes keep leak checking.
if [ -n "$ranks" ]; then
    if [ "${SAN_RANK_LEAKS:-0}" = 1 ]; then RUN_TESTS_JOBS=1 bash tests/run-tests.sh $ranks || rc=1
    else
        echo "test_ranks under ASan + UBSan, leak checking off (SAN_RANK_LEAKS=1 turns it on):"
        ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=0 RUN_TESTS_JOBS=1 bash tests/run-tests.sh $ranks || rc=1
    fi
fi
exit $rc
