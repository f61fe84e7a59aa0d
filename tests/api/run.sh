#!/usr/bin/env bash
# CTest entry for the OpenAI API tests: installs the npm dependencies (the
# official `openai` package, and the agent SDKs of responses_sdks.test.mjs)
# when they are missing, then runs every
# tests/api/*.test.mjs with node's test runner. Each test file starts its own
# `spool serve` on an OS-chosen loopback port and stops it.
# Usage: tests/api/run.sh SPOOL_BIN SHARED_DIR [reliability|dist]
# Without the third argument: every test file but the reliability ones (hostile
# clients, cancel storm, storage faults through serve, locally and over HTTP),
# which run with it
# (ctest api_reliability, label reliability), and the --dist ep ones under
# mpirun, which run with `dist` (ctest dist_api, where MPI was found; SPOOL_MPIRUN).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export SPOOL_BIN="$1" SPOOL_SHARED_DIR="$2"
if [ ! -f "$here/node_modules/openai/package.json" ] || [ ! -f "$here/node_modules/@openai/agents/package.json" ]; then
  npm ci --prefix "$here" --no-audit --no-fund >&2
fi
cd "$here"
reliability=(hostile_clients.test.mjs cancel_storm.test.mjs storage_faults.test.mjs http_storage_faults.test.mjs)
dist=(dist_serve.test.mjs)
if [ "${3:-}" = reliability ]; then
  exec node --test --test-concurrency=1 "${reliability[@]}"
fi
if [ "${3:-}" = dist ]; then
  exec node --test --test-concurrency=1 "${dist[@]}"
fi
files=()
for f in ./*.test.mjs; do
  case " ${reliability[*]} ${dist[*]} " in *" ${f#./} "*) ;; *) files+=("$f") ;; esac
done
exec node --test --test-concurrency=2 "${files[@]}"
