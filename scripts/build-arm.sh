#!/usr/bin/env bash
# Cross-builds the whole spool binary (and, if they build, its tests) for
# ARM64 Linux on this x86-64 Debian 12 machine, against the arm64 (:arm64
# multiarch) -dev packages of its dependencies; run the result under qemu-user:
#   scripts/build-arm.sh                          # install what is missing, configure, build
#   SPOOL_ARM_SKIP_INSTALL=1 scripts/build-arm.sh # never touch apt
#   SPOOL_ARM_TARGETS="spool" scripts/build-arm.sh   # only the CLI (default: spool spool_tests)
#   QEMU_LD_PREFIX=/ qemu-aarch64 -cpu max build-arm64/spool run ...
# Build tree: build-arm64/ (full configuration; build-arm/ is test-arm.sh's
# kernels-only one). SPOOL_ARM_JOBS sets build parallelism (default nproc).
# On 2 shared cores (load 7-12 from other jobs): apt ~30 s once, configure ~2 s,
# spool from scratch ~15 min.
set -euo pipefail
cd "$(dirname "$0")/.."

# Host tools, the cross g++, and the target's libraries. Libraries with code
# are installed as :arm64 (Debian multiarch: /usr/lib/aarch64-linux-gnu, found
# by the cross g++ and by pkg-config through cmake/aarch64-linux-gnu.cmake);
# header-only ones (nlohmann-json, CLI11) are architecture-independent.
install_deps() {
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  local pkgs=(g++-aarch64-linux-gnu cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev
              libutf8proc-dev:arm64 libcurl4-openssl-dev:arm64 liburing-dev:arm64 libcpp-httplib-dev:arm64
              libsqlite3-dev:arm64 libyaml-cpp0.7:arm64 libyaml-cpp-dev libgtest-dev:arm64) missing=()
  command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null || pkgs+=(qemu-user)
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  install_yaml_cpp_arm64_dev
}

# libyaml-cpp-dev is not multiarch co-installable: installing its :arm64 build
# REMOVES the :amd64 one the x86 build needs (that broke the x86 build once).
# Take the arm64 package's architecture-specific files (pkg-config file, .so
# link, static library, CMake config under /usr/lib/aarch64-linux-gnu) from
# its .deb instead; the headers are the amd64 package's (identical).
install_yaml_cpp_arm64_dev() {
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  [ -f /usr/lib/aarch64-linux-gnu/pkgconfig/yaml-cpp.pc ] && return
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && chmod 777 . && apt-get download -q libyaml-cpp-dev:arm64)
  dpkg -x "$tmp"/libyaml-cpp-dev_*_arm64.deb "$tmp/root"
  $sudo cp -a "$tmp/root/usr/lib/aarch64-linux-gnu/." /usr/lib/aarch64-linux-gnu/
  rm -rf "$tmp"
}

if [ -z "${SPOOL_ARM_SKIP_INSTALL:-}" ]; then
  t0=$(date +%s)
  install_deps
  echo "build-arm: dependencies ready in $(( $(date +%s) - t0 )) s"
fi

# The toolchain file re-roots CMake's package searches at /usr/aarch64-linux-gnu,
# where no CMake package configs live: point at the multiarch ones directly.
# The tests run the CLI through qemu (SPOOL_TEST_EXEC_PREFIX; no binfmt
# needed), on Debian's multiarch loader (QEMU_LD_PREFIX=/, set by test-arm.sh).
# ccache, when installed, makes rebuilds cheap (a fresh build compiles ~170 files).
t0=$(date +%s)
jobs="${SPOOL_ARM_JOBS:-$(nproc)}"
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake "${launcher[@]}" \
  -Dnlohmann_json_DIR=/usr/share/cmake/nlohmann_json \
  -DCLI11_DIR=/usr/share/cmake/CLI11 \
  -DGTest_DIR=/usr/lib/aarch64-linux-gnu/cmake/GTest -DSPOOL_MPI=OFF \
  "-DSPOOL_TEST_EXEC_PREFIX=$(basename "$qemu") -cpu max" >/dev/null
read -r -a targets <<<"${SPOOL_ARM_TARGETS:-spool spool_tests}"
for t in "${targets[@]}"; do
  if ! cmake --build build-arm64 -j"$jobs" --target "$t"; then
    # The CLI is what this script is for; a test binary that does not build
    # is reported, not fatal.
    [ "$t" = spool ] && exit 1
    echo "build-arm: target $t did not build" >&2
  fi
done
echo "build-arm: built ${targets[*]} in $(( $(date +%s) - t0 )) s"

# Smoke test: the aarch64 binary starts under qemu (-cpu max: dotprod and fp16,
# so the NEON kernel table is selected).
# The full binary links Debian's multiarch :arm64 libraries, so it must run on
# their loader and libc (/lib/ld-linux-aarch64.so.1). The cross toolchain's
# loader (/usr/aarch64-linux-gnu) with that libc hangs in the first
# pthread_create (seen as a hang with -t 2).
export QEMU_LD_PREFIX=/
"$qemu" -cpu max build-arm64/spool --version
