#!/usr/bin/env bash
# The serving path's cost at concurrency 1 (issue 10: `spool serve` within
# 10 % of `spool bench`'s decode rate): in each round, alternating the order,
# `spool bench -p 0 -n MAX_TOKENS` and `spool serve` + one streamed greedy
# completion of MAX_TOKENS tokens at a time (bench/serve_load.mjs, REQUESTS of
# them, each on its own) on the same model, threads and cores. The server and
# bench run under `taskset -c CPUS` when CPUS is set; the load generator under
# `taskset -c CLIENT_CPUS` when that is set (on a machine with spare cores, so
# the client does not take the server's), else wherever the OS puts it.
# Prints both rates per round, the medians and their ratio; raw output in the
# run directory.
#
# usage: bench/serve_vs_bench.sh MODEL
# environment (defaults): SPOOL_BIN=build/spool THREADS=2 CPUS= CLIENT_CPUS= MAX_TOKENS=64 ROUNDS=3 REQUESTS=3
#   CTX=512 PORT=18400 SPOOL_BENCH_DIR=/tmp/spool-bench; SPOOL_ISA as for spool
set -euo pipefail

die() { echo "serve_vs_bench: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 MODEL"
MODEL=$(realpath "$1") || die "no such model: $1"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
[ -x "$SPOOL" ] || die "$SPOOL not found: build spool first"
NODE=${NODE:-node}
command -v "$NODE" >/dev/null || die "node not found"
THREADS=${THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-64}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-3}
CTX=${CTX:-512}
PORT=${PORT:-18400}
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}
mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/serve-vs-bench-XXXXXX")
pin=(); [ -n "${CPUS:-}" ] && pin=(taskset -c "$CPUS")
cpin=(); [ -n "${CLIENT_CPUS:-}" ] && cpin=(taskset -c "$CLIENT_CPUS")

. "$REPO/bench/server_lib.sh"  # SERVER_PID, stop_server (also on exit)

bench() {  # round
  "${pin[@]}" "$SPOOL" bench -m "$MODEL" -t "$THREADS" -p 0 -n "$MAX_TOKENS" -r 3 --json >"$RUN/bench-$1.json" \
    2>"$RUN/bench-$1.log"
  python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1])) if x.get("test","").startswith("tg")]; print(r[0]["tok_s_median"])' \
    "$RUN/bench-$1.json" >>"$RUN/bench.txt"
}

serve() {  # round
  "${pin[@]}" "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c "$CTX" --parallel 8 >"$RUN/serve-$1.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || die "spool serve exited during start-up (log: $RUN/serve-$1.log)"
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$PORT/health" 2>/dev/null && break
    sleep 0.2
  done
  "${cpin[@]}" "$NODE" "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" 1 8 >/dev/null  # warm-up
  "${cpin[@]}" "$NODE" "$REPO/bench/serve_load.mjs" "http://127.0.0.1:$PORT" 1 "$MAX_TOKENS" "$REQUESTS" \
    | tee -a "$RUN/serve.jsonl" >&2
  stop_server
}

for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then bench "$round"; serve "$round"; else serve "$round"; bench "$round"; fi
  echo "== round $round: bench $(tail -n 1 "$RUN/bench.txt") tok/s" >&2
done

python3 - "$RUN" <<'PY'
import json, statistics, sys
run = sys.argv[1]
b = [float(l) for l in open(f"{run}/bench.txt")]
s = [json.loads(l)["decode_tok_per_s"] for l in open(f"{run}/serve.jsonl")]
print("| round | spool bench tg tok/s | spool serve c=1 decode tok/s | serve / bench |")
print("|---:|---:|---:|---:|")
for i, (x, y) in enumerate(zip(b, s), 1):
    print(f"| {i} | {x:.2f} | {y:.2f} | {y / x:.3f} |")
mb, ms = statistics.median(b), statistics.median(s)
print(f"| median | {mb:.2f} | {ms:.2f} | {ms / mb:.3f} |")
print(f"\nraw results: {run}")
PY
