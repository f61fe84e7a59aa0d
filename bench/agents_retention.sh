#!/usr/bin/env bash
# Workflow-aware KV retention benchmark (issue 11, third row): N pipelines at once
# (each planner -> 4 parallel executors -> summarizer over its own context, as
# in bench/agents_compare.sh) on one spool serve whose KV pool is too small to
# hold every pipeline's context, run
#   hints: the scheduler keeps cached blocks that waiting requests and the runs' next stages will read,
#          farthest next use evicted first;
#   lru:   --no-kv-hints, plain LRU over cached blocks.
# Alternating rounds. Prints a markdown table of medians: wall time, prompt tokens served from the prefix cache
# (first admissions), token positions the model actually computed, preemptions; raw lines stay in the run dir.
#
# usage: bench/agents_retention.sh MODEL
# environment: SPOOL_BIN=build/spool THREADS=2 PIPELINES=4 KV_POOL=64M PARALLEL=4 MAX_TOKENS=16 WORDS=600
#              ROUNDS=1 PORT=18410 SPOOL_BENCH_DIR=/tmp/spool-bench
set -euo pipefail
die() { echo "agents_retention: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 MODEL"
MODEL=$(realpath "$1"); [ -f "$MODEL" ] || die "no such model: $1"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
THREADS=${THREADS:-2}; PIPELINES=${PIPELINES:-4}; KV_POOL=${KV_POOL:-64M}; PARALLEL=${PARALLEL:-4}
MAX_TOKENS=${MAX_TOKENS:-16}; WORDS=${WORDS:-600}; ROUNDS=${ROUNDS:-1}; PORT=${PORT:-18410}
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}; mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/retention-XXXXXX")

curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && die "port $PORT is already in use; stop that server or set PORT"
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; die "server did not start"; }
SERVER=
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true' EXIT
metric() { awk -v m="$1" '$1 == m { print $2 }' "$2"; }

run_mode() {  # $1 mode (hints | lru)
  local mode=$1 data extra=()
  data=$(mktemp -d "$RUN/data-XXXXXX")
  [ "$mode" = lru ] && extra=(--no-kv-hints)
  "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c 4096 --parallel "$PARALLEL" --max-runs "$PIPELINES" \
    --kv-pool "$KV_POOL" --data-dir "$data" "${extra[@]}" 2>>"$RUN/spool-$mode.log" &
  local pid=$!; SERVER=$pid; wait_up
  local line; line=$(node "$REPO/bench/agents_bench.mjs" "http://127.0.0.1:$PORT" "multi:$PIPELINES" "$MAX_TOKENS" "$WORDS")
  curl -sf "http://127.0.0.1:$PORT/metrics" > "$RUN/metrics-$mode.txt"
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  local m="$RUN/metrics-$mode.txt"
  echo "$line" | python3 -c "import json,sys; r=json.load(sys.stdin); r['mode']='$mode'; r['computed_tokens']=float('$(metric spool_computed_tokens_total "$m")'); r['preemptions']=float('$(metric spool_preemptions_total "$m")'); r['kv_blocks_total']=float('$(metric spool_kv_blocks_total "$m")'); print(json.dumps(r))" | tee -a "$RUN/raw.jsonl"
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run_mode hints; run_mode lru; else run_mode lru; run_mode hints; fi
done

python3 - "$RUN/raw.jsonl" "$MODEL" "$THREADS" "$PIPELINES" "$KV_POOL" "$MAX_TOKENS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda m, k: statistics.median(r[k] for r in rows if r["mode"] == m)
n = sum(r["mode"] == "hints" for r in rows)
blocks = rows[0]["kv_blocks_total"]
print(f"\nModel {sys.argv[2].split('/')[-1]}, {sys.argv[3]} threads, {sys.argv[4]} pipelines at once, KV pool {sys.argv[5]} "
      f"({blocks:.0f} blocks), {sys.argv[6]} tokens per agent, medians of {n} round(s)\n")
print("| eviction | wall s | prompt tokens | served from prefix cache | hit rate | positions computed | preemptions |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, m in (("workflow-aware (hints)", "hints"), ("plain LRU (--no-kv-hints)", "lru")):
    p, c = med(m, "prompt_tokens"), med(m, "cached_tokens")
    print(f"| {name} | {med(m, 'wall_s'):.2f} | {p:.0f} | {c:.0f} | {100 * c / p:.1f} % | {med(m, 'computed_tokens'):.0f} | {med(m, 'preemptions'):.0f} |")
h, l = med("hints", "wall_s"), med("lru", "wall_s")
print(f"\nhints / LRU wall time: {h / l:.2f} ({l / h:.2f}x faster with hints)")
PY
echo "raw results: $RUN" >&2
