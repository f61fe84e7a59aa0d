#!/usr/bin/env bash
# NEON speed proxy: spool's aarch64 build against llama.cpp's aarch64 build on
# the same GGUF files, run under qemu-user on this x86-64 machine and measured
# as dynamic guest instruction counts (a TCG plugin) per prefill token and per
# decode token. Each figure is the difference of two runs with different token
# counts, so model loading, weight repacking, warm-ups and exit cancel out.
#   bench/neon_proxy.sh SPOOL_ARM64 LLAMA_ARM64_BIN_DIR PLUGIN_SO MODEL_DIR > table.md
# SPOOL_ARM64: spool cross-built for aarch64 (scripts/build-arm.sh: build-arm64/spool).
# LLAMA_ARM64_BIN_DIR: holds llama.cpp's aarch64 llama-bench.
# PLUGIN_SO: qemu's instruction counter, tests/plugin/bb.c (inline=on) or insn.c
#   from qemu's source built as a .so; anything printing "insns: N" at exit.
# MODEL_DIR: holds ${MODEL_PREFIX}-${TYPE}.gguf for each type; missing ones are
#   made with the x86 spool (SPOOL_X86, default build/spool) `synth`.
# Environment (defaults): TYPES="Q4_0 Q8_0 Q4_K_M", MODEL_PREFIX=tinyllama-1.1b-L4,
#   SYNTH_PRESET=tinyllama-1.1b, SYNTH_LAYERS=4 (for synth only), P1=16 P2=48
#   (prompt tokens), N1=4 N2=12 (generated tokens), QEMU_CPU=neoverse-n1
#   (ARMv8.2-A with dotprod and fp16, no i8mm, no SVE: what both builds target),
#   LOG_DIR (a new /tmp/neon-proxy.* directory; counts already in it are reused,
#   so an interrupted run resumes), TOOLS="spool llama" (which tools to run).
# Variables spool reads pass through qemu: SPOOL_NEON_TILES=v1 measures the NEON
#   row tiles that the token tiles replaced (before/after from one build).
# Both tools run with 1 thread. spool bench cannot skip its warm-up run, so with
# -r 1 every test runs twice and its difference is divided by 2 x tokens;
# llama-bench runs with --no-warmup -r 1 (once).
set -euo pipefail

if [ $# -ne 4 ]; then
  sed -n '2,24p' "$0" >&2
  exit 2
fi
spool=$(realpath "$1"); llama_bench=$(realpath "$2")/llama-bench; plugin=$(realpath "$3"); model_dir=$4
root=$(cd "$(dirname "$0")/.." && pwd)
types=${TYPES:-Q4_0 Q8_0 Q4_K_M}
prefix=${MODEL_PREFIX:-tinyllama-1.1b-L4}
p1=${P1:-16} p2=${P2:-48} n1=${N1:-4} n2=${N2:-12}
export QEMU_CPU=${QEMU_CPU:-neoverse-n1}
# Debian's multiarch loader and libc, which the full binary links against (the
# cross toolchain's loader with that libc hangs in pthread_create).
export QEMU_LD_PREFIX=${QEMU_LD_PREFIX:-/}
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
tools=${TOOLS:-spool llama}
needed=("$spool" "$plugin"); case " $tools " in *" llama "*) needed+=("$llama_bench") ;; esac
for f in "${needed[@]}"; do
  [ -e "$f" ] || { echo "neon_proxy: $f not found" >&2; exit 1; }
done
mkdir -p "$model_dir"
logs=${LOG_DIR:-$(mktemp -d /tmp/neon-proxy.XXXXXX)}
mkdir -p "$logs"
echo "neon_proxy: logs in $logs, QEMU_CPU=$QEMU_CPU" >&2

