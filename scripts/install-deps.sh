#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages spool needs to build and test.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libgtest-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev
  libcurl4-openssl-dev liburing-dev libcpp-httplib-dev libsqlite3-dev libyaml-cpp-dev zlib1g-dev nginx-light openssl ca-certificates
  openmpi-bin libopenmpi-dev  # Open MPI: the --dist transport and its mpirun test (tests/dist)
  chromium  # chromium: the web UI's browser tests (tests/ui), run headless
  clang-14 libclang-rt-14-dev python3)  # clang, its sanitizer and libFuzzer runtimes, and the seed script: scripts/fuzz.sh, scripts/sanitize.sh
# node + npm run the OpenAI API tests (tests/api); Debian's packages unless a node is already installed.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
