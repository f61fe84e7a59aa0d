#!/usr/bin/env bash
# Follow-up turn TTFT with the KV disk tier (issue 27): a conversation of
# N_CONV tokens (random token ids) is sent to `spool serve`, the server is
# killed (-9) and started again on the same data dir, and the next turn
# (the conversation + N_NEXT new tokens, max_tokens 1) is timed:
#   disk       its prefix read back from the disk tier (page cache dropped
#              first when /proc/sys/vm/drop_caches is writable, so the blocks
#              come from the disk)
#   recompute  the same request to a fresh server with --no-kv-disk (page cache
#              dropped before it starts as well, so both pay cold weights)
#   memory     the same request again on the server that still holds it (the
#              in-memory prefix cache), for scale
# Each time is curl's total for a non-streamed request of one output token:
# prefill (or load) plus one decode step, i.e. the time to the first token.
# Prints a markdown table and the disk tier's bytes per token.
#
# Usage: bench/kv_disk_ttft.sh MODEL
#   SPOOL_BIN=build/spool THREADS=2 N_CONV=8000 N_NEXT=32 PORT=8093 REPS=2
#   WRAP="" (a command prefix for the servers, e.g. "../shared/tools/devsim --mem 4G --read-bw 1G --")
#   EXTRA_ARGS="" (more `spool serve` flags)
#   MAX_ID=30000 (token ids are drawn from [100, MAX_ID); keep it below the model's vocabulary)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/server_lib.sh"
MODEL=${1:?usage: bench/kv_disk_ttft.sh MODEL}
SPOOL_BIN=${SPOOL_BIN:-build/spool}
THREADS=${THREADS:-2}
N_CONV=${N_CONV:-8000}
N_NEXT=${N_NEXT:-32}
PORT=${PORT:-8093}
REPS=${REPS:-2}
WRAP=${WRAP:-}
EXTRA_ARGS=${EXTRA_ARGS:-}
MAX_ID=${MAX_ID:-30000}
CTX=$(( (N_CONV + N_NEXT + 64 + 255) / 256 * 256 ))
die() { echo "kv_disk_ttft: $*" >&2; exit 1; }
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && die "port $PORT is already in use; set PORT"
WORK=$(mktemp -d /tmp/spool-kvdisk-bench-XXXXXX)
trap 'stop_group; rm -rf "$WORK"' EXIT

python3 - "$N_CONV" "$N_NEXT" "$WORK" "$MAX_ID" <<'PY'
import json, random, sys
n, k, work, top = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lo = min(100, top // 4)
rng = random.Random(27)
conv = [rng.randrange(lo, top) for _ in range(n)]
nxt = conv + [rng.randrange(lo, top) for _ in range(k)]
for name, ids in (("turn1", conv), ("turn2", nxt)):
    json.dump({"prompt": ids, "max_tokens": 1, "temperature": 0}, open(f"{work}/{name}.json", "w"))
PY

start() {  # start DATA_DIR [flags...]
  local dir=$1; shift
  # Its own process group (setsid), so that kill -9 reaches spool under a WRAP command too.
  # shellcheck disable=SC2086
  setsid $WRAP "$SPOOL_BIN" serve -m "$MODEL" -t "$THREADS" -c "$CTX" --parallel 1 --port "$PORT" --data-dir "$dir" \
    $EXTRA_ARGS "$@" 2>"$WORK/server.log" &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; die "server exited"; }
    sleep 0.25
  done
  die "server did not start"
}
post() {  # post FILE -> prints "seconds cached_tokens prompt_tokens"
  curl -sf -o "$WORK/out.json" -w '%{time_total}' -H 'Content-Type: application/json' \
    --data-binary "@$1" "http://127.0.0.1:$PORT/v1/completions" >"$WORK/t"
  python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["usage"]; print(open(sys.argv[2]).read().strip(), (u.get("prompt_tokens_details") or {}).get("cached_tokens",0), u["prompt_tokens"])' "$WORK/out.json" "$WORK/t"
}
metric() { curl -sf "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1==n {print $2}'; }
gone() {  # waits until no process of the group is left (a killed spool may take a moment to exit and unlock)
  for _ in $(seq 1 300); do pgrep -g "$1" >/dev/null || return 0; sleep 0.1; done
}
kill9() { kill -9 -- "-$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; gone "$SERVER_PID"; SERVER_PID=""; }
stop_group() {  # SIGTERM to the group, then wait for the port to be free
  [ -n "$SERVER_PID" ] || return 0
  kill -- "-$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  gone "$SERVER_PID"
  SERVER_PID=""
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 || return 0; sleep 0.1; done
}
drop_caches() { sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 >/proc/sys/vm/drop_caches; echo dropped; else echo kept; fi; }

declare -a T_DISK T_RE T_MEM T_LOAD
for rep in $(seq 1 "$REPS"); do
  d="$WORK/data-$rep"; mkdir -p "$d"
  start "$d"
  read -r t1 _ p1 < <(post "$WORK/turn1.json")
  for _ in $(seq 1 600); do [ "$(metric spool_kv_disk_pending_writes)" = "0" ] && break; sleep 0.1; done
  written=$(metric spool_kv_disk_written_bytes_total)
  kill9
  caches=$(drop_caches)
  start "$d"
  read -r td cd pd < <(post "$WORK/turn2.json")
  loaded=$(metric spool_kv_disk_loaded_bytes_total)
  load_s=$(metric spool_kv_disk_load_seconds_total)
  read -r tm cm _ < <(post "$WORK/turn2.json")
  stop_group
  r="$WORK/re-$rep"; mkdir -p "$r"
  drop_caches >/dev/null  # as cold as the disk case: the weights come from disk after a restart too
  start "$r" --no-kv-disk
  read -r tr cr _ < <(post "$WORK/turn2.json")
  stop_group
  echo "rep $rep: turn1 ${t1}s ($p1 tokens, ${written} bytes written); after kill -9 (page cache $caches):" \
       "disk ${td}s (cached $cd of $pd, ${loaded} bytes loaded in ${load_s}s), memory ${tm}s (cached $cm), recompute ${tr}s (cached $cr)" >&2
  T_DISK+=("$td"); T_RE+=("$tr"); T_MEM+=("$tm"); T_LOAD+=("$load_s")
  BYTES_PER_TOKEN=$(python3 -c "print(round($written / max(1, ($p1 // 16) * 16)))")
done

python3 - "${T_DISK[*]}" "${T_RE[*]}" "${T_MEM[*]}" "${T_LOAD[*]}" "$BYTES_PER_TOKEN" "$N_CONV" "$N_NEXT" "$MODEL" "$THREADS" <<'PY'
import statistics, sys
disk, re_, mem, load = ([float(x) for x in a.split()] for a in sys.argv[1:5])
bpt, n, k, model, threads = sys.argv[5:10]
md = statistics.median
print(f"| follow-up of a {n}-token conversation (+{k} tokens), {model}, {threads} threads | TTFT s (median of {len(disk)}) |")
print("|---|---|")
print(f"| recompute (fresh server, --no-kv-disk) | {md(re_):.3f} |")
print(f"| disk tier after kill -9 | {md(disk):.3f} (of which reading the KV blocks: {md(load):.3f}) |")
print(f"| in-memory prefix cache (same server) | {md(mem):.3f} |")
print(f"\nrecompute / disk = {md(re_) / md(disk):.1f}x; disk tier stores {bpt} bytes per token")
PY
