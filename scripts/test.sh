#!/usr/bin/env bash
# Installs dependencies, builds spool from scratch in build/, runs the test
# suite, then cross-builds the kernels for ARM64 and tests them under qemu
# (scripts/test-arm.sh). Set SPOOL_SKIP_ARM=1 to skip the ARM stage.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
npm ci --prefix tests/api --no-audit --no-fund  # the official openai package, for tests/api
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
if [ -z "${SPOOL_SKIP_ARM:-}" ]; then
  scripts/test-arm.sh
fi
