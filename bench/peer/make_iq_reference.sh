#!/usr/bin/env bash
# Regenerates tests/data/iq_reference.gguf from a llama.cpp tree built with
# cmake in LLAMA_DIR/build (its ggml-base library): bench/peer/iq_reference.cpp
# quantizes seeded random weights with ggml and records ggml's dequantization.
# Usage: bench/peer/make_iq_reference.sh LLAMA_DIR [OUT.gguf]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
llama="$(cd "$1" && pwd)"
out="${2:-$here/../../tests/data/iq_reference.gguf}"
cmake --build "$llama/build" --target ggml-base ggml-cpu >/dev/null
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
lib="$(dirname "$(find "$llama/build" -name 'libggml-base.so*' | head -1)")"
g++ -O1 -std=c++17 "$here/iq_reference.cpp" -I"$llama/ggml/include" -L"$lib" -lggml-base -Wl,-rpath,"$lib" -o "$tmp/iq_reference"
"$tmp/iq_reference" "$out"
