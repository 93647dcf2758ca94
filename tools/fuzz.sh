#!/usr/bin/env bash
# Fuzzes every target of tests/fuzz (docs/fuzzing.md) with libFuzzer, under
# AddressSanitizer + UndefinedBehaviorSanitizer, in a clang build of its
# own (build-fuzz/), each for a bounded time on a copy of its seed corpus
# (the committed corpus is never written). Prints each target's executions;
# exits non-zero when any target crashed, its reproducer kept under
# build-fuzz/fuzz-out/crashes/<target>/ (commit it to tests/fuzz/crashes/
# once fixed: the suite then replays it).
#   tools/fuzz.sh [SECONDS] [TARGET...]   SECONDS per target, default 60
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(wire server coordinator job_config snapshot criteo fill_state)
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzzing=true -Dcuda=disabled -Dpython=disabled \
    -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null || exit 1
fi
ninja -C build-fuzz -j "${FUZZ_JOBS:-2}" "${targets[@]/#/tests/fuzz/fuzz_}" || exit 1

out=build-fuzz/fuzz-out
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
summary=()
for t in "${targets[@]}"; do
  work=$out/corpus/$t
  crashes=$out/crashes/$t
  rm -rf "$work" "$crashes"
  mkdir -p "$work" "$crashes"
  cp tests/fuzz/corpus/"$t"/* "$work"/
  log=$out/$t.log
  # -rss_limit_mb: the targets keep their servers small (a memory budget of
  # 8 MiB); more is a leak or an unbounded allocation.
  build-fuzz/tests/fuzz/fuzz_"$t" "$work" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$crashes/" </dev/null >"$log" 2>&1
  r=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((r != 0)); then
    rc=1
    summary+=("$t: CRASHED after ${execs:-?} executions (exit $r): $(ls "$crashes" | head -1) (log: $log)")
    grep -m3 -E "ERROR: |runtime error|SUMMARY" "$log" | sed 's/^/    /'
  else
    summary+=("$t: ${execs:-?} executions in ${secs} s, no crash")
  fi
done
echo "fuzz.sh: ${secs} s per target"
printf '  %s\n' "${summary[@]}"
exit $rc
