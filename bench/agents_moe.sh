#!/usr/bin/env bash
# Agent pipeline on a streamed MoE (issue 11, second row): planner -> 4 executors -> summarizer
# (bench/agents_moe.mjs) on a spool serve under ../shared/tools/devsim (RAM cap with page cache, disk read cap),
# streaming a MoE far larger than the cap; a fresh, cold server per mode:
#   batched     the 4 executors decode in one batch (each routed expert read once per step for all of them)
#   sequential  the same 4 executors one at a time (each alone)
# Prints a markdown table of medians: the executors' aggregate decode tok/s, and the weight store's bytes read,
# units looked up and hit rate per generated token, inside their decode window (sampled from /metrics).
#
# usage: bench/agents_moe.sh MODEL
#   MODEL e.g. `spool synth --arch deepseek2 --preset kimi-k2-scaled --n-expert 384 --target-size 12G --type Q4_K -o F`
# environment: SPOOL_BIN=build/spool DEVSIM=../shared/tools/devsim MEM=4G MEM_BUDGET=3500M (spool's --mem-budget) READ_BW=1G THREADS=2 MAX_TOKENS=16
#              ROUNDS=1 PORT=18420 SPOOL_BENCH_DIR=/tmp/spool-bench SERVE_ARGS="--cache-policy lfu" (more serve flags)
set -euo pipefail
die() { echo "agents_moe: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 MODEL"
MODEL=$(realpath "$1"); [ -f "$MODEL" ] || die "no such model: $1"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=$(realpath "${SPOOL_BIN:-$REPO/build/spool}")
DEVSIM=${DEVSIM:-$REPO/../shared/tools/devsim}
MEM=${MEM:-4G}; MEM_BUDGET=${MEM_BUDGET:-3500M}; READ_BW=${READ_BW:-1G}; THREADS=${THREADS:-2}; MAX_TOKENS=${MAX_TOKENS:-16}; ROUNDS=${ROUNDS:-1}
PORT=${PORT:-18420}
export MEM_BUDGET SERVE_ARGS
trap 'pkill -INT -f "serve -m $MODEL --mem-budget $MEM_BUDGET" 2>/dev/null || true' EXIT
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}; mkdir -p "$DIR"
RUN=$(mktemp -d "$DIR/agents-moe-XXXXXX")

curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && die "port $PORT is already in use; stop that server or set PORT"
wait_up() { for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.5; done; die "server did not start"; }

run_mode() {  # $1 batched | sequential
  local mode=$1 data; data=$(mktemp -d "$RUN/data-XXXXXX")
  "$DEVSIM" --mem "$MEM" --read-bw "$READ_BW" --path "$MODEL" --cold --report "$RUN/devsim-$mode.json" -- \
    "$SPOOL" serve -m "$MODEL" --mem-budget "$MEM_BUDGET" -t "$THREADS" --parallel 4 -c 1024 --port "$PORT" \
    --data-dir "$data" ${SERVE_ARGS:-} 2>>"$RUN/spool-$mode.log" &
  local pid=$!; wait_up
  node "$REPO/bench/agents_moe.mjs" "http://127.0.0.1:$PORT" "$mode" "$MAX_TOKENS" | tee -a "$RUN/raw.jsonl"
  pkill -INT -f "serve -m $MODEL --mem-budget $MEM_BUDGET -t $THREADS --parallel 4 -c 1024 --port $PORT" || true
  wait "$pid" 2>/dev/null || true
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run_mode batched; run_mode sequential; else run_mode sequential; run_mode batched; fi
done

python3 - "$RUN" "$MODEL" "$MEM" "$READ_BW" "$THREADS" "$MAX_TOKENS" <<'PY'
import json, statistics, sys, glob, os
run = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(run, "raw.jsonl")) if l.strip()]
med = lambda m, k: statistics.median(r[k] for r in rows if r["mode"] == m)
peaks = {m: json.load(open(os.path.join(run, f"devsim-{m}.json")))["peak_mem_bytes"] / 2**20 for m in ("batched", "sequential")}
print(f"\nModel {sys.argv[2].split('/')[-1]} ({os.path.getsize(sys.argv[2]) / 1e9:.2f} GB), devsim --mem {sys.argv[3]} "
      f"--read-bw {sys.argv[4]} --cold (spool --mem-budget {os.environ.get('MEM_BUDGET', '3500M')}), {sys.argv[5]} threads, {sys.argv[6]} tokens per executor, "
      f"medians of {sum(r['mode'] == 'batched' for r in rows)} round(s); serve flags: {os.environ.get('SERVE_ARGS') or 'defaults'}\n")
print("| executors | decode tokens | decode s | aggregate tok/s | MB read / token | expert+tensor lookups / token | hit rate | devsim peak MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, m in (("4 in one batch", "batched"), ("4 one at a time (each alone)", "sequential")):
    print(f"| {name} | {med(m, 'decode_tokens'):.0f} | {med(m, 'decode_s'):.2f} | {med(m, 'aggregate_tok_s'):.3f} | "
          f"{med(m, 'bytes_per_token') / 1e6:.1f} | {med(m, 'lookups_per_token'):.1f} | {100 * med(m, 'hit_rate'):.1f} % | {peaks[m]:.0f} |")
b, s = med("batched", "aggregate_tok_s"), med("sequential", "aggregate_tok_s")
print(f"\naggregate decode, batched / alone: {b / s:.2f}x; bytes per token, batched / alone: "
      f"{med('batched', 'bytes_per_token') / med('sequential', 'bytes_per_token'):.2f}")
PY
echo "raw results: $RUN" >&2
