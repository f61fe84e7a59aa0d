#!/usr/bin/env bash
# Regenerates the trained low-bit fixtures of tests/iq_types_test.cpp
# (IqTypes.GreedyIdsEqualLlamaCppOnATrainedModel): stories260K widened to
# 256-wide rows (bench/peer/tile_llama.py, with llama.cpp's gguf-py), an
# importance matrix from tests/data/tinystories-style.txt (llama-imatrix), the
# file quantized by llama-quantize to each type, and llama.cpp's 32 greedy ids
# after the text's first 16 tokens with attention in F32 (F32 KV cache, no flash
# attention: its CPU kernel rounds to F16, and the check is for the weight types).
# Needs a llama.cpp checkout built in LLAMA_DIR/build (llama-imatrix,
# llama-quantize, libllama) and Debian's python3-numpy.
# Usage: bench/peer/make_trained_iq_fixture.sh LLAMA_DIR [TYPES="IQ2_XXS IQ1_S"]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
llama="$(cd "$1" && pwd)"
types=${2:-"IQ2_XXS IQ1_S"}
bin=$llama/build/bin
data=$here/tests/data
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/bench/peer/tile_llama.py" "$llama/gguf-py" "$here/../shared/models/stories260K.gguf" "$tmp/f32.gguf" 4
"$bin/llama-imatrix" -m "$tmp/f32.gguf" -f "$data/tinystories-style.txt" -c 128 -t 2 -o "$tmp/imatrix.gguf" >/dev/null 2>&1
g++ -O2 -std=c++17 "$here/bench/llama_logits.cpp" -I"$llama/include" -I"$llama/ggml/include" -L"$bin" \
  -Wl,-rpath,"$bin" -lllama -o "$tmp/llama_logits"
ids=$("$here/build/spool" tokenize -m "$tmp/f32.gguf" -f "$data/tinystories-style.txt" 2>/dev/null | cut -d, -f1-16)
out=$data/stories260K-x4-greedy.txt
echo "# prompt ids, then per type: TYPE llama.cpp's 32 greedy ids (F32 attention); made by $(basename "$0")" >"$out"
echo "prompt $ids" >>"$out"
for t in $types; do
  "$bin/llama-quantize" --imatrix "$tmp/imatrix.gguf" "$tmp/f32.gguf" "$data/stories260K-x4-$t.gguf" "$t" 2 >/dev/null 2>&1
  g=$(LLAMA_KV_F32=1 "$tmp/llama_logits" "$data/stories260K-x4-$t.gguf" "$ids" "$tmp/logits.f32" "$ids" 32 2>/dev/null)
  echo "$t $g" >>"$out"
done
cat "$out"
