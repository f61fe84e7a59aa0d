#!/usr/bin/env bash
# Builds the libFuzzer binary (clang, ASan + UBSan, -DSPOOL_FUZZ=ON in
# build-fuzz/fuzz/spool_fuzz) and runs its targets: scripts/fuzz.sh [TARGET|all] [SECONDS]
#   TARGET   gguf safetensors hf_config hf_tokenizer jinja openai_request
#            pipeline_spec http_range, or all (default)
#   SECONDS  per target (default 60); targets run one after another unless
#            FUZZ_PARALLEL=1 (all at once, one core each)
# Seeds come from ../shared through fuzz/make_corpus.py (build-fuzz/fuzz/seeds);
# what the fuzzer learns stays in build-fuzz/fuzz/corpus between runs. A crash,
# hang (> 10 s) or sanitizer report is written to build-fuzz/fuzz/findings/TARGET/
# (emptied at the start of each run) and the script exits 1: fix it and copy the
# input to tests/fuzz_regressions/TARGET/.
# FUZZ_NO_BUILD=1 uses the binaries already built. Summary: build-fuzz/fuzz/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-all}
seconds=${2:-60}
B=${FUZZ_BUILD_DIR:-build-fuzz}
SHARED=${SPOOL_FUZZ_SHARED:-$(cd .. && pwd)/shared}
all=(gguf safetensors hf_config hf_tokenizer jinja openai_request pipeline_spec http_range)
if [ "$target" = all ]; then targets=("${all[@]}"); else targets=("$target"); fi
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "error: unknown fuzz target '$t' (one of: ${all[*]}, all)" >&2; exit 2; }
done

if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  command -v clang++-14 >/dev/null || { echo "error: clang++-14 is missing (scripts/install-deps.sh installs it)" >&2; exit 2; }
  launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSPOOL_FUZZ=ON "${launcher[@]}" >/dev/null
  nice -n 10 cmake --build "$B" -j"$(nproc)" --target spool_fuzz
fi

F=$B/fuzz
mkdir -p "$F"
if [ ! -d "$F/seeds" ]; then python3 fuzz/make_corpus.py "$SHARED" "$F/seeds" >/dev/null; fi

dict_for() {
  case $1 in
    jinja) echo fuzz/dict/jinja.dict ;;
    gguf) echo fuzz/dict/gguf.dict ;;
    http_range) echo fuzz/dict/http_range.dict ;;
    pipeline_spec) echo fuzz/dict/yaml.dict ;;
    *) echo fuzz/dict/json.dict ;;
  esac
}

run_one() {
  local t=$1
  rm -rf "$F/findings/$t"  # this run's findings only (copy the ones to keep to tests/fuzz_regressions/)
  mkdir -p "$F/corpus/$t" "$F/findings/$t" "$F/seeds/$t"
  # ASan: no leak check at exit of each input (the tokenizer cache is process-wide); UBSan aborts with a stack.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  SPOOL_FUZZ_TARGET="$t" SPOOL_FUZZ_SHARED="$SHARED" "$F/spool_fuzz" "$F/corpus/$t" "$F/seeds/$t" \
    -dict="$(dict_for "$t")" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$F/findings/$t/" -print_final_stats=1 > "$F/$t.log" 2>&1
}

rc=0
if [ -n "${FUZZ_PARALLEL:-}" ]; then
  pids=()
  for t in "${targets[@]}"; do run_one "$t" & pids+=($!); done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=1; done
else
  for t in "${targets[@]}"; do run_one "$t" || rc=1; done
fi

: > "$F/summary.txt"
for t in "${targets[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$F/$t.log" | grep -o '[0-9]*$' | tail -1 || echo 0)
  last=$(grep -E '^#[0-9]+' "$F/$t.log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  found=$(ls "$F/findings/$t" | wc -l)
  printf '%-15s %6ss  execs %10s  cov %6s  ft %7s  findings %s\n' "$t" "$seconds" "${runs:-0}" "${cov:-?}" "${ft:-?}" "$found" \
    | tee -a "$F/summary.txt"
  if [ "$found" -gt 0 ]; then rc=1; ls "$F/findings/$t" | sed "s|^|  $F/findings/$t/|"; fi
done
exit $rc
