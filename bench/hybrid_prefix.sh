#!/usr/bin/env bash
# Prefix reuse on a hybrid (linear-attention) model through state snapshots
# (issue 12): 4 requests that share a ~1000-token prefix, all sent at once to
# `spool serve`, with --state-snapshots (the others wait for the first one's
# prefix, then restore the state at the last snapshot before it) and without
# (every prompt computed in full). Alternating rounds, one server per run;
# prints positions computed (spool_computed_tokens_total), cached tokens,
# snapshot hits and wall time, medians and the on/off ratio.
#
# usage: bench/hybrid_prefix.sh MODEL
# environment: SPOOL_BIN=build/spool THREADS=2 WORDS=760 MAX_TOKENS=16 ROUNDS=3 SNAPSHOTS=4 INTERVAL=256 PORT=18460
set -euo pipefail
die() { echo "hybrid_prefix: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 MODEL"
MODEL=$(realpath "$1"); [ -e "$MODEL" ] || die "no such model: $1"
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
THREADS=${THREADS:-2}; WORDS=${WORDS:-760}; MAX_TOKENS=${MAX_TOKENS:-16}; ROUNDS=${ROUNDS:-3}
SNAPSHOTS=${SNAPSHOTS:-4}; INTERVAL=${INTERVAL:-256}; PORT=${PORT:-18460}
RUN=$(mktemp -d /tmp/spool-hybrid-prefix-XXXXXX)
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && die "port $PORT is already in use; set PORT"
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; die "server did not start"; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

run() {  # $1 label, serve args after
  local label=$1; shift
  "$SPOOL" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c 2048 --parallel 4 --data-dir "$RUN/data-$label-$r" "$@" \
    2>>"$RUN/spool.log" &
  local pid=$!; wait_up
  python3 - "http://127.0.0.1:$PORT" "$label" "$WORDS" "$MAX_TOKENS" <<'PY' | tee -a "$RUN/raw.jsonl"
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, label, n_words, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
words = ["plan", "the", "agent", "reads", "file", "and", "writes", "a", "summary", "of", "each", "step", "tool",
         "result", "then", "checks", "output", "for", "errors", "before", "next", "task", "in", "queue"]
x, ctx = 4242, []
for i in range(n_words):
    x = (x * 1103515245 + 12345) % 2147483648
    ctx.append(words[x % len(words)])
prefix = "Shared context of the pipeline: " + " ".join(ctx) + "."
prompts = [f"{prefix}\nYou are the {r}. Answer:" for r in ("planner", "executor", "reviewer", "summarizer")]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=3600))
def metric(name):
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[1])
    return 0.0
ask = lambda p: post("/v1/completions", {"prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
t0 = time.time()
with ThreadPoolExecutor(4) as ex: out = list(ex.map(ask, prompts))
wall = time.time() - t0
print(json.dumps({"label": label, "wall_s": round(wall, 3),
    "prompt_tokens": sum(o["usage"]["prompt_tokens"] for o in out),
    "cached_tokens": sum((o["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0) for o in out),
    "computed": int(metric("spool_computed_tokens_total")), "snapshot_hits": int(metric("spool_state_snapshot_hits_total")),
    "texts": [o["choices"][0]["text"] for o in out]}))
PY
  stop $pid
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run off; run on --state-snapshots "$SNAPSHOTS" --snapshot-interval "$INTERVAL"
  else run on --state-snapshots "$SNAPSHOTS" --snapshot-interval "$INTERVAL"; run off; fi
done

python3 - "$RUN/raw.jsonl" "$MODEL" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {k: [r for r in rows if r["label"] == k] for k in ("off", "on")}
same = all(r["texts"] == by["off"][0]["texts"] for r in rows)
med = lambda k, f: statistics.median(r[f] for r in by[k])
print(f"\nModel {sys.argv[2].split('/')[-1]}, {sys.argv[3]} threads, 4 requests sent at once, medians of {len(by['on'])} rounds;"
      f" outputs identical on/off: {same}\n")
print("| state snapshots | prompt tokens | cached tokens | positions computed | snapshot hits | wall s |")
print("|---|---:|---:|---:|---:|---:|")
for k in ("off", "on"):
    print(f"| {k} | {med(k, 'prompt_tokens'):.0f} | {med(k, 'cached_tokens'):.0f} | {med(k, 'computed'):.0f} | "
          f"{med(k, 'snapshot_hits'):.0f} | {med(k, 'wall_s'):.2f} |")
print(f"\non/off: positions computed {med('on', 'computed') / med('off', 'computed'):.2f}x, "
      f"wall time {med('on', 'wall_s') / med('off', 'wall_s'):.2f}x")
PY