# count NAME CMD...: guest instructions of one run (all threads), on stdout.
count() {
  local name=$1; shift
  local t0=$SECONDS
  case " $tools " in *" ${name%%-*} "*) ;; *) echo 0; return ;; esac
  if [ -s "$logs/$name.count" ]; then cat "$logs/$name.count"; return; fi
  "$qemu" -plugin "$plugin,inline=on" -d plugin -D "$logs/$name.insns" "$@" >"$logs/$name.out" 2>"$logs/$name.err" || {
    echo "neon_proxy: $name failed (see $logs/$name.err)" >&2; exit 1; }
  local n; n=$(grep -o 'insns: [0-9]*' "$logs/$name.insns" | tail -1 | cut -d' ' -f2)
  [ -n "$n" ] || { echo "neon_proxy: no instruction count for $name" >&2; exit 1; }
  echo "neon_proxy: $name: $n instructions ($(( SECONDS - t0 )) s)" >&2
  echo "$n" >"$logs/$name.count"
  echo "$n"
}

# per_token A B TOKENS RUNS: (B - A) / (TOKENS x RUNS), rounded.
per_token() { awk -v a="$1" -v b="$2" -v t="$3" -v r="$4" 'BEGIN { printf "%.0f", (b - a) / (t * r) }'; }
ratio() { awk -v s="$1" -v l="$2" 'BEGIN { if (s > 0 && l > 0) printf "%.2f", s / l; else printf "-" }'; }
human() { awk -v x="$1" 'BEGIN { printf "%.1f M", x / 1e6 }'; }

rows=()
for t in $types; do
  m="$model_dir/$prefix-$t.gguf"
  if [ ! -f "$m" ]; then
    echo "neon_proxy: synth $m" >&2
    "${SPOOL_X86:-$root/build/spool}" synth --preset "${SYNTH_PRESET:-tinyllama-1.1b}" \
      --layers "${SYNTH_LAYERS:-4}" --type "$t" -o "$m" >&2
  fi
  sb=(bench -m "$m" -t 1 -r 1)
  lb=(-m "$m" -t 1 -r 1 --no-warmup)
  s_p1=$(count "spool-$t-pp$p1" "$spool" "${sb[@]}" -p "$p1" -n 0)
  s_p2=$(count "spool-$t-pp$p2" "$spool" "${sb[@]}" -p "$p2" -n 0)
  s_n1=$(count "spool-$t-tg$n1" "$spool" "${sb[@]}" -p 0 -n "$n1")
  s_n2=$(count "spool-$t-tg$n2" "$spool" "${sb[@]}" -p 0 -n "$n2")
  l_p1=$(count "llama-$t-pp$p1" "$llama_bench" "${lb[@]}" -p "$p1" -n 0)
  l_p2=$(count "llama-$t-pp$p2" "$llama_bench" "${lb[@]}" -p "$p2" -n 0)
  l_n1=$(count "llama-$t-tg$n1" "$llama_bench" "${lb[@]}" -p 0 -n "$n1")
  l_n2=$(count "llama-$t-tg$n2" "$llama_bench" "${lb[@]}" -p 0 -n "$n2")
  # spool: warm-up + 1 timed run = 2 runs of each test; llama-bench: 1.
  sp=$(per_token "$s_p1" "$s_p2" $(( p2 - p1 )) 2); lp=$(per_token "$l_p1" "$l_p2" $(( p2 - p1 )) 1)
  sd=$(per_token "$s_n1" "$s_n2" $(( n2 - n1 )) 2); ld=$(per_token "$l_n1" "$l_n2" $(( n2 - n1 )) 1)
  [ ! -f "$logs/spool-$t-tg$n1.out" ] || grep -q 'neon' "$logs/spool-$t-tg$n1.out" || echo "neon_proxy: warning: spool did not report the neon ISA" >&2
  rows+=("| $t | prefill (pp$p1→pp$p2) | $(human "$sp") | $(human "$lp") | $(ratio "$sp" "$lp") |")
  rows+=("| $t | decode (tg$n1→tg$n2) | $(human "$sd") | $(human "$ld") | $(ratio "$sd" "$ld") |")
done

echo "Guest instructions per token under qemu-aarch64 -cpu $QEMU_CPU, 1 thread, model $prefix-TYPE.gguf"
echo "(ratio = spool / llama.cpp; below 1 means spool executes fewer instructions)."
echo
echo "| type | phase | spool instr/token | llama.cpp instr/token | ratio |"
echo "|------|-------|------------------:|----------------------:|------:|"
printf '%s\n' "${rows[@]}"
