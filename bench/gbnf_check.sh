#!/usr/bin/env bash
# Checks spool's GBNF support against llama.cpp's own grammar engine: for every
# grammar in llama.cpp's grammars/ folder, spool samples SAMPLES outputs at
# temperature 1 under the grammar, and llama.cpp (bench/gbnf_accepts.cpp, built
# here against the checkout's libllama) must accept each one: every byte, and
# the whole text as complete when spool stopped before -n (the grammar ended).
# llama.cpp's grammars are not copied into this repository: they are read from
# the checkout given. Usage:
#   bench/gbnf_check.sh LLAMA_CPP_DIR [MODEL] [SAMPLES]
# LLAMA_CPP_DIR must hold a CPU build (build-native/bin or build/bin with
# libllama.so). Exit status 1 when any output is rejected or a grammar refused.
set -euo pipefail
peer=${1:?usage: bench/gbnf_check.sh LLAMA_CPP_DIR [MODEL] [SAMPLES]}
here=$(cd "$(dirname "$0")/.." && pwd)
model=${2:-$here/../shared/models/stories260K.gguf}
samples=${3:-20}
spool=${SPOOL_BIN:-$here/build/spool}
n=${N_PREDICT:-200}
lib=$peer/build-native/bin
[ -f "$lib/libllama.so" ] || lib=$peer/build/bin
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
g++ -O1 -std=c++17 "$here/bench/gbnf_accepts.cpp" -I"$peer/src" -I"$peer/include" -I"$peer/ggml/include" \
  -L"$lib" -Wl,-rpath,"$lib" -lllama -o "$work/gbnf_accepts"
bad=0
printf '| grammar | samples | ended by the grammar | hit -n %s | accepted by llama.cpp |\n|---|---:|---:|---:|---:|\n' "$n"
for g in "$peer"/grammars/*.gbnf; do
  name=$(basename "$g"); ended=0; cut=0; ok=0
  for s in $(seq 1 "$samples"); do
    if ! "$spool" run -m "$model" --grammar "$g" -p "Once upon a time" --temp 1 --seed "$s" -n "$n" -t 2 \
         --stats-json "$work/st.json" > "$work/out.txt" 2> "$work/err.txt"; then
      echo "spool refused $name: $(tail -1 "$work/err.txt")" >&2; bad=1; break
    fi
    gen=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['generated_tokens'])" "$work/st.json")
    flag=""
    if [ "$gen" -lt "$n" ]; then ended=$((ended + 1)); flag=--complete; else cut=$((cut + 1)); fi
    if "$work/gbnf_accepts" "$g" $flag < "$work/out.txt" 2> "$work/why.txt"; then ok=$((ok + 1))
    else echo "$name seed $s: $(cat "$work/why.txt")" >&2; cp "$work/out.txt" "$work/../gbnf-rejected-$name-$s.txt"; bad=1; fi
  done
  printf '| %s | %d | %d | %d | %d |\n' "$name" "$samples" "$ended" "$cut" "$ok"
done
exit $bad
