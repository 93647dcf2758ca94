#!/usr/bin/env bash
# The test suite under the sanitizers, each in a build of its own:
#   tools/sanitize.sh [address]  AddressSanitizer + UndefinedBehaviorSanitizer
#                                (build-asan/): every unit and integration test,
#                                the launcher's included (they start the
#                                sanitized binaries). Left out: the Python
#                                module (an instrumented extension would need
#                                libasan preloaded into python3) and the
#                                install test (it links trainers out of tree
#                                without the sanitizer runtime).
#   tools/sanitize.sh thread     ThreadSanitizer (build-tsan/): the programs
#                                with threads of their own — servers (event
#                                loop, snapshot writer, metrics, ZAP handler),
#                                the coordinator, the client's I/O thread —
#                                through the unit and integration tests that
#                                run them; suppressions in tools/tsan.supp,
#                                only for uninstrumented libraries.
# CUDA off in both. Run after tools/dev.sh has installed the packages.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:-address}
case "$mode" in
  address)
    dir=build-asan
    setup=(-Db_sanitize=address,undefined)
    # halt_on_error: a report fails the test that caused it. Leaks are
    # reported at exit of each process. ZeroMQ and RocksDB are not
    # instrumented: their own allocations are not checked, only ours.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    # The chaos test (four whole trainings with kills, the same recoveries
    # as launch_local: four minutes here) runs in the plain suite only, and
    # so do dlrm_peer and mlp_peer (PyTorch scripts: nothing of ours to
    # instrument) and, as under TSan, the launcher over ssh (the binaries of
    # launch_local, started on other hosts: CI's 70 minutes).
    exclude=(-e embed_install -e python -e chaos -e dlrm_peer -e mlp_peer -e launch_ssh)
    multiplier=3 ;;
  thread)
    dir=build-tsan
    setup=(-Db_sanitize=thread)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}
    # As under ASan, but the launcher over ssh and under Slurm (the same
    # binaries as launch_local, started elsewhere) and the chaos test (the
    # same recoveries as launch_local, four whole trainings: ten minutes here).
    exclude=(-e embed_install -e python -e launch_ssh -e launch_slurm -e chaos -e dlrm_peer -e mlp_peer)
    multiplier=5 ;;
  *) echo "usage: tools/sanitize.sh [address|thread]" >&2; exit 2 ;;
esac
# -O1 and line tables only (-g1): what the sanitizers' reports need (frames
# with files and lines), at half the compile time of -O2 -g (a CLI11-heavy
# main: 97 s against 45 s under ASan + UBSan) — the sanitizer builds were
# most of CI's time.
if [[ ! -f $dir/build.ninja ]]; then
  meson setup "$dir" "${setup[@]}" -Db_lundef=false -Dcuda=disabled -Dpython=disabled \
    -Dbuildtype=plain -Doptimization=1 -Dcpp_args=-g1 >/dev/null
fi
t0=$SECONDS
ninja -C "$dir" || exit 1
echo "sanitize.sh: $dir/ built in $((SECONDS - t0)) s"
# The launcher tests of its own logic skip under a sanitizer (launchlib.py).
export SHARDPS_SANITIZER=$mode
tests=$(meson test -C "$dir" --list 2>/dev/null | sed -n 's/^shardps:[a-z]* \/ //p' | grep -vx "${exclude[@]}")
exec meson test -C "$dir" --print-errorlogs --num-processes 2 --timeout-multiplier $multiplier $tests
