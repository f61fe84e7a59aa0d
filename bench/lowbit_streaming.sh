#!/usr/bin/env bash
# Low-bit streaming benchmark (issue 26): one Kimi-K2-shaped synthetic MoE
# (real per-layer shapes, 8 layers, the same routed-expert count in every file)
# written as dynamic 1-2-bit mixes and as Q4_K, each decoded under the same
# devsim RAM caps and read-bandwidth cap by spool and by llama.cpp (mmap), all
# in one run (bench/k3_streaming.sh per file). The summary compares
#   - bytes read per decode token with what the mix says they should be: the
#     units spool read (experts missed or prefetched, streamed dense tensors)
#     times their sizes in this file's types,
#   - decode tok/s against the Q4_K file's under the same cap,
#   - decode tok/s against llama.cpp's on the same file and cap.
#
#   bench/lowbit_streaming.sh OUTDIR
#
# environment (defaults):
#   DIR=/tmp/spool-bench/k2     where the files are (written with spool synth when missing)
#   MIXES="UD-IQ1_S UD-IQ2_XXS Q4_K"   the last one is the baseline of the ratios
#   N_EXPERT=146 LAYERS=8       routed experts per MoE layer, layers (146 x 8: the UD-IQ1_S file is ~10 GiB)
#   CAPS="1G 4G" READ_BW=1G N_GEN=8   passed to bench/k3_streaming.sh
#   LLAMA=                      llama.cpp's llama-completion (mmap'd, -nr); empty = spool only
# Writes OUTDIR/<mix>/ (k3_streaming.sh's logs and table) and OUTDIR/summary.md.
set -euo pipefail
die() { echo "lowbit_streaming: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 OUTDIR"
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
spool=$here/build/spool
dir=${DIR:-/tmp/spool-bench/k2}
mixes=${MIXES:-"UD-IQ1_S UD-IQ2_XXS Q4_K"}
n_expert=${N_EXPERT:-146}
layers=${LAYERS:-8}
[ -x "$spool" ] || die "build/spool not found: build spool first"
mkdir -p "$out" "$dir"

for mix in $mixes; do
  f=$dir/k2-${n_expert}x${layers}-$mix.gguf
  if [ ! -f "$f" ]; then
    echo "writing $f"
    "$spool" synth --preset kimi-k2-scaled --target-size 26G --n-expert "$n_expert" --layers "$layers" --type "$mix" \
      -t 2 -o "$f" >"$out/synth-$mix.log" 2>&1 || die "synth $mix failed (see $out/synth-$mix.log)"
  fi
done

for mix in $mixes; do
  f=$dir/k2-${n_expert}x${layers}-$mix.gguf
  echo "== $mix ($f)"
  MODEL=$f "$here/bench/k3_streaming.sh" "$out/$mix"
done

python3 - "$out" "$mixes" <<'PY'
import json, os, sys
out, mixes = sys.argv[1], sys.argv[2].split()
base = mixes[-1]

def rows(mix):
    """cap -> {engine: decode tok/s or None} from k3_streaming.sh's table."""
    r = {}
    for line in open(os.path.join(out, mix, "table.md")):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 3 or c[0] in ("cap", "---"):
            continue
        try:
            r.setdefault(c[0], {})[c[1]] = float(c[2])
        except ValueError:
            r.setdefault(c[0], {})[c[1]] = None
    return r

tab = {m: rows(m) for m in mixes}
caps = sorted({c for m in mixes for c in tab[m]}, key=lambda c: float(c[:-1]))
fmt = lambda v, k="{:.3f}": "-" if v is None else k.format(v)
lines = ["| file | cap | spool decode tok/s | GB read / decode token | GB of tensor bytes in those reads "
         "| read / tensor bytes | whole run: devsim read / spool read (load incl.) | " + f"spool vs {base} | llama.cpp tok/s "
         "| spool / llama.cpp |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for m in mixes:
    for cap in caps:
        s = tab[m].get(cap, {}).get("spool")
        l = tab[m].get(cap, {}).get("llama.cpp")
        b = tab[base].get(cap, {}).get("spool")
        read = pay = ext = None
        sj, dj = os.path.join(out, m, f"spool-{cap}.json"), os.path.join(out, m, f"spool-{cap}.devsim.json")
        if os.path.exists(sj):
            st = json.load(open(sj))
            read = st["total"]["decode_bytes_per_token"]
            pay = st["total"].get("decode_payload_bytes_per_token")
            if os.path.exists(dj):
                # devsim counts the whole process (header, resident load, every read)
                ext = json.load(open(dj))["read_bytes"] / max(st["total"]["bytes_read"] + st["store"]["load_bytes"], 1)
        lines.append(f"| {m} | {cap} | {fmt(s)} | {fmt(read and read / 1e9)} | {fmt(pay and pay / 1e9)} | "
                     f"{fmt(read and pay and read / pay)} | {fmt(ext)} | {fmt(s and b and s / b, '{:.2f}x')} | "
                     f"{fmt(l)} | {fmt(s and l and s / l, '{:.2f}x')} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
