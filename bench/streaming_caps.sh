#!/usr/bin/env bash
# Streaming benchmark: spool (and optionally llama.cpp) decoding a model under
# devsim memory caps, with the disk's bandwidth measured by fio in the same run.
#
#   bench/streaming_caps.sh MODEL.gguf OUTDIR [CAPS="1G 2G 4G 8G"] [POLICIES="lru"] [LLAMA_COMPLETION_BIN] [LLAMA_CAPS="1G 4G"]
#
# Needs root (devsim), fio, build/spool. Per cap and policy: devsim --mem CAP --cold -- spool run
# -n 8 --temp 0 -t 2 -c 256 -b 16 --mem-budget CAP --stats-json; prints one line per run from the
# stats JSON (decode tok/s, TTFT, GB read per decode token, hit rates, speculation accuracy) and
# devsim's report (peak memory of the cgroup, page cache included).
set -euo pipefail
model=$1 out=$2 caps=${3:-"1G 2G 4G 8G"} policies=${4:-lru} llama=${5:-} llama_caps=${6:-"1G 4G"}
here=$(cd "$(dirname "$0")/.." && pwd)
devsim=${DEVSIM:-$here/../shared/tools/devsim}
mkdir -p "$out"
prompt="The quick brown fox jumps over the lazy dog"

fio --name=r --rw=randread --bs=1M --direct=1 --iodepth=16 --ioengine=io_uring --size=4G --runtime=10 \
    --time_based --filename="$model" --readonly --output-format=json > "$out/fio.json"
bw=$(python3 -c "import json,sys; print(json.load(open('$out/fio.json'))['jobs'][0]['read']['bw_bytes'])")
fio --name=s --rw=read --bs=1M --direct=1 --iodepth=16 --ioengine=io_uring --size=8G --runtime=10 \
    --time_based --filename="$model" --readonly --output-format=json > "$out/fio-seq.json"
seq=$(python3 -c "import json,sys; print(json.load(open('$out/fio-seq.json'))['jobs'][0]['read']['bw_bytes'])")
echo "fio O_DIRECT 1M QD16: randread $(python3 -c "print(f'{$bw/1e9:.2f}')") GB/s, sequential $(python3 -c "print(f'{$seq/1e9:.2f}')") GB/s"
# The bound uses the faster of the two: spool reads whole expert slices (8+ MB contiguous) in 1 MiB pieces.
bw=$(python3 -c "print(max($bw, $seq))")

for cap in $caps; do
  for pol in $policies; do
    tag=spool-$cap-$pol
    "$devsim" --mem "$cap" --cold --report "$out/$tag.devsim.json" -- "$here/build/spool" run -m "$model" \
      -p "$prompt" -n 8 --temp 0 -t 2 -c 256 -b 16 --mem-budget "$cap" --cache-policy "$pol" \
      --stats-json "$out/$tag.json" > "$out/$tag.log" 2>&1 || echo "$tag failed (see $out/$tag.log)"
    python3 - "$out/$tag.json" "$out/$tag.devsim.json" "$bw" "$tag" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2])); bw = float(sys.argv[3])
t = s["total"]; dec = [p for p in s["per_token"] if p["phase"] == "decode"]
look = sum(p["lookups"] for p in dec); hits = sum(p["hits"] for p in dec)
ready = sum(p["hits"] + p["prefetched"] for p in dec)
bpt = t["decode_bytes_per_token"]; bound = bw / bpt if bpt else float("inf")
print(f"{sys.argv[4]}: decode {t['decode_tok_s']:.3f} tok/s, TTFT {s['ttft_s']:.2f} s, {bpt/1e9:.2f} GB/token, "
      f"bound {bound:.3f} tok/s ({100*t['decode_tok_s']/bound:.0f}%), hit {100*hits/max(look,1):.0f}%, "
      f"ready {100*ready/max(look,1):.0f}%, spec {100*s['speculative']['accuracy']:.0f}%, "
      f"io wait {sum(p['io_wait_s'] for p in dec):.1f}/{sum(p['wall_s'] for p in dec):.1f} s, "
      f"peak {d['peak_mem_bytes']/2**20:.0f} MiB of {d['mem_cap_bytes']/2**20:.0f}, exit {d['exit_code']}")
PY
  done
done

if [ -n "$llama" ]; then
  for cap in $llama_caps; do
    tag=llama-$cap
    "$devsim" --mem "$cap" --cold --report "$out/$tag.devsim.json" -- "$llama" -m "$model" -p "$prompt" -n 8 \
      --temp 0 -t 2 -nr -c 256 -no-cnv > "$out/$tag.log" 2>&1 || echo "$tag failed (see $out/$tag.log)"
    echo "$tag: $(grep -E 'eval time' "$out/$tag.log" | tr -s ' ' | tail -2 | tr '\n' ' ') peak $(python3 -c "import json; print(json.load(open('$out/$tag.devsim.json'))['peak_mem_bytes']>>20)") MiB"
  done
fi
