#!/usr/bin/env bash
# Streaming benchmark: spool and llama.cpp side by side, decoding one model
# under devsim memory caps (and optionally a disk read-bandwidth cap), with
# the disk's bandwidth measured by fio under the same devsim caps in the same
# run (GUIDE.md section 5: the bound is bytes read per token / disk bandwidth).
#
#   bench/streaming_caps.sh MODEL.gguf OUTDIR
#
# environment (defaults):
#   CAPS="1G 2G 4G 8G"   devsim --mem caps, each also spool's --mem-budget
#   POLICY=lfu           spool --cache-policy
#   READ_BW=             devsim --read-bw (e.g. 1G: a USB SSD); empty = the raw disk
#   LLAMA=               llama.cpp's llama-completion binary; empty = spool only
#   LLAMA_CAPS=$CAPS     caps at which llama.cpp runs (it is slow when small)
#   N_GEN=8              tokens decoded per run
#   SPOOL_ARGS=          extra spool run arguments (e.g. "-b 16")
#   DEVSIM=../shared/tools/devsim
# Per cap: devsim --mem CAP [--read-bw BW --path MODEL] --cold, spool then
# llama.cpp (mmap, -nr), 2 threads, -c 256, greedy, the same prompt. Prints one
# line per run and writes OUTDIR/table.md (markdown rows for docs/BENCHMARKS.md).
# Needs root (devsim), fio and python3, and build/spool.
set -euo pipefail
die() { echo "streaming_caps: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 MODEL.gguf OUTDIR"
model=$(realpath "$1") || die "no such model: $1"
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
devsim=${DEVSIM:-$here/../shared/tools/devsim}
caps=${CAPS:-"1G 2G 4G 8G"}
policy=${POLICY:-lfu}
read_bw=${READ_BW:-}
llama=${LLAMA:-}
llama_caps=${LLAMA_CAPS:-$caps}
n_gen=${N_GEN:-8}
spool_args=${SPOOL_ARGS:-}
[ -x "$here/build/spool" ] || die "build/spool not found: build spool first"
command -v fio >/dev/null || die "fio not found (apt-get install fio)"
[ -z "$llama" ] || [ -x "$llama" ] || die "LLAMA=$llama is not executable"
mkdir -p "$out"
prompt="The quick brown fox jumps over the lazy dog"
throttle=()
[ -z "$read_bw" ] || throttle=(--read-bw "$read_bw" --path "$model")

# The disk as the runs see it: fio under the same devsim caps, sequential 1 MiB
# reads (spool reads whole experts, many MB contiguous) at queue depth 16.
"$devsim" --mem 1G "${throttle[@]}" --cold --report "$out/fio.devsim.json" -- \
  fio --name=s --rw=read --bs=1M --direct=1 --iodepth=16 --ioengine=io_uring --runtime=15 \
  --time_based --filename="$model" --readonly --output-format=json --output="$out/fio.json" >/dev/null 2>&1
bw=$(python3 -c "import json; t = open('$out/fio.json').read(); print(json.loads(t[t.index('{'):])['jobs'][0]['read']['bw_bytes'])")  # (fio puts warnings first)
echo "fio (devsim ${read_bw:+--read-bw $read_bw }O_DIRECT 1 MiB QD16 sequential): $(python3 -c "print(f'{$bw/1e9:.3f}')") GB/s"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

table="$out/table.md"
echo "| cap | engine | decode tok/s | TTFT / prompt eval s | GB read per decode token | bound tok/s | % of bound | expert hit % | devsim read GB / wall s | devsim peak / cap MiB |" >"$table"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" >>"$table"

run_spool() {  # cap
  local tag=spool-$1
  # shellcheck disable=SC2086
  "$devsim" --mem "$1" "${throttle[@]}" --cold --report "$out/$tag.devsim.json" -- "$here/build/spool" run \
    -m "$model" -p "$prompt" -n "$n_gen" --temp 0 -t 2 -c 256 --mem-budget "$1" --cache-policy "$policy" \
    $spool_args --stats-json "$out/$tag.json" >"$out/$tag.log" 2>&1 || { echo "$tag failed (see $out/$tag.log)"; return; }
  python3 - "$out/$tag.json" "$out/$tag.devsim.json" "$bw" "$1" "$table" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2])); bw = float(sys.argv[3]); cap = sys.argv[4]
