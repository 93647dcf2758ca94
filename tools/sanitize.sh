#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in a
# build of its own (build-asan/): every unit and integration test, the
# launcher's included (they start the sanitized binaries). Left out: the
# Python module (an instrumented extension would need libasan preloaded into
# python3) and the install test (it links trainers out of tree without the
# sanitizer runtime); CUDA off.
#   tools/sanitize.sh            after tools/dev.sh has installed the packages
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -f build-asan/build.ninja ]]; then
  meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled -Dpython=disabled \
    -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C build-asan
# halt_on_error: a report fails the test that caused it. Leaks are reported
# at exit of each process. ZeroMQ and RocksDB are not instrumented: their
# own allocations are not checked, only ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
tests=$(meson test -C build-asan --list 2>/dev/null | sed -n 's/^shardps:[a-z]* \/ //p' | grep -vx -e embed_install -e python)
exec meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 3 $tests
