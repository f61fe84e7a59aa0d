#!/usr/bin/env bash
# Agent pipeline benchmark (issue 11): planner -> 4 parallel executors ->
# summarizer over a shared ~2000-token context, on one model, run
#   (a) naive: spool serve --no-prefix-cache --parallel 1, one request at a time;
#   (b) as a spool pipeline (POST /v1/pipelines; parallel stage batched, shared context from the prefix cache);
#   (c) the same requests against llama.cpp's llama-server -np 4 (4 slots, its prompt cache on), in the order
#       and concurrency a pipeline uses (planner, 4 executors at once, summarizer).
# Alternating rounds; prints a markdown table of medians (wall seconds, ratios) and keeps raw lines in the run dir.
#
# usage: bench/agents_compare.sh MODEL PEER_BIN_DIR
# environment: SPOOL_BIN=build/spool THREADS=2 MAX_TOKENS=32 WORDS=1500 ROUNDS=2 PORT=18400 SPOOL_BENCH_DIR=/tmp/spool-bench
set -euo pipefail
die() { echo "agents_compare: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 MODEL PEER_BIN_DIR"
MODEL=$(realpath "$1"); [ -f "$MODEL" ] || die "no such model: $1"
PEER=$(cd "$2" && pwd); [ -x "$PEER/llama-server" ] || die "$PEER/llama-server not found"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
THREADS=${THREADS:-2}; MAX_TOKENS=${MAX_TOKENS:-32}; WORDS=${WORDS:-1500}; ROUNDS=${ROUNDS:-2}; PORT=${PORT:-18400}
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}; mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/agents-XXXXXX")
CTX=4096

# Something else answering on the port would be measured instead (e.g. a server left from an interrupted run).
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && die "port $PORT is already in use; stop that server or set PORT"
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; die "server did not start"; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

run_spool() {  # $1 mode, extra serve args after
  local mode=$1; shift
  local data; data=$(mktemp -d "$RUN/data-XXXXXX")
  "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c "$CTX" --data-dir "$data" "$@" 2>>"$RUN/spool.log" &
  local pid=$!; wait_up
  node "$REPO/bench/agents_bench.mjs" "http://127.0.0.1:$PORT" "$mode" "$MAX_TOKENS" "$WORDS" | tee -a "$RUN/raw.jsonl"
  stop $pid
}
run_llama() {
  "$PEER/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -np 4 -c $((CTX * 4)) --no-webui >>"$RUN/llama.log" 2>&1 &
  local pid=$!; wait_up
  node "$REPO/bench/agents_bench.mjs" "http://127.0.0.1:$PORT" requests "$MAX_TOKENS" "$WORDS" | sed 's/"requests"/"llama-server"/' | tee -a "$RUN/raw.jsonl"
  stop $pid
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then
    run_spool naive --no-prefix-cache --parallel 1; run_spool pipeline --parallel 4; run_llama
  else
    run_llama; run_spool pipeline --parallel 4; run_spool naive --no-prefix-cache --parallel 1
  fi
done

python3 - "$RUN/raw.jsonl" "$MODEL" "$THREADS" "$MAX_TOKENS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda m, k: statistics.median(r[k] for r in rows if r["mode"] == m)
a, b, c = med("naive", "wall_s"), med("pipeline", "wall_s"), med("llama-server", "wall_s")
print(f"\nModel {sys.argv[2].split('/')[-1]}, {sys.argv[3]} threads, {sys.argv[4]} tokens per agent, medians of {sum(r['mode']=='pipeline' for r in rows)} rounds\n")
print("| run | wall s | prompt tokens | cached tokens | vs (a) | vs (c) |")
print("|---|---:|---:|---:|---:|---:|")
for name, m, w in (("(a) naive: one request at a time, no prefix reuse", "naive", a), ("(b) spool pipeline", "pipeline", b),
                   ("(c) llama-server -np 4, same requests", "llama-server", c)):
    print(f"| {name} | {w:.2f} | {med(m, 'prompt_tokens'):.0f} | {med(m, 'cached_tokens'):.0f} | {w / a:.2f} | {w / c:.2f} |")
print(f"\n(b) takes {100 * b / a:.0f} % of (a)'s wall time ({100 * (a - b) / a:.0f} % faster) and {100 * b / c:.0f} % of (c)'s.")
PY
echo "raw results: $RUN" >&2
