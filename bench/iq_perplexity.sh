#!/usr/bin/env bash
# spool against llama.cpp on files llama.cpp itself quantized to each low-bit
# type (issue 26): a synthetic llama (spool synth, F32) -> llama-imatrix on a
# text -> llama-quantize to every type and mix -> perplexity of the same text
# with both tools. Prints one line per type: TYPE spool PPL, llama.cpp PPL, ratio.
# Usage: bench/iq_perplexity.sh LLAMA_CPP_BUILD_BIN [PRESET (tiny)] [TEXT]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$(cd "$1" && pwd)"
preset="${2:-tiny}"
text="${3:-$here/tests/data/tinystories-style.txt}"
spool="${SPOOL:-$here/build/spool}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$spool" synth --arch llama --preset "$preset" --type F32 --out "$tmp/f32.gguf" 2>/dev/null
"$bin/llama-imatrix" -m "$tmp/f32.gguf" -f "$text" -c 128 -t 2 -o "$tmp/imatrix.gguf" >/dev/null 2>&1
for t in IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M IQ4_NL IQ4_XS TQ1_0 TQ2_0 Q1_0 Q2_0; do
  if ! "$bin/llama-quantize" --imatrix "$tmp/imatrix.gguf" "$tmp/f32.gguf" "$tmp/$t.gguf" "$t" 2 >/dev/null 2>&1; then
    echo "$t: llama-quantize failed"
    continue
  fi
  a=$("$spool" perplexity -m "$tmp/$t.gguf" -f "$text" -c 128 -t 2 2>/dev/null | tail -1 | awk '{print $2}')
  b=$("$bin/llama-perplexity" -m "$tmp/$t.gguf" -f "$text" -c 128 -t 2 2>&1 | grep -o 'PPL = [0-9.]*' | awk '{print $3}')
  awk -v t="$t" -v a="$a" -v b="$b" 'BEGIN { printf "%-8s spool %.4f  llama.cpp %.4f  ratio %.5f\n", t, a, b, a / b }'
  rm -f "$tmp/$t.gguf"
done
