#!/usr/bin/env bash
# CTest entry for the OpenAI API tests: installs the npm dependencies (the
# official `openai` package) when they are missing, then runs every
# tests/api/*.test.mjs with node's test runner. Each test file starts its own
# `spool serve` on an OS-chosen loopback port and stops it.
# Usage: tests/api/run.sh SPOOL_BIN SHARED_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export SPOOL_BIN="$1" SPOOL_SHARED_DIR="$2"
if [ ! -f "$here/node_modules/openai/package.json" ]; then
  npm ci --prefix "$here" --no-audit --no-fund >&2
fi
cd "$here"
exec node --test --test-concurrency=2 ./*.test.mjs
