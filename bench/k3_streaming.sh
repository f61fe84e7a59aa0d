#!/usr/bin/env bash
# Kimi K3 streaming benchmark: a K3-shaped synthetic kimi-k3 file (>= 12 GB,
# real per-layer shapes, MXFP4 experts) decoded under devsim RAM caps with a
# read-bandwidth cap, spool and llama.cpp side by side in one run, with
# `spool plan`'s projection for the same file and cap beside each.
#
#   bench/k3_streaming.sh OUTDIR
#
# environment (defaults):
#   MODEL=/tmp/spool-bench/k3-scaled.gguf  written with spool synth when missing
#   TARGET=11.5G          synth --target-size (11.5 GiB = 12.3 GB)
#   CAPS="1G 4G"          devsim --mem caps, each also spool's --mem-budget and plan's --budget
#   READ_BW=1G            devsim --read-bw (1 GiB/s: a USB SSD)
#   LLAMA=                llama.cpp's llama-completion (or llama-bench) binary; empty = spool and plan only
#   N_GEN=8               tokens decoded per run
#   SPOOL_ARGS=           extra spool run arguments
#   DEVSIM=../shared/tools/devsim
# The disk as the runs see it is measured in the same run (dd O_DIRECT 4 MiB
# reads of the model under devsim's caps); it is the storage bound's
# bandwidth and plan's --read-bw. llama.cpp runs mmap'd (it has no budget
# flag) under the same cap: llama-completion -nr (no repacking), 2 threads,
# greedy; llama-bench (which always repacks, so small caps kill it) also works.
# An engine that cannot load kimi-k3 gets a row saying so (and its error).
# Writes OUTDIR/table.md and OUTDIR/*.log / *.json. Needs root (devsim),
# python3 and build/spool.
set -euo pipefail
die() { echo "k3_streaming: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 OUTDIR"
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
spool=$here/build/spool
devsim=${DEVSIM:-$here/../shared/tools/devsim}
model=${MODEL:-/tmp/spool-bench/k3-scaled.gguf}
target=${TARGET:-11.5G}
caps=${CAPS:-"1G 4G"}
read_bw=${READ_BW:-1G}
llama=${LLAMA:-}
n_gen=${N_GEN:-8}
spool_args=${SPOOL_ARGS:-}
[ -x "$spool" ] || die "build/spool not found: build spool first"
[ -z "$llama" ] || [ -x "$llama" ] || die "LLAMA=$llama is not executable"
mkdir -p "$out" "$(dirname "$model")"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ ! -f "$model" ]; then
  echo "writing $model (spool synth --arch kimi-k3 --preset kimi-k3-scaled --target-size $target --type MXFP4)"
  "$spool" synth --arch kimi-k3 --preset kimi-k3-scaled --target-size "$target" --type MXFP4 -t 2 \
    -o "$model" 2>&1 | tee "$out/synth.log"
fi
model=$(realpath "$model")
"$spool" inspect "$model" >"$out/inspect.txt" 2>&1 || true
throttle=(--read-bw "$read_bw" --path "$model")

# Disk bandwidth under the caps: 2 GiB of O_DIRECT 4 MiB sequential reads.
"$devsim" --mem 1G "${throttle[@]}" --cold --report "$out/dd.devsim.json" -- \
  dd if="$model" of=/dev/null bs=4M count=512 iflag=direct 2>"$out/dd.log" || die "dd failed (see $out/dd.log)"
bw=$(python3 -c "import json; d = json.load(open('$out/dd.devsim.json')); print(d['read_bytes'] / d['wall_s'])")
echo "disk under devsim --read-bw $read_bw (dd O_DIRECT 4 MiB): $(python3 -c "print(f'{$bw/1e9:.3f}')") GB/s"

table="$out/table.md"
{
  echo "| cap | engine | decode tok/s | GB read per decode token | storage bound tok/s | % of bound | hit % (streamed units) | peak / cap MiB | plan: GB read per token | plan: tok/s | plan: TTFT s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$table"

# plan for the same file, budget and measured bandwidth; the prompt is 14 tokens in the 512-token vocabulary.
plan_row() {  # cap [hit-rate] -> "GB/token tok/s ttft"
  local extra=()
  [ -z "${2:-}" ] || extra=(--hit-rate "$2")
  "$spool" plan "$model" --ram "$1" --budget "$1" --read-bw "${bw%.*}" --ctx 256 --prompt 14 "${extra[@]}" \
    >"$out/plan-$1${2:+-hit$2}.txt" 2>&1 || { echo "- - -"; return; }
  python3 - "$out/plan-$1${2:+-hit$2}.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rd = re.search(r"read per token: .* = ([\d.]+) GB", t)
dec = re.search(r"decode: ([\d.]+) tok/s", t)
ttft = re.search(r"TTFT .*, ([\d.]+) s\n", t)
print(rd.group(1) if rd else "-", dec.group(1) if dec else "inf", ttft.group(1) if ttft else "-")
PY
}

run_spool() {  # cap
  local tag=spool-$1
  if ! "$devsim" --mem "$1" "${throttle[@]}" --cold --report "$out/$tag.devsim.json" -- "$spool" run -m "$model" \
      -p "The quick brown fox" -n "$n_gen" --temp 0 -t 2 -c 256 --mem-budget "$1" $spool_args \
      --stats-json "$out/$tag.json" >"$out/$tag.log" 2>&1; then
    local why
    why=$(grep -m1 -i "error" "$out/$tag.log" | cut -c1-120 || true)
    read -r p_gb p_tok p_ttft <<<"$(plan_row "$1")"
    echo "spool $1: failed: $why"
    echo "| $1 | spool | failed: ${why//|/} | | | | | | $p_gb | $p_tok | $p_ttft |" >>"$table"
    return
  fi
  local hit
  hit=$(python3 -c "
import json; s = json.load(open('$out/$tag.json')); dec = [p for p in s['per_token'] if p['phase'] == 'decode']
look = sum(p['lookups'] for p in dec); print(f\"{sum(p['hits'] for p in dec) / max(look, 1):.4f}\")")
  # plan's own projection (hit rate = cached share of the experts): spool's measured hit rate counts every
  # streamed unit, dense tensors that do not fit included, so it is not the expert-only rate plan takes.
  read -r p_gb p_tok p_ttft <<<"$(plan_row "$1")"
  python3 - "$out/$tag.json" "$out/$tag.devsim.json" "$bw" "$1" "$table" "$hit" "$p_gb" "$p_tok" "$p_ttft" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2])); bw = float(sys.argv[3]); cap = sys.argv[4]
