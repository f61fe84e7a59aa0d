#!/usr/bin/env bash
# llama.cpp's logits on a GGUF against a reference.safetensors (input_ids,
# logits): prints max |llama.cpp - ref| / max |ref| and the argmax agreement.
# Usage: bench/llama_logits.sh LLAMA_CPP_DIR BUILD_SUBDIR MODEL.gguf REFERENCE.safetensors
#   e.g. bench/llama_logits.sh /work/peer/llama.cpp build-avx2 /tmp/kimi-linear-tiny.f32.gguf \
#        ../shared/fixtures/kimi-linear-tiny/reference.safetensors
set -euo pipefail
peer=$1 build=$2 model=$3 ref=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++17 -I"$peer/include" -I"$peer/ggml/include" "$here/llama_logits.cpp" -o "$tmp/llama_logits" \
  -L"$peer/$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$peer/$build/bin"
ids=$(python3 "$here/reference_tool.py" ids "$ref")
"$tmp/llama_logits" "$model" "$ids" "$tmp/logits.f32" 2>"$tmp/llama.log" || { tail -20 "$tmp/llama.log"; exit 1; }
python3 "$here/reference_tool.py" compare "$ref" "$tmp/logits.f32"
