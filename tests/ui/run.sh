#!/usr/bin/env bash
# CTest entry for the web UI's browser tests: installs the npm dependencies
# (puppeteer-core) when they are missing, then runs tests/ui/*.test.mjs with
# node's test runner against real `spool serve` processes on loopback, in
# Debian's chromium (headless; CHROMIUM=PATH picks another binary).
# Screenshots go to SPOOL_UI_SCREENSHOT_DIR (default: ui-screenshots next to
# the spool binary); `SPOOL_UI_SCREENSHOT_DIR=docs/ui` refreshes the committed ones.
# Usage: tests/ui/run.sh SPOOL_BIN SHARED_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export SPOOL_BIN="$(realpath "$1")" SPOOL_SHARED_DIR="$(realpath "$2")"
export CHROMIUM="${CHROMIUM:-$(command -v chromium || true)}"
if [ -z "$CHROMIUM" ] || [ ! -x "$CHROMIUM" ]; then
  echo "error: no chromium to run the browser tests (scripts/install-deps.sh installs Debian's; or set CHROMIUM=PATH)" >&2
  exit 1
fi
if [ -n "${SPOOL_UI_SCREENSHOT_DIR:-}" ]; then
  mkdir -p "$SPOOL_UI_SCREENSHOT_DIR"
  export SPOOL_UI_SCREENSHOT_DIR="$(realpath "$SPOOL_UI_SCREENSHOT_DIR")"
else
  export SPOOL_UI_SCREENSHOT_DIR="$(dirname "$SPOOL_BIN")/ui-screenshots"
fi
if [ ! -f "$here/node_modules/puppeteer-core/package.json" ]; then
  npm ci --prefix "$here" --no-audit --no-fund >&2
fi
cd "$here"
exec node --test --test-concurrency=1 ./*.test.mjs
