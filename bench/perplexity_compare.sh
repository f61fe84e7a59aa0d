#!/usr/bin/env bash
# spool perplexity vs llama-perplexity on the same text and context: the real
# stories260K model and synthetic TinyLlama-1.1B-shaped Q4_0/Q8_0/Q4_K_M
# models (made if missing). Writes the table, with the relative difference,
# into docs/BENCHMARKS.md (section "perplexity-vs-llamacpp").
#
# usage: bench/perplexity_compare.sh PEER_BIN_DIR TEXT_FILE
# environment (defaults):
#   SPOOL_BIN=build/spool  SPOOL_BENCH_DIR=/tmp/spool-bench  SPOOL_SHARED_DIR=<repo>/../shared
#   THREADS=2  CTX=128  CHUNKS=4  TYPES="Q4_0 Q8_0 Q4_K_M"  PRESET=tinyllama-1.1b
set -euo pipefail

die() { echo "perplexity_compare: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 PEER_BIN_DIR TEXT_FILE"
PEER=$(cd "$1" && pwd) || die "no such directory: $1"
TEXT=$(realpath "$2") || die "no such file: $2"
[ -f "$TEXT" ] || die "no such file: $2"
LLAMA_PPL="$PEER/llama-perplexity"
[ -x "$LLAMA_PPL" ] || die "$LLAMA_PPL not found or not executable"

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
[ -x "$SPOOL" ] || die "$SPOOL not found: build spool first (cmake --build build)"
SHARED=${SPOOL_SHARED_DIR:-$REPO/../shared}
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}
THREADS=${THREADS:-2}
CTX=${CTX:-128}
CHUNKS=${CHUNKS:-4}
TYPES=${TYPES:-"Q4_0 Q8_0 Q4_K_M"}
PRESET=${PRESET:-tinyllama-1.1b}

case "$(realpath -m "$DIR")/" in
  "$REPO"/*) die "scratch dir $DIR is inside the repository; pick another SPOOL_BENCH_DIR" ;;
esac
mkdir -p "$DIR"
RESULTS=$(mktemp "$DIR/ppl-XXXXXX.txt")

models=("stories260K=$SHARED/models/stories260K.gguf")
for t in $TYPES; do
  m="$DIR/$PRESET-$t.gguf"
  if [ ! -f "$m" ]; then
    echo "== synth $m" >&2
    "$SPOOL" synth --preset "$PRESET" --type "$t" -t "$THREADS" -o "$m"
  fi
  models+=("$PRESET-$t=$m")
done

for entry in "${models[@]}"; do
  label=${entry%%=*}
  m=${entry#*=}
  [ -f "$m" ] || die "missing model $m"
  echo "== $label" >&2
  ours=$("$SPOOL" perplexity -m "$m" -f "$TEXT" -c "$CTX" -t "$THREADS" --chunks "$CHUNKS" 2>/dev/null |
    sed -n 's/^PPL: *//p')
  theirs=$("$LLAMA_PPL" -m "$m" -f "$TEXT" -c "$CTX" -b "$CTX" -t "$THREADS" --chunks "$CHUNKS" 2>&1 |
    sed -n 's/.*Final estimate: PPL = *\([0-9.eE+-]*\).*/\1/p')
  [ -n "$ours" ] || die "spool perplexity gave no result for $m"
  [ -n "$theirs" ] || die "llama-perplexity gave no result for $m"
  echo "$label $ours $theirs" | tee -a "$RESULTS" >&2
done

python3 "$REPO/bench/bench_report.py" ppl --out "$REPO/docs/BENCHMARKS.md" --peer "$1" \
  --results "$RESULTS" --text "$2" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" \
  --spool-cmd "spool perplexity -m MODEL -f $2 -c $CTX -t $THREADS --chunks $CHUNKS" \
  --llama-cmd "llama-perplexity -m MODEL -f $2 -c $CTX -b $CTX -t $THREADS --chunks $CHUNKS"
