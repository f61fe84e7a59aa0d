#!/usr/bin/env bash
# Installs dependencies, builds spool from scratch in build/, runs the test
# suite on the best instruction set this CPU has, again under each lower
# SPOOL_ISA cap (scalar; avx2 on an AVX-512 host: ~30 s each), then
# cross-builds spool for ARM64 and tests it under qemu: the kernels, then the
# whole CLI with a test subset (scripts/test-arm.sh). SPOOL_SKIP_ARM=1 skips that.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
npm ci --prefix tests/api --no-audit --no-fund  # the official openai package, for tests/api
npm ci --prefix tests/ui --no-audit --no-fund   # puppeteer-core, for the browser tests (tests/ui)
npm ci --prefix examples/node --no-audit --no-fund  # koffi, for the Node example of the C API (tests/capi)
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
caps=(scalar)
if [ -z "${SPOOL_ISA:-}" ] && grep -qw avx512f /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo; then caps+=(avx2); fi
for cap in "${caps[@]}"; do
  echo "== test suite with SPOOL_ISA=$cap"
  # The browser tests (label ui) check the page, the install test (label
  # install) the packaging of the C API, the reliability tests (label
  # reliability) the server's limits, and the static checks (label static) the
  # sources, not the kernels: once is enough.
  (cd build && SPOOL_ISA=$cap ctest --output-on-failure -j"$(nproc)" --timeout 600 -LE "ui|install|reliability|static")
done
if [ -z "${SPOOL_SKIP_ARM:-}" ]; then
  scripts/test-arm.sh
fi