hit, p_gb, p_tok, p_ttft = float(sys.argv[6]), sys.argv[7], sys.argv[8], sys.argv[9]
t = s["total"]; bpt = t["decode_bytes_per_token"]; bound = bw / bpt if bpt else float("inf")
pct = 100 * t["decode_tok_s"] / bound if bpt else float("nan")
print(f"spool {cap}: decode {t['decode_tok_s']:.3f} tok/s, {bpt/1e9:.3f} GB/token, bound {bound:.3f} tok/s "
      f"({pct:.0f}%), hit {100*hit:.0f}%, TTFT {s['ttft_s']:.1f} s, peak {d['peak_mem_bytes']/2**20:.0f} MiB of "
      f"{d['mem_cap_bytes']/2**20:.0f}; plan: {p_gb} GB/token, {p_tok} tok/s, TTFT {p_ttft} s")
with open(sys.argv[5], "a") as f:
    f.write(f"| {cap} | spool | {t['decode_tok_s']:.3f} | {bpt/1e9:.2f} | {bound:.3f} | {pct:.0f} % | {100*hit:.0f} "
            f"| {d['peak_mem_bytes']/2**20:.0f} / {d['mem_cap_bytes']/2**20:.0f} | {p_gb} | {p_tok} | {p_ttft} |\n")
PY
}

run_llama() {  # cap
  local tag=llama-$1 args
  read -r p_gb p_tok p_ttft <<<"$(plan_row "$1")"
  if [ "$(basename "$llama")" = llama-bench ]; then  # no --no-repack here: repacked weights count against the cap
    args=(-m "$model" -p 0 -n "$n_gen" -t 2 -r 1 -o md -v)
  else  # llama-completion / llama-cli: mmap'd, no repack, as bench/streaming_caps.sh runs it
    args=(-m "$model" -p "The quick brown fox" -n "$n_gen" --temp 0 -t 2 -nr -c 256 -no-cnv)
  fi
  if ! "$devsim" --mem "$1" "${throttle[@]}" --cold --report "$out/$tag.devsim.json" -- "$llama" "${args[@]}" \
      >"$out/$tag.log" 2>&1; then
    local why
    why=$(grep -m1 -i "error loading model\|error:" "$out/$tag.log" | sed 's/.*error[a-z ]*: //' | cut -c1-100 || true)
    if grep -q '"exit_code": 137' "$out/$tag.devsim.json" 2>/dev/null; then why="killed at the memory cap (exit 137)"; fi
    echo "llama.cpp $1: cannot run: $why"
    echo "| $1 | llama.cpp | cannot run: ${why//|/} | | | | | | $p_gb | $p_tok | $p_ttft |" >>"$table"
    return
  fi
  python3 - "$out/$tag.log" "$out/$tag.devsim.json" "$bw" "$1" "$table" "$n_gen" "$p_gb" "$p_tok" "$p_ttft" <<'PY'
import json, re, sys
log = open(sys.argv[1], errors="replace").read(); d = json.load(open(sys.argv[2])); bw = float(sys.argv[3])
cap, n_gen, p_gb, p_tok, p_ttft = sys.argv[4], int(sys.argv[6]), sys.argv[7], sys.argv[8], sys.argv[9]
m = re.search(r"\|\s*tg\d+\s*\|\s*([\d.]+)", log)             # llama-bench
ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", log)  # llama-completion
tok_s = float(m.group(1)) if m else (int(ev.group(2)) / (float(ev.group(1)) / 1000) if ev and int(ev.group(2)) else 0.0)
# No per-token counter in llama.cpp: devsim's read total over the tokens decoded (load included), an upper bound.
n_dec = 2 * n_gen if m else n_gen  # llama-bench decodes a warm-up run too
gb_tok = d["read_bytes"] / n_dec / 1e9
print(f"llama.cpp {cap}: decode {tok_s:.3f} tok/s, <= {gb_tok:.2f} GB read per token (whole run), "
      f"peak {d['peak_mem_bytes']/2**20:.0f} MiB of {d['mem_cap_bytes']/2**20:.0f}")
with open(sys.argv[5], "a") as f:
    f.write(f"| {cap} | llama.cpp | {tok_s:.3f} | <= {gb_tok:.2f} | >= {bw/(gb_tok*1e9):.3f} | | "
            f"| {d['peak_mem_bytes']/2**20:.0f} / {d['mem_cap_bytes']/2**20:.0f} | {p_gb} | {p_tok} | {p_ttft} |\n")
PY
}

for cap in $caps; do
  run_spool "$cap"
  [ -z "$llama" ] || run_llama "$cap"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "table: $table"
cat "$table"
