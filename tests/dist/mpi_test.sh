#!/usr/bin/env bash
# --dist ep under mpirun (ctest dist_mpi, label dist): on the MoE fixtures
# (DeepSeek-V3 / MLA in F32 and Q8_0, Kimi K3 with its hybrid KDA layers,
# Mixtral), 1, 2, 3 and 4 ranks give exactly one process's greedy text and
# logits (byte-identical files); the home rank reports work sent to the other
# ranks; spool serve answers as one process; a rank that cannot load the model
# ends the job with a message naming the rank.
# usage: tests/dist/mpi_test.sh SPOOL_BIN MPIRUN SHARED_DIR
set -euo pipefail
spool=$1 mpirun=$2 shared=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "dist_mpi: $*" >&2; exit 1; }
prompt=1,5,9,13,2,7,11,3,17,4,8,21
for m in deepseek3-tiny.f32.gguf deepseek3-tiny.q8_0.gguf kimi-k3-tiny.f32.gguf mixtral-tiny.q8_0.gguf; do
  f=$shared/fixtures/gguf/$m
  "$spool" run -m "$f" --prompt-ids "$prompt" -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>"$tmp/one.err" || { cat "$tmp/one.err"; fail "$m: one process failed"; }
  "$spool" logits -m "$f" --ids "$prompt" --out "$tmp/one.safetensors" -t 1 2>/dev/null
  for n in 1 2 3 4; do
    "$mpirun" --oversubscribe -np "$n" "$spool" run -m "$f" --prompt-ids "$prompt" -n 24 --temp 0 -t 1 --dist ep \
      >"$tmp/run.txt" 2>"$tmp/run.err" || { cat "$tmp/run.err"; fail "$m: $n ranks: run failed"; }
    cmp -s "$tmp/one.txt" "$tmp/run.txt" || fail "$m: $n ranks: greedy text differs from one process"
    grep -q "dist ep: $n ranks" "$tmp/run.err" || { cat "$tmp/run.err"; fail "$m: $n ranks: no traffic line"; }
    if [ "$n" -gt 1 ] && grep -q "dist ep: $n ranks, 0 work messages" "$tmp/run.err"; then
      fail "$m: $n ranks: no expert ran on another rank"
    fi
    "$mpirun" --oversubscribe -np "$n" "$spool" logits -m "$f" --ids "$prompt" --out "$tmp/dist.safetensors" -t 1 \
      --dist ep 2>"$tmp/logits.err" || { cat "$tmp/logits.err"; fail "$m: $n ranks: logits failed"; }
    cmp -s "$tmp/one.safetensors" "$tmp/dist.safetensors" || fail "$m: $n ranks: logits differ from one process"
    echo "dist_mpi: $m: $n ranks: greedy text and logits identical"
  done
done
# Streamed: each rank reads its experts through its own budgeted store.
f=$shared/fixtures/gguf/deepseek3-tiny.f32.gguf
"$spool" run -m "$f" --prompt-ids "$prompt" -n 24 --temp 0 -t 1 --mem-budget 60M -c 256 >"$tmp/one.txt" 2>/dev/null
"$mpirun" --oversubscribe -np 3 "$spool" run -m "$f" --prompt-ids "$prompt" -n 24 --temp 0 -t 1 --mem-budget 60M -c 256 \
  --dist ep >"$tmp/run.txt" 2>"$tmp/run.err" || { cat "$tmp/run.err"; fail "streamed, 3 ranks: run failed"; }
cmp -s "$tmp/one.txt" "$tmp/run.txt" || fail "streamed, 3 ranks: greedy text differs from one process"
grep -q "dist ep: rank 2 ([^)]*): .* MB read, [0-9]* % of units in memory" "$tmp/run.err" || { cat "$tmp/run.err"; fail "streamed: no per-rank statistics"; }
echo "dist_mpi: streamed under --mem-budget, 3 ranks: identical, per-rank statistics printed: ok"
# spool serve under mpirun: rank 0 serves HTTP, the others only compute experts;
# a completion at temperature 0 is the one a server without --dist gives.
f=$shared/fixtures/gguf/deepseek3-tiny.q8_0.gguf
complete() {  # LOG -> the completion's text, as JSON, from the server whose start-up line LOG holds
  local log=$1 port=""
  for _ in $(seq 1 300); do
    port=$(grep -ao "serving '[^']*' on http://127.0.0.1:[0-9]*" "$log" 2>/dev/null | grep -o '[0-9]*$' | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  [ -n "$port" ] || return 1
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello there", "max_tokens": 12, "temperature": 0}' |
    python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))'
}
# --port 0: the OS picks a free port (the start-up line names it), so parallel tests cannot collide.
"$spool" serve -m "$f" --port 0 -t 1 --data-dir "$tmp/data1" >"$tmp/serve1.log" 2>&1 &
pid=$!
want=$(complete "$tmp/serve1.log") || true
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
"$mpirun" --oversubscribe -np 3 "$spool" serve -m "$f" --port 0 -t 1 --dist ep --data-dir "$tmp/data3" \
  >"$tmp/serve3.log" 2>&1 &
pid=$!
got=$(complete "$tmp/serve3.log") || true
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[ -n "$got" ] && [ "$got" = "$want" ] || { cat "$tmp/serve3.log"; fail "serve --dist ep: $got, one process: $want"; }
echo "dist_mpi: serve with 3 ranks answers as one process: ok"
# Rank 1 is given a file that does not exist: the job ends, naming it.
f=$shared/fixtures/gguf/deepseek3-tiny.q8_0.gguf
if "$mpirun" --oversubscribe -np 1 "$spool" run -m "$f" --prompt-ids 1,2 -n 2 -t 1 --dist ep : \
     -np 1 "$spool" run -m "$tmp/missing.gguf" --prompt-ids 1,2 -n 2 -t 1 --dist ep >/dev/null 2>"$tmp/bad.err"; then
  fail "a rank without its model file: the job succeeded"
fi
grep -q "rank 1 (.*) could not load the model: .*missing.gguf" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "no message naming rank 1"; }
echo "dist_mpi: a rank that cannot load the model is named: ok"
