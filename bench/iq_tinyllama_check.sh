#!/usr/bin/env bash
# Issue 26's correctness check on a TinyLlama-shaped file that llama.cpp itself
# quantized: a synthetic TinyLlama-1.1B (spool synth, F32) -> llama-imatrix on a
# text -> llama-quantize --imatrix to each type. For each type, on the same file:
#   logits  max |spool - llama.cpp| over 64 positions x the vocabulary, against
#           llama.cpp's own spread max |llama.cpp(type) - llama.cpp(F32)| and
#           spool's own spread between two instruction sets (SPOOL_ISA=avx2 vs
#           the best one), the rounding noise floor of this model;
#   argmax  positions (of 64) where spool's and llama.cpp's top tokens agree;
#   greedy  32 ids after a 16-token prompt, spool vs llama.cpp (token by token):
#           how many agree before the first difference;
#   ppl     spool perplexity vs llama-perplexity on the text (context 128).
# spool runs with --kv-type "$kv", the cache type llama.cpp uses by default.
# KV=f32: both engines keep attention in F32 instead (spool --kv-type f32;
# llama.cpp an F32 cache and no flash attention, whose CPU kernel rounds Q and
# the softmax to F16): then only the weight types' kernels differ, and the
# greedy check is exact (docs/BENCHMARKS.md).
# A row passes when the logit difference is within llama.cpp's spread and the
# perplexities within 0.5 %. On random weights the logits are nearly flat (top-2
# gaps of hundredths) and 22 random layers amplify rounding (the ISA spread
# shows how much), so greedy ids are reported, not required (docs/BENCHMARKS.md).
# Prints a markdown table row per type. The F32 file, the imatrix and
# the quantized files stay in $SPOOL_BENCH_DIR/iq-tinyllama (about 4.4 GB + 0.3-0.6 GB
# per type) so a rerun skips what exists.
# With F32=FILE the check runs on that F32 GGUF instead of the synthetic
# TinyLlama: bench/peer/tile_llama.py widens the trained stories260K to 256-wide
# rows, a model whose logits are decisive, for the greedy-ids check (scratch dir
# $SPOOL_BENCH_DIR/iq-<name of FILE>).
# usage: bench/iq_tinyllama_check.sh LLAMA_CPP_DIR [BUILD_SUBDIR=build]
# env: TYPES="IQ2_XXS IQ3_XXS IQ4_XS IQ1_S TQ1_0"  THREADS=2  SPOOL=build/spool  TEXT=tests/data/tinystories-style.txt
#      F32=  (an F32 GGUF to quantize instead of the synthetic TinyLlama)  KV=f16|f32
set -euo pipefail
peer=$(cd "${1:?llama.cpp checkout}" && pwd); sub=${2:-build}
bin="$peer/$sub/bin"
here="$(cd "$(dirname "$0")/.." && pwd)"
spool=${SPOOL:-$here/build/spool}
text=${TEXT:-$here/tests/data/tinystories-style.txt}
threads=${THREADS:-2}
kv=${KV:-f16}
llama_kv=(); [ "$kv" = f32 ] && { llama_kv=(-ctk f32 -ctv f32 -fa off); export LLAMA_KV_F32=1; }
types=${TYPES:-"IQ2_XXS IQ3_XXS IQ4_XS IQ1_S TQ1_0"}
dir=${SPOOL_BENCH_DIR:-/tmp/spool-bench}/iq-tinyllama
[ -n "${F32:-}" ] && dir=${SPOOL_BENCH_DIR:-/tmp/spool-bench}/iq-$(basename "$F32" .gguf)
mkdir -p "$dir"
case "$(realpath -m "$dir")/" in "$here"/*) echo "scratch dir inside the repository" >&2; exit 1 ;; esac

g++ -O2 -std=c++17 "$here/bench/llama_logits.cpp" -I"$peer/include" -I"$peer/ggml/include" -L"$bin" \
  -Wl,-rpath,"$bin" -lllama -o "$dir/llama_logits"

[ -n "${F32:-}" ] && [ ! -f "$dir/f32.gguf" ] && cp "$F32" "$dir/f32.gguf"
[ -f "$dir/f32.gguf" ] || "$spool" synth --preset tinyllama-1.1b --type F32 -t "$threads" -o "$dir/f32.gguf" 2>/dev/null
[ -f "$dir/imatrix.gguf" ] || "$bin/llama-imatrix" -m "$dir/f32.gguf" -f "$text" -c 128 -t "$threads" \
  -o "$dir/imatrix.gguf" >"$dir/imatrix.log" 2>&1

# 64 ids of the text for the logits, its first 16 as the greedy prompt.
ids=$("$spool" tokenize -m "$dir/f32.gguf" -f "$text" 2>/dev/null | cut -d, -f1-64)
prompt=$(echo "$ids" | cut -d, -f1-16)
"$dir/llama_logits" "$dir/f32.gguf" "$ids" "$dir/f32.llama.f32" "$prompt" 1 >/dev/null 2>&1

echo "| type | logits: max abs diff spool vs llama.cpp | llama.cpp's spread (type vs F32) | spool's ISA spread (avx2 vs best) | argmax agree (of 64) | greedy ids equal before the first difference (of 32) | spool PPL | llama.cpp PPL | PPL ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in $types; do
  q="$dir/$t.gguf"
  [ -f "$q" ] || "$bin/llama-quantize" --imatrix "$dir/imatrix.gguf" "$dir/f32.gguf" "$q" "$t" "$threads" \
    >"$dir/$t.quantize.log" 2>&1 || { echo "| $t | llama-quantize failed |"; continue; }
  g_llama=$("$dir/llama_logits" "$q" "$ids" "$dir/$t.llama.f32" "$prompt" 32 2>/dev/null)
  "$spool" logits -m "$q" --ids "$ids" --out "$dir/$t.spool.safetensors" -t "$threads" --kv-type "$kv" 2>/dev/null
  SPOOL_ISA=avx2 "$spool" logits -m "$q" --ids "$ids" --out "$dir/$t.spool-avx2.safetensors" -t "$threads" \
    --kv-type "$kv" 2>/dev/null
  g_spool=$("$spool" run -m "$q" --prompt-ids "$prompt" --temp 0 -n 32 --output-ids -t "$threads" --kv-type "$kv" \
    2>/dev/null | tr -d ' \n')
  p_spool=$("$spool" perplexity -m "$q" -f "$text" -c 128 -t "$threads" --kv-type "$kv" 2>/dev/null | tail -1 | awk '{print $2}')
  p_llama=$("$bin/llama-perplexity" -m "$q" -f "$text" -c 128 -t "$threads" "${llama_kv[@]}" 2>&1 | grep -o 'PPL = [0-9.]*' | awk '{print $3}')
  python3 - "$t" "$dir/$t.spool.safetensors" "$dir/$t.spool-avx2.safetensors" "$dir/$t.llama.f32" \
    "$dir/f32.llama.f32" "$g_spool" "$g_llama" "$p_spool" "$p_llama" <<'PY'
import json, struct, sys
from array import array
t, sp, sp2, ll, f32, gs, gl, ps, pl = sys.argv[1:]
def st(path):
    f = open(path, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n))
    s, e = h['logits']['data_offsets']; f.seek(8 + n + s); a = array('f'); a.frombytes(f.read(e - s)); return a
def raw(path):
    a = array('f'); a.frombytes(open(path, 'rb').read()); return a
a, a2, b, c = st(sp), st(sp2), raw(ll), raw(f32)
assert len(a) == len(a2) == len(b) == len(c), (len(a), len(a2), len(b), len(c))
maxdiff = lambda x, y: max(abs(p - q) for p, q in zip(x, y))
err, spread, floor = maxdiff(a, b), maxdiff(b, c), maxdiff(a, a2)
n_pos = 64; V = len(a) // n_pos
argmax = lambda x, p: max(range(V), key=lambda j: x[p * V + j])
agree = sum(argmax(a, p) == argmax(b, p) for p in range(n_pos))
gs, gl = gs.split(','), gl.split(',')
prefix = next((i for i, (x, y) in enumerate(zip(gs, gl)) if x != y), min(len(gs), len(gl)))
ps, pl = float(ps), float(pl)
ok = err <= spread and abs(ps / pl - 1) <= 0.005
print(f"| {t} | {err:.3g} | {spread:.3g} | {floor:.3g} | {agree} | {prefix} | {ps:.2f} | {pl:.2f} | {ps / pl:.5f} |"
      f"{'' if ok else ' FAIL'}")
PY
done
