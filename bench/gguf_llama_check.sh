#!/usr/bin/env bash
# Checks GGUF files written by `spool convert` with the peer: llama.cpp loads
# each, and its full-sequence logits and greedy ids match the fixture's
# transformers reference (same bound as spool's tests: max |diff| <= 1e-3 max |ref|).
# usage: bench/gguf_llama_check.sh LLAMA_CPP_DIR [BUILD_SUBDIR=build-native] [SPOOL=build/spool] [SHARED=../shared]
set -euo pipefail
peer=${1:?llama.cpp checkout}; sub=${2:-build-native}; spool=${3:-build/spool}; shared=${4:-../shared}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
g++ -O2 -std=c++17 bench/llama_logits.cpp -I"$peer/include" -I"$peer/ggml/include" -L"$peer/$sub/bin" \
  -Wl,-rpath,"$peer/$sub/bin" -lllama -o "$work/llama_logits"
for fx in qwen3next-tiny qwen35moe-tiny kimi-linear-tiny; do
  dir=$shared/fixtures/$fx
  "$spool" convert -m "$dir" -o "$work/$fx.gguf" 2>/dev/null
  ids() { python3 -c "import json,sys;print(','.join(map(str,json.load(open('$dir/reference.json'))['$1'])))"; }
  greedy=$("$work/llama_logits" "$work/$fx.gguf" "$(ids input_ids)" "$work/$fx.f32" "$(ids prompt_ids)" 16 2>/dev/null)
  python3 - "$work/$fx.f32" "$dir/reference.safetensors" "$greedy" "$(ids greedy_ids)" "$fx" <<'PY'
import json, struct, sys
raw, ref, got_ids, want_ids, name = sys.argv[1:]
f = open(ref, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n))
s, e = h['logits']['data_offsets']; f.seek(8 + n + s); want = struct.unpack('<%df' % ((e - s) // 4), f.read(e - s))
b = open(raw, 'rb').read(); got = struct.unpack('<%df' % (len(b) // 4), b)
err = max(abs(x - y) for x, y in zip(got, want)) / max(abs(y) for y in want)
ok = err <= 1e-3 and got_ids == want_ids and len(got) == len(want)
print(f"{name}: llama.cpp relative error {err:.3g}, greedy ids {'identical' if got_ids == want_ids else 'DIFFER: ' + got_ids}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
