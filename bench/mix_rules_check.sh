#!/usr/bin/env bash
# spool synth's per-tensor types against llama-quantize's (issue 26): for a
# synthetic model (spool synth, F32) and an imatrix from llama-imatrix, every
# llama.cpp file type is assigned by `llama-quantize --dry-run` and by
# `spool synth --type`, and the two name -> type tables are diffed. Extra
# arguments are passed to both as --tensor-type overrides (PATTERN=TYPE).
# Usage: bench/mix_rules_check.sh LLAMA_CPP_BUILD_BIN [PRESET (tiny)] [LAYERS (16)] [PATTERN=TYPE ...]
# Prints one line per type: TYPE, tensors, differing lines (0 = the same types).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(cd "$1" && pwd)"
preset="${2:-tiny}"
layers="${3:-16}"
shift $(( $# < 3 ? $# : 3 ))
spool="${SPOOL:-$here/build/spool}"
text="$here/tests/data/tinystories-style.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
peer_tt=() ; ours_tt=()
for o in "$@"; do peer_tt+=(--tensor-type "$o"); ours_tt+=(--tensor-type "$o"); done
"$spool" synth --preset "$preset" --layers "$layers" --type F32 --out "$tmp/f32.gguf" 2>/dev/null
"$bin/llama-imatrix" -m "$tmp/f32.gguf" -f "$text" -c 128 --chunks 4 -t 2 -o "$tmp/imatrix.gguf" >/dev/null 2>&1
types="IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M IQ4_NL IQ4_XS TQ1_0 TQ2_0 Q1_0 Q2_0"
[[ "$preset" == deepseek* ]] || types="$types Q4_K_M"  # deepseek2: spool keeps Q4_K experts (not llama.cpp's mix)
for t in $types; do
  "$bin/llama-quantize" "${peer_tt[@]}" --dry-run --imatrix "$tmp/imatrix.gguf" "$tmp/f32.gguf" "$tmp/o.gguf" "$t" 2>&1 |
    sed -nE 's/^\[ *[0-9]+\/ *[0-9]+\] +([^ ]+) .*\(([A-Za-z0-9_]+)\)$/\1 \2/p; s/^\[ *[0-9]+\/ *[0-9]+\] +([^ ]+) .*MiB$/\1 f32/p' |
    tr a-z A-Z | sort > "$tmp/peer"
  if [ ! -s "$tmp/peer" ]; then echo "$t: llama-quantize refused the file"; continue; fi
  "$spool" synth --preset "$preset" --layers "$layers" --type "$t" "${ours_tt[@]}" --out "$tmp/s.gguf" >/dev/null 2>&1
  "$spool" inspect "$tmp/s.gguf" --tensors |
    awk 'f && NF >= 4 { n = $1; sub(/#.*/, "", n); print n, $2 } /^name /{ f = 1 }' | tr a-z A-Z | sort -u > "$tmp/ours"
  echo "$t: $(wc -l < "$tmp/peer") tensors, $(diff "$tmp/peer" "$tmp/ours" | grep -c '^[<>]' || true) differing lines"
done
