#!/usr/bin/env bash
# spool bench vs llama-bench, side by side in one run (GUIDE.md section 5):
# makes synthetic TinyLlama-1.1B-shaped models if missing, runs both tools
# alternately for several rounds, and writes medians and ratios into
# docs/BENCHMARKS.md (section "speed-vs-llamacpp").
#
# usage: bench/compare_llamacpp.sh PEER_BIN_DIR
#   PEER_BIN_DIR       directory holding llama.cpp's llama-bench
# environment (defaults):
#   SPOOL_BIN=build/spool  SPOOL_BENCH_DIR=/tmp/spool-bench  THREADS=2  N_PROMPT=128  N_GEN=64
#   ROUNDS=3  REPS=3  TYPES="Q4_0 Q8_0 Q4_K_M"  PRESET=tinyllama-1.1b
#   SECTION=speed-vs-llamacpp   (the marked section of docs/BENCHMARKS.md to rewrite;
#                                one per ISA, e.g. speed-avx2 with SPOOL_ISA=avx2)
#   PEER_LABEL="..."            (how the peer was built, written beside the table)
# The memory read bandwidth (build/spool_membw, same thread count) is measured
# before and after the rounds; decode rows get each tool's share of it.
set -euo pipefail

die() { echo "compare_llamacpp: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 PEER_BIN_DIR"
PEER=$(cd "$1" && pwd) || die "no such directory: $1"
LLAMA_BENCH="$PEER/llama-bench"
[ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH not found or not executable"

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${SPOOL_BIN:-$REPO/build/spool}
[ -x "$SPOOL" ] || die "$SPOOL not found: build spool first (cmake --build build)"
DIR=${SPOOL_BENCH_DIR:-/tmp/spool-bench}
THREADS=${THREADS:-2}
N_PROMPT=${N_PROMPT:-128}
N_GEN=${N_GEN:-64}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
TYPES=${TYPES:-"Q4_0 Q8_0 Q4_K_M"}
PRESET=${PRESET:-tinyllama-1.1b}

case "$(realpath -m "$DIR")/" in
  "$REPO"/*) die "scratch dir $DIR is inside the repository; pick another SPOOL_BENCH_DIR" ;;
esac
mkdir -p "$DIR"
RUN="$DIR/speed-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
cut -d' ' -f1-3 /proc/loadavg >"$RUN/load-start.txt" 2>/dev/null || true
MEMBW_START=${MEMBW_BIN:-$REPO/build/spool_membw}
[ -x "$MEMBW_START" ] && "$MEMBW_START" --threads "$THREADS" --json >"$RUN/membw-start.json"

model_path() { echo "$DIR/$PRESET-$1.gguf"; }

for t in $TYPES; do
  m=$(model_path "$t")
  if [ ! -f "$m" ]; then
    echo "== synth $m" >&2
    "$SPOOL" synth --preset "$PRESET" --type "$t" -t "$THREADS" -o "$m"
  fi
done

run_spool() {
  "$SPOOL" bench -m "$1" -t "$THREADS" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" --json >"$2"
}
run_llama() {
  "$LLAMA_BENCH" -m "$1" -t "$THREADS" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" -o json >"$2" 2>"$2.log"
}

for round in $(seq 1 "$ROUNDS"); do
  for t in $TYPES; do
    m=$(model_path "$t")
    echo "== round $round/$ROUNDS $t" >&2
    # A B in odd rounds, B A in even rounds, so neither tool always runs first.
    if [ $((round % 2)) -eq 1 ]; then
      run_spool "$m" "$RUN/spool-$t-$round.json"
      run_llama "$m" "$RUN/llama-$t-$round.json"
    else
      run_llama "$m" "$RUN/llama-$t-$round.json"
      run_spool "$m" "$RUN/spool-$t-$round.json"
    fi
  done
done

MEMBW=${MEMBW_BIN:-$REPO/build/spool_membw}
[ -x "$MEMBW" ] && "$MEMBW" --threads "$THREADS" --json >"$RUN/membw-end.json"

python3 "$REPO/bench/bench_report.py" speed --section "${SECTION:-speed-vs-llamacpp}" \
  --peer-label "${PEER_LABEL:-}" --spool-isa-env "${SPOOL_ISA:-}" --out "$REPO/docs/BENCHMARKS.md" --peer "$1" \
  --run-dir "$RUN" --types "$TYPES" --preset "$PRESET" --model-label "$PRESET" \
  --threads "$THREADS" --rounds "$ROUNDS" --reps "$REPS" \
  --spool-cmd "spool bench -m MODEL -t $THREADS -p $N_PROMPT -n $N_GEN -r $REPS --json" \
  --llama-cmd "llama-bench -m MODEL -t $THREADS -p $N_PROMPT -n $N_GEN -r $REPS -o json"
