#!/usr/bin/env bash
# Sanitizer builds of spool and their test runs (docs/RELIABILITY.md):
#   scripts/sanitize.sh asan   the test suite (gtest, the C API test, the OpenAI API and web UI tests) under
#                              AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/; leaks are
#                              reported (at exit of every test process and every server the node tests start)
#   scripts/sanitize.sh tsan   the threaded parts (engine, scheduler, thread pool, streaming store, local and
#                              HTTP storage, server, agents runtime) under ThreadSanitizer, in build-tsan/,
#                              then every OpenAI API test against the TSan build of `spool serve`
#   scripts/sanitize.sh ci     both, as .ci/run runs them: asan without the web UI test (chromium), then tsan
# Both use clang-14 (scripts/install-deps.sh). Extra arguments go to ctest
# (asan) or to spool_tests (tsan), e.g. --gtest_filter=Engine.*
# SANITIZE_CTEST_EXCLUDE: ctest labels left out of the asan run (default
# "install": the install test loads libspool.so into python and node, which
# would need the sanitizer runtime preloaded; capi_c covers the C API).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
jobs=${JOBS:-$(nproc)}
configure() {  # build dir, sanitizers
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSPOOL_SANITIZE="$2" "${launcher[@]}" >/dev/null
}
stage() { echo "sanitize: $* ($(date -u +%H:%M:%S), ${SECONDS}s in)" >&2; }

run_asan() {
  stage "asan: building build-asan/"
  configure build-asan address,undefined
  cmake --build build-asan -j"$jobs"
  # The node tests' packages, once, before ctest runs two node test entries side by side
  # (each would otherwise run `npm ci` in the same folder at once).
  [ -f tests/api/node_modules/openai/package.json ] || npm ci --prefix tests/api --no-audit --no-fund >&2
  stage "asan: running the suite (ctest -LE '${SANITIZE_CTEST_EXCLUDE:-install}')"
  # abort_on_error: a report kills the test that made it (its ctest entry fails).
  export ASAN_OPTIONS=abort_on_error=1:detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1800 -LE "${SANITIZE_CTEST_EXCLUDE:-install}" "$@")
  unset ASAN_OPTIONS UBSAN_OPTIONS
  stage "asan: done"
}

run_tsan() {
  stage "tsan: building build-tsan/"
  configure build-tsan thread
  cmake --build build-tsan -j"$jobs" --target spool spool_tests
  filter='Engine*:Sampler*:KvPaged*:PrefixCache*:Streaming*:StreamingScratch*:HttpStorage*:LocalStorage*'
  filter+=':Server*:Matmul*:MatmulBatchInvariance*:BatchInvariance*:MoeBatching*:RunStore*:Generation*'
  filter+=':StorageFaults*:HttpStorageFaults*:*GdnEngine*:*HybridPrefix*:SchedulerHints*:PipelineHints*'
  filter+=":KvPagedHints*:AgentsCli*:StateSnapshotsTest*:KvDisk*:ExpertParallel*"
  # tests/tsan.supp: reports from inside Debian's uninstrumented cpp-httplib only (the file says why).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}"
  stage "tsan: running the threaded tests"
  build-tsan/spool_tests --gtest_filter="$filter" "$@"
  # The real server under TSan: every OpenAI API test file (reliability ones included) against
  # build-tsan/spool; a server that exits with a report fails its test (tests/api/spool_process.mjs).
  stage "tsan: running the OpenAI API tests against build-tsan/spool"
  SPOOL_SANITIZED=1 tests/api/run.sh "$PWD/build-tsan/spool" "$PWD/../shared"
  SPOOL_SANITIZED=1 tests/api/run.sh "$PWD/build-tsan/spool" "$PWD/../shared" reliability
  stage "tsan: done"
}

case $kind in
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  ci)
    SANITIZE_CTEST_EXCLUDE="install|ui" run_asan
    run_tsan
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan|ci [ctest or gtest arguments]" >&2
    exit 2
    ;;
esac