t = s["total"]; dec = [p for p in s["per_token"] if p["phase"] == "decode"]
look = sum(p["lookups"] for p in dec); hits = sum(p["hits"] for p in dec)
bpt = t["decode_bytes_per_token"]; bound = bw / bpt if bpt else float("inf")
pct = 100 * t["decode_tok_s"] / bound if bpt else float("nan")  # nothing read while decoding: no bound
print(f"spool {cap}: decode {t['decode_tok_s']:.3f} tok/s, TTFT {s['ttft_s']:.2f} s, {bpt/1e9:.3f} GB/token, "
      f"bound {bound:.3f} tok/s ({pct:.0f}%), hit {100*hits/max(look,1):.0f}%, "
      f"spec {100*s['speculative']['accuracy']:.0f}%, io wait {sum(p['io_wait_s'] for p in dec):.1f}/"
      f"{sum(p['wall_s'] for p in dec):.1f} s, read {d['read_bytes']/1e9:.1f} GB in {d['wall_s']:.1f} s, "
      f"peak {d['peak_mem_bytes']/2**20:.0f} MiB of {d['mem_cap_bytes']/2**20:.0f}, exit {d['exit_code']}")
with open(sys.argv[5], "a") as f:
    f.write(f"| {cap} | spool | {t['decode_tok_s']:.3f} | {s['ttft_s']:.1f} | {bpt/1e9:.2f} | {bound:.3f} | {pct:.0f} % "
            f"| {100*hits/max(look,1):.0f} | {d['read_bytes']/1e9:.1f} / {d['wall_s']:.0f} "
            f"| {d['peak_mem_bytes']/2**20:.0f} / {d['mem_cap_bytes']/2**20:.0f} |\n")
PY
}

run_llama() {  # cap
  local tag=llama-$1
  "$devsim" --mem "$1" "${throttle[@]}" --cold --report "$out/$tag.devsim.json" -- "$llama" -m "$model" \
    -p "$prompt" -n "$n_gen" --temp 0 -t 2 -nr -c 256 -no-cnv >"$out/$tag.log" 2>&1 || { echo "$tag failed (see $out/$tag.log)"; return; }
  python3 - "$out/$tag.log" "$out/$tag.devsim.json" "$bw" "$1" "$table" "$n_gen" <<'PY'
import json, re, sys
log = open(sys.argv[1], errors="replace").read(); d = json.load(open(sys.argv[2])); bw = float(sys.argv[3])
cap, n_gen = sys.argv[4], int(sys.argv[6])
pe = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", log)
ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", log)
if not pe or not ev:
    print(f"llama {cap}: no timings in {sys.argv[1]}"); sys.exit(0)
prompt_s, runs = float(pe.group(1)) / 1000, int(ev.group(2))
tok_s = runs / (float(ev.group(1)) / 1000) if runs else 0.0
# llama.cpp has no per-token read counter; devsim's read total (counted with --read-bw) covers the whole run.
print(f"llama {cap}: decode {tok_s:.3f} tok/s ({runs} tokens), prompt eval {prompt_s:.2f} s, "
      f"read {d['read_bytes']/1e9:.1f} GB in {d['wall_s']:.1f} s, "
      f"peak {d['peak_mem_bytes']/2**20:.0f} MiB of {d['mem_cap_bytes']/2**20:.0f}, exit {d['exit_code']}")
with open(sys.argv[5], "a") as f:
    f.write(f"| {cap} | llama.cpp | {tok_s:.3f} | {prompt_s:.1f} | | | | | {d['read_bytes']/1e9:.1f} / {d['wall_s']:.0f} "
            f"| {d['peak_mem_bytes']/2**20:.0f} / {d['mem_cap_bytes']/2**20:.0f} |\n")
PY
}

for cap in $caps; do
  run_spool "$cap"
  if [ -n "$llama" ] && [[ " $llama_caps " == *" $cap "* ]]; then run_llama "$cap"; fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "table: $table"
