#!/usr/bin/env bash
# Sanitizer builds of spool and their test runs (docs/RELIABILITY.md):
#   scripts/sanitize.sh asan   whole test suite (gtest + OpenAI API tests) under
#                              AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/
#   scripts/sanitize.sh tsan   the threaded parts (engine, scheduler, thread pool,
#                              streaming store, HTTP storage, server) under
#                              ThreadSanitizer, in build-tsan/
# Both use clang-14 (scripts/install-deps.sh). Extra arguments go to ctest
# (asan) or to spool_tests (tsan), e.g. --gtest_filter=Engine.*
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
case $kind in
  asan)
    configure build-asan address,undefined
    cmake --build build-asan -j"$jobs"
    # Leaks are reported (detect_leaks=1 is ASan's default on Linux); any report fails the test that made it.
    export ASAN_OPTIONS=abort_on_error=1:detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # Not the install test: it loads libspool.so into python and node, which
    # would need the sanitizer runtime preloaded (capi_c covers the C API).
    (cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1800 -LE install "$@")
    ;;
  tsan)
    configure build-tsan thread
    cmake --build build-tsan -j"$jobs" --target spool spool_tests
    filter='Engine*:Sampler*:KvPaged*:PrefixCache*:Streaming*:StreamingScratch*:HttpStorage*:LocalStorage*'
    filter+=':Server*:Matmul*:MatmulBatchInvariance*:BatchInvariance*:MoeBatching*:RunStore*:Generation*'
    filter+=':StorageFaults*:HttpStorageFaults*:*GdnEngine*:*HybridPrefix*:SchedulerHints*:PipelineHints*'
    filter+=':KvPagedHints*:AgentsCli*:StateSnapshotsTest*'
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    build-tsan/spool_tests --gtest_filter="$filter" "$@"
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [ctest or gtest arguments]" >&2
    exit 2
    ;;
esac
