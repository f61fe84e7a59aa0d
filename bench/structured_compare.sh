#!/usr/bin/env bash
# Constrained decoding speed, spool serve vs llama.cpp's llama-server, in one
# run (GUIDE.md section 5): decode tok/s without a schema, with a nested
# object schema of 10 fields, and with an array of 12 picks from a 100-word
# enum, at concurrency 1 and 8, each server in turn (order alternating per
# round). bench/serve_load.mjs fires the streamed /v1/completions requests
# (greedy; the schema goes in llama-server's `json_schema` field, which spool
# also accepts); decode tok/s = sum over requests of (tokens - 1) / (last
# token time - first token time). Prints a markdown table of medians.
#
# usage: bench/structured_compare.sh MODEL LLAMA_SERVER
#   MODEL         GGUF file, e.g. /tmp/spool-bench/tinyllama-1.1b-Q4_0.gguf
#   LLAMA_SERVER  llama.cpp's llama-server binary
# environment (defaults): SPOOL_BIN=build/spool  SPOOL_BENCH_DIR=/tmp/spool-bench  THREADS=2
#   CTX=512 (per sequence)  MAX_TOKENS=96 (free text, ignore_eos)  SCHEMA_MAX_TOKENS=400 (enough for a
#   constrained answer to finish: llama-server answers a cut-off one with a 500)  ROUNDS=2  CONCURRENCY="1 8"  PORT=18400
#   SPOOL_ISA (passed through: set avx2 to compare with an AVX2-only llama.cpp build)
#   CPUS (e.g. 4-7: both servers run under taskset -c CPUS, the load generator outside them)
#   NODE=node (the node binary that runs bench/serve_load.mjs)
set -euo pipefail
export SERVE_LOAD_TOLERATE_ERRORS=1

die() { echo "structured_compare: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 MODEL LLAMA_SERVER"
MODEL=$(realpath "$1") || die "no such model: $1"
[ -f "$MODEL" ] || die "no such model: $1"
LLAMA_SERVER=$2
[ -x "$LLAMA_SERVER" ] || die "$LLAMA_SERVER not found or not executable"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
[ -x "$SPOOL" ] || die "$SPOOL not found: build spool first"
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}
THREADS=${THREADS:-2}
CTX=${CTX:-512}
MAX_TOKENS=${MAX_TOKENS:-96}
SCHEMA_MAX_TOKENS=${SCHEMA_MAX_TOKENS:-400}
ROUNDS=${ROUNDS:-2}
CONCURRENCY=${CONCURRENCY:-"1 8"}
PORT=${PORT:-18400}
NODE=${NODE:-node}
PIN=()
[ -n "${CPUS:-}" ] && PIN=(taskset -c "$CPUS")
mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/structured-XXXXXX")
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load-start.txt" 2>/dev/null || true

# The schemas (bench/schemas; strings are bounded so a random-weight model ends them).
echo '{}' >"$RUN/free.json"
python3 -c 'import json, sys; print(json.dumps({"json_schema": json.load(open(sys.argv[1]))}))' \
  "$REPO/bench/schemas/nested10.json" >"$RUN/nested.json"
python3 -c 'import json, sys; print(json.dumps({"json_schema": json.load(open(sys.argv[1]))}))' \
  "$REPO/bench/schemas/enum100.json" >"$RUN/enum.json"

. "$REPO/bench/server_lib.sh"  # SERVER_PID, stop_server (also on exit)

wait_ready() {
  for _ in $(seq 1 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || die "$1 exited during start-up (log: $RUN/$1-*.log)"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
    sleep 0.2
  done
  die "$1 did not become ready"
}

measure() {  # name round
  local log="$RUN/$1-$2.log"
  case "$1" in
    spool) "${PIN[@]}" "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c "$CTX" --parallel 8 >"$log" 2>&1 & ;;
    llama) "${PIN[@]}" "$LLAMA_SERVER" -m "$MODEL" --port "$PORT" -t "$THREADS" -np 8 -c $((8 * CTX)) >"$log" 2>&1 & ;;
  esac
  SERVER_PID=$!
  wait_ready "$1"
  "$NODE" "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" 1 8 >/dev/null  # warm-up
  for mode in free nested enum; do
    local n=$MAX_TOKENS
    if [ "$mode" != free ]; then
      n=$SCHEMA_MAX_TOKENS
      # Warm the grammar (compile + first masks) as a server would be after its first request.
      SERVE_LOAD_EXTRA=$(cat "$RUN/$mode.json") "$NODE" "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" 1 "$n" >/dev/null
    fi
    for c in $CONCURRENCY; do
      echo "== round $2/$ROUNDS $1 $mode concurrency $c" >&2
      SERVE_LOAD_EXTRA=$(cat "$RUN/$mode.json") "$NODE" "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" "$c" "$n" |
        sed "s/^{/{\"mode\":\"$mode\",/" | tee -a "$RUN/$1.jsonl" >&2
    done
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
def med(name, mode, c, key="decode_tok_per_s"):
    rows = [json.loads(l) for l in open(f"{run}/{name}.jsonl")]
    return statistics.median(r[key] for r in rows if r["mode"] == mode and r["concurrency"] == c)
print("| concurrency | schema | spool decode tok/s | spool vs its free text | llama-server decode tok/s "
      "| llama-server vs its free text | spool / llama-server | tokens per request (spool / llama-server) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for c in conc:
    for mode in ["free", "nested", "enum"]:
        s, l = med("spool", mode, c), med("llama", mode, c)
        sf, lf = med("spool", "free", c), med("llama", "free", c)
        st, lt = med("spool", mode, c, "tokens") / c, med("llama", mode, c, "tokens") / c
        print(f"| {c} | {mode} | {s:.1f} | {s / sf:.2f}x | {l:.1f} | {l / lf:.2f}x | {s / l:.2f}x | {st:.0f} / {lt:.0f} |")
print(f"\nraw results: {run} (load average at start {open(run + '/load-start.txt').read().strip()}, "
      f"end {open(run + '/load-end.txt').read().strip()})")
PY
