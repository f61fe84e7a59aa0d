#!/usr/bin/env bash
# Device side of fuzz/device_bundle.sh: runs every target for SECONDS with
# JOBS processes each (sharing one corpus folder), then writes per-target logs,
# a summary, the grown corpora (corpus.tgz) and any findings into OUT.
# usage: run.sh SECONDS OUT [JOBS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=$1 out=$2 jobs=${3:-2}
W=/tmp/spool-fuzz
mkdir -p "$W" "$out"
rm -rf "$W/corpus" && cp -r "$here/corpus" "$W/corpus" 2>/dev/null || mkdir -p "$W/corpus"
targets=(gguf safetensors hf_config hf_tokenizer jinja openai_request pipeline_spec http_range)
dict_for() { case $1 in jinja|gguf|http_range) echo "$here/dict/$1.dict" ;; *) echo "$here/dict/json.dict" ;; esac; }
nproc > "$out/nproc.txt"
for t in "${targets[@]}"; do
  mkdir -p "$W/corpus/$t" "$W/findings/$t"
  for j in $(seq 1 "$jobs"); do
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    SPOOL_FUZZ_TARGET="$t" SPOOL_FUZZ_SHARED="$here/shared" \
    "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/bin/spool_fuzz" \
      "$W/corpus/$t" "$here/seeds/$t" -dict="$(dict_for "$t")" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=4096 -artifact_prefix="$W/findings/$t/" -print_final_stats=1 -seed=$((RANDOM * 7 + j)) \
      > "$W/$t.$j.log" 2>&1 &
  done
done
wait
{
  for t in "${targets[@]}"; do
    runs=0
    for j in $(seq 1 "$jobs"); do
      r=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$W/$t.$j.log" | tail -1 | grep -o '[0-9]*$')
      runs=$((runs + ${r:-0}))
    done
    cov=$(grep -hoE 'cov: [0-9]+' "$W/$t".*.log | grep -oE '[0-9]+' | sort -n | tail -1)
    ft=$(grep -hoE 'ft: [0-9]+' "$W/$t".*.log | grep -oE '[0-9]+' | sort -n | tail -1)
    echo "$t seconds=$seconds jobs=$jobs execs=$runs cov=$cov ft=$ft corpus=$(ls "$W/corpus/$t" | wc -l) findings=$(ls "$W/findings/$t" | wc -l)"
  done
} > "$out/summary.txt"
cat "$out/summary.txt"
# The grown corpora without their largest inputs (what comes back is size-limited).
(cd "$W" && find corpus -type f -size -32k -print0 | tar -czf "$out/corpus.tgz" --null -T -)
tar -czf "$out/findings.tgz" -C "$W" findings
tar -czf "$out/logs.tgz" -C "$W" $(cd "$W" && ls *.log)
