#!/usr/bin/env bash
# Cross-builds spool for ARM64 and tests it under qemu-user on this x86-64
# machine, in two stages: the kernel library (NEON + dotprod + i8mm) with the
# kernel and matmul tests; then the whole spool CLI with a test subset
# (spool_arm_tests: fixture logits and greedy ids of every architecture,
# tokenizers, generation) and stories260K's greedy text against x86's:
#   scripts/test-arm.sh                          # install tools if missing, build, test
#   SPOOL_ARM_SKIP_INSTALL=1 scripts/test-arm.sh # never touch apt
#   scripts/test-arm.sh --gtest_filter='Kernels.*'   # extra args go to the kernel test binary (no second stage)
#   SPOOL_ARM_KERNELS_ONLY=1 scripts/test-arm.sh  # the kernel stage only
#   SPOOL_ARM_FULL=1 scripts/test-arm.sh          # all of spool_tests + the C API test in the second stage
# Build tree: build-arm/ (kernels-only configuration, SPOOL_KERNELS_ONLY=ON);
# SPOOL_ARM_JOBS sets build parallelism (default nproc). On 2 shared cores:
# apt install ~40 s once, build from scratch ~80 s, tests ~10-15 s.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12 packages: the aarch64 cross g++ (with its libc/libstdc++ under
# /usr/aarch64-linux-gnu) and the user-mode emulator.
install_tools() {
  # googletest: its sources, built for the target (no arm64 libgtest here).
  local pkgs=(g++-aarch64-linux-gnu cmake ninja-build googletest) missing=()
  # qemu-user-static provides the same emulator as qemu-user.
  command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null || pkgs+=(qemu-user)
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

if [ -z "${SPOOL_ARM_SKIP_INSTALL:-}" ]; then
  t0=$(date +%s)
  install_tools
  echo "test-arm: tools ready in $(( $(date +%s) - t0 )) s"
fi

t0=$(date +%s)
jobs="${SPOOL_ARM_JOBS:-$(nproc)}"
cmake -S . -B build-arm -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DSPOOL_KERNELS_ONLY=ON >/dev/null
cmake --build build-arm -j"$jobs"
echo "test-arm: built in $(( $(date +%s) - t0 )) s"

# QEMU_CPU=max emulates every optional feature qemu knows, dotprod and fp16
# included, so getauxval(AT_HWCAP) reports ASIMDDP and the NEON table is built;
# the tests then check it against the scalar reference. A run without the
# NEON table would test only the reference, so it counts as a failure.
t0=$(date +%s)
export QEMU_CPU=max QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
# The cross toolchain's own libraries, matching its loader: with Debian's
# multiarch libc6:arm64 also installed, the loader under QEMU_LD_PREFIX would
# otherwise find that libc in /lib/aarch64-linux-gnu, and the mismatched pair
# hangs in the first pthread_create (the thread-pool tests never finish).
export QEMU_SET_ENV=LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
log=build-arm/test.log
"$qemu" build-arm/spool_kernel_tests --gtest_brief=1 "$@" | grep -v '^round trip' | tee "$log"
echo "test-arm: tests ran in $(( $(date +%s) - t0 )) s"
if ! grep -q '^ISAs tested:.* neon' "$log"; then
  echo "test-arm: the NEON kernel table was not exercised" >&2
  exit 1
fi
# "max" has FEAT_I8MM: calls of 2+ tokens ran the SMMLA tiles above
# (kernels/neon/packed_legacy_i8mm.cpp). A Cortex-A76 has dotprod but no i8mm: the
# dotprod tiles of 2+ tokens against the reference and against 1-token calls
# (~6 s of CPU).
if [ -z "${SPOOL_ARM_SKIP_NO_I8MM:-}" ] && [ $# -eq 0 ]; then
  if ! grep -q '^neon packed tiles for 2+ tokens: i8mm' "$log"; then
    echo "test-arm: the i8mm tiles were not exercised under QEMU_CPU=max" >&2
    exit 1
  fi
  a76=$(QEMU_CPU=cortex-a76 "$qemu" build-arm/spool_kernel_tests --gtest_brief=1 \
    --gtest_filter='Kernels.TablesAreComplete:PackedKernels.MatchReferenceVecDot:PackedKernels.NeonBatched*' |
    grep -v '^round trip')
  echo "$a76" | grep -E '^(neon packed|\[  (PASSED|FAILED))'
  if ! grep -q '^neon packed tiles for 2+ tokens: dotprod' <<<"$a76" || ! grep -q '^\[  PASSED' <<<"$a76" ||
    grep -q '^\[  FAILED' <<<"$a76"; then
    echo "test-arm: the dotprod-only run (QEMU_CPU=cortex-a76) failed" >&2
    exit 1
  fi
fi

# A core without dotprod (Cortex-A53) must be detected as such and get the
# scalar table only, never the NEON one (which would fault there).
a53=$(QEMU_CPU=cortex-a53 "$qemu" build-arm/spool_kernel_tests --gtest_filter=Kernels.TablesAreComplete)
if ! grep -q '^ISAs tested: scalar;' <<<"$a53"; then
  echo "test-arm: a CPU without dotprod was given more than the scalar table" >&2
  exit 1
fi
echo "test-arm: kernels OK (NEON table checked against the reference, with and without i8mm; no-dotprod CPU falls back to scalar)"

# ---- the whole spool for ARM64 under qemu ----
# scripts/build-arm.sh cross-builds the CLI and a test binary against Debian's
# :arm64 libraries (build-arm64/); they run on the multiarch loader
# (QEMU_LD_PREFIX=/), and the tests run the CLI through qemu
# (SPOOL_TEST_EXEC_PREFIX). Then:
#  - stories260K's greedy text must be byte-identical to the x86 build's;
#  - by default spool_arm_tests (CMakeLists.txt: every architecture's fixture
#    logits and greedy ids against the transformers references, tokenizers
#    against llama.cpp's vectors, generation) must pass: the subset that fits
#    the CI budget (a fresh cross build of the CLI is ~15 min on 2 cores);
#  - with SPOOL_ARM_FULL=1, all of spool_tests instead, minus the patterns in
#    scripts/test-arm-exclude.txt (what the kernel stage above ran, the slowest,
#    and 4 qemu-only failures; SPOOL_ARM_TEST_FILTER overrides), and the C API
#    test (tests/capi/capi_test.c, against the arm64 libspool.so); ~55 min cold.
# SPOOL_ARM_KERNELS_ONLY=1 stops after the kernel stage.
if [ -n "${SPOOL_ARM_KERNELS_ONLY:-}" ] || [ $# -gt 0 ]; then exit 0; fi
if [ -n "${SPOOL_ARM_FULL:-}" ]; then tests=(spool_tests capi_test); else tests=(spool_arm_tests); fi
SPOOL_ARM_TARGETS="spool ${tests[*]}" scripts/build-arm.sh
for t in "${tests[@]}"; do
  [ -x build-arm64/$t ] || { echo "test-arm: build-arm64/$t did not build" >&2; exit 1; }
done
unset QEMU_SET_ENV
export QEMU_LD_PREFIX=/ QEMU_CPU=max
t0=$(date +%s)
stories=../shared/models/stories260K.gguf
arm_text="$("$qemu" build-arm64/spool run -m "$stories" -p "Once upon a time" -n 64 --temp 0 -t 2 2>/dev/null)"
if [ -x build/spool ]; then
  x86_text="$(build/spool run -m "$stories" -p "Once upon a time" -n 64 --temp 0 -t 2 2>/dev/null)"
  if [ "$arm_text" != "$x86_text" ]; then
    printf 'test-arm: stories260K greedy text differs\n  arm64: %s\n  x86:   %s\n' "$arm_text" "$x86_text" >&2
    exit 1
  fi
  echo "test-arm: stories260K greedy text identical to x86's: $arm_text"
else
  echo "test-arm: build/spool missing: the greedy text was not compared with x86's" >&2
  exit 1
fi
if [ -n "${SPOOL_ARM_FULL:-}" ]; then
  filter="${SPOOL_ARM_TEST_FILTER:-*-$(grep -v '^#' scripts/test-arm-exclude.txt | paste -sd:)}"
  bin=spool_tests
else
  filter="${SPOOL_ARM_TEST_FILTER:-*}"
  bin=spool_arm_tests
fi
"$qemu" build-arm64/$bin --gtest_brief=1 --gtest_filter="$filter" 2>&1 | grep -v '^round trip' | tee build-arm64/test.log
grep -q '^\[  PASSED  \]' build-arm64/test.log && ! grep -q '^\[  FAILED  \]' build-arm64/test.log ||
  { echo "test-arm: $bin failed under qemu" >&2; exit 1; }
if [ -n "${SPOOL_ARM_FULL:-}" ]; then
  "$qemu" build-arm64/capi_test ../shared | tail -n 1 || { echo "test-arm: the C API test failed under qemu" >&2; exit 1; }
fi
echo "test-arm: whole-program tests ran in $(( $(date +%s) - t0 )) s"
echo "test-arm: OK"
