#!/usr/bin/env bash
# Serving throughput, spool serve vs llama.cpp's llama-server, side by side
# in one run (GUIDE.md section 5): each server in turn (alternating order per
# round) on the same model and port range, at concurrency 1, 2, 4, 8, with
# bench/serve_load.mjs firing N concurrent streamed completions of MAX_TOKENS
# tokens (ignore_eos, greedy). Decode tok/s = sum over the requests of their
# decode rate (tokens after the first / time from first to last token);
# end-to-end tok/s = completion tokens / wall time (prefill included).
# Prints a markdown table of medians over the rounds (for docs/BENCHMARKS.md,
# section "Serving vs llama-server") and keeps raw results in the run dir.
#
# usage: bench/serve_compare.sh MODEL PEER_BIN_DIR
#   MODEL         GGUF file, e.g. /tmp/spool-bench/tinyllama-1.1b-Q4_0.gguf
#   PEER_BIN_DIR  directory holding llama.cpp's llama-server
# environment (defaults):
#   SPOOL_BIN=build/spool  SPOOL_BENCH_DIR=/tmp/spool-bench  THREADS=2  CTX=512 (per sequence)
#   MAX_TOKENS=64  ROUNDS=2  CONCURRENCY="1 2 4 8"  PORT=18300
set -euo pipefail

die() { echo "serve_compare: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 MODEL PEER_BIN_DIR"
MODEL=$(realpath "$1") || die "no such model: $1"
[ -f "$MODEL" ] || die "no such model: $1"
PEER=$(cd "$2" && pwd) || die "no such directory: $2"
LLAMA_SERVER="$PEER/llama-server"
[ -x "$LLAMA_SERVER" ] || die "$LLAMA_SERVER not found or not executable"

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
[ -x "$SPOOL" ] || die "$SPOOL not found: build spool first (cmake --build build)"
command -v node >/dev/null || die "node not found"
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}
THREADS=${THREADS:-2}
CTX=${CTX:-512}
MAX_TOKENS=${MAX_TOKENS:-64}
ROUNDS=${ROUNDS:-2}
CONCURRENCY=${CONCURRENCY:-"1 2 4 8"}
PORT=${PORT:-18300}
mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/serve-XXXXXX")
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load-start.txt" 2>/dev/null || true

. "$REPO/bench/server_lib.sh"  # SERVER_PID, stop_server (also on exit)

wait_ready() {  # /health answers 200 once the model is loaded (llama-server: 503 while loading)
  for _ in $(seq 1 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || die "$1 exited during start-up (log: $RUN/$1-*.log)"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
    sleep 0.2
  done
  die "$1 did not become ready"
}

start_server() {  # name round
  local log="$RUN/$1-$2.log"
  case "$1" in
    spool) "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c "$CTX" --parallel 8 >"$log" 2>&1 & ;;
    llama) "$LLAMA_SERVER" -m "$MODEL" --port "$PORT" -t "$THREADS" -np 8 -c $((8 * CTX)) >"$log" 2>&1 & ;;
  esac
  SERVER_PID=$!
  wait_ready "$1"
}

measure() {  # name round
  start_server "$1" "$2"
  node "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" 1 8 >/dev/null  # warm-up
  for c in $CONCURRENCY; do
    echo "== round $2/$ROUNDS $1 concurrency $c" >&2
    node "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" "$c" "$MAX_TOKENS" | tee -a "$RUN/$1.jsonl" >&2
  done
  stop_server
}

for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then measure spool "$round"; measure llama "$round"
  else measure llama "$round"; measure spool "$round"; fi
done
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load-end.txt" 2>/dev/null || true

python3 - "$RUN" "$CONCURRENCY" <<'PY'
import json, statistics, sys
run, conc = sys.argv[1], [int(c) for c in sys.argv[2].split()]
def med(name, key):
    rows = [json.loads(l) for l in open(f"{run}/{name}.jsonl")]
    return {c: statistics.median(r[key] for r in rows if r["concurrency"] == c) for c in conc}
sd, ld = med("spool", "decode_tok_per_s"), med("llama", "decode_tok_per_s")
se, le = med("spool", "tok_per_s"), med("llama", "tok_per_s")
st, lt = med("spool", "ttft_s"), med("llama", "ttft_s")
print("| concurrency | spool decode tok/s | llama-server decode tok/s | spool / llama-server | spool vs its concurrency 1 "
      "| end-to-end tok/s spool / llama-server | median TTFT s spool / llama-server |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for c in conc:
    print(f"| {c} | {sd[c]:.1f} | {ld[c]:.1f} | {sd[c] / ld[c]:.2f}x | {sd[c] / sd[conc[0]]:.2f}x "
          f"| {se[c]:.1f} / {le[c]:.1f} | {st[c]:.2f} / {lt[c]:.2f} |")
print(f"\nraw results: {run} (load average at start {open(run + '/load-start.txt').read().strip()}, "
      f"end {open(run + '/load-end.txt').read().strip()})")
PY
