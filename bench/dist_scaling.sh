#!/usr/bin/env bash
# Expert parallelism scaling (issue 28): decode of the Kimi-K2-shaped synthetic
# MoE with 1, 2, 4 ranks (`mpirun ... spool run --dist ep`), each rank under its
# own devsim cap (RAM with page cache, and read bandwidth), cold. One rank is
# plain `spool run` under the same cap. With NET=1 the ranks run in network
# namespaces, one per rank, joined by a bridge whose every link is shaped with
# tc at both ends of each veth pair: netem (rate and delay) where the kernel
# has it, else tbf (rate only; the delay's cost is then left out and said so
# in the summary), Open MPI carrying
# its messages over TCP between them (its daemons started in the namespaces by
# an rsh agent in place of ssh): the home rank's time waiting for answers beyond
# the slowest rank's compute is the network's (and MPI's) share of token time.
#
#   bench/dist_scaling.sh OUTDIR
#
# environment (defaults):
#   MODEL=/tmp/spool-bench/kimi-synth-12g.gguf  written with spool synth when missing (12.7 GB)
#   RANKS="1 2 4"   CAP=1G   READ_BW=300M   N_GEN=16   THREADS=2
#   NET=0           1: ranks in network namespaces (needs root, iproute2, tc)
#   NET_RATE=1gbit  NET_DELAY=0.1ms   per veth end: two ends between two ranks (0.2 ms one way)
# Writes OUTDIR/n<N>[-net]/ (spool's stderr, --stats-json, one devsim report per
# rank) and OUTDIR/summary.md. Needs root (devsim), mpirun, python3.
set -euo pipefail
die() { echo "dist_scaling: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 OUTDIR"
out=$(mkdir -p "$1" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
spool=$here/build/spool
devsim=$here/../shared/tools/devsim
model=${MODEL:-/tmp/spool-bench/kimi-synth-12g.gguf}
ranks=${RANKS:-"1 2 4"}
cap=${CAP:-1G} bw=${READ_BW:-300M} n_gen=${N_GEN:-16} threads=${THREADS:-2}
net=${NET:-0} net_rate=${NET_RATE:-1gbit} net_delay=${NET_DELAY:-0.1ms}
prompt="The quick brown fox"
[ -x "$spool" ] || die "build/spool not found: build spool first"
[ -x "$devsim" ] || die "no devsim at $devsim"
command -v mpirun >/dev/null || die "mpirun not found (scripts/install-deps.sh installs Open MPI)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  echo "writing $model"
  "$spool" synth --arch deepseek2 --preset kimi-k2-scaled --target-size 12G --type Q4_K -t 2 -o "$model" \
    >"$out/synth.log" 2>&1 || die "synth failed (see $out/synth.log)"
fi
model_dir=$(dirname "$model")

# Each rank: its own devsim (cgroup), its report named by its MPI rank.
cat >"$out/rank.sh" <<EOF
#!/usr/bin/env bash
r=\${OMPI_COMM_WORLD_RANK:-0}
exec "$devsim" --mem "$cap" --read-bw "$bw" --path "$model_dir" --report "\$SPOOL_RUN_DIR/rank\$r.json" -- "\$@"
EOF
chmod +x "$out/rank.sh"

spool_args=(run -m "$model" -p "$prompt" -n "$n_gen" --temp 0 -t "$threads" -c 256 --mem-budget "$cap")

# Network namespaces spoolns10, spoolns11, ... (10.77.0.10, .11, ...) on bridge br-spool (10.77.0.1).
subnet=10.77.0
ns_up() {  # count
  ip link add br-spool type bridge 2>/dev/null || true
  ip addr replace $subnet.1/24 dev br-spool
  ip link set br-spool up
  for i in $(seq 10 $((9 + $1))); do
    ip netns add spoolns$i 2>/dev/null || true
    if ! ip link show vh$i >/dev/null 2>&1; then
      ip link add vh$i type veth peer name vn$i
      ip link set vn$i netns spoolns$i
      ip link set vh$i master br-spool
    fi
    ip link set vh$i up
    ip netns exec spoolns$i ip addr replace $subnet.$i/24 dev vn$i
    ip netns exec spoolns$i ip link set vn$i up
    ip netns exec spoolns$i ip link set lo up
    ip netns exec spoolns$i tc qdisc replace dev vn$i root $qdisc
    tc qdisc replace dev vh$i root $qdisc
  done
}
ns_down() {
  for i in $(seq 10 20); do
    ip link del vh$i 2>/dev/null || true
    ip netns del spoolns$i 2>/dev/null || true
  done
  ip link del br-spool 2>/dev/null || true
}
qdisc=""
if [ "$net" = 1 ]; then
  # netem where the kernel has it (CONFIG_NET_SCH_NETEM), else tbf: the rate without the delay.
  ip link add spooltq0 type veth peer name spooltq1
  if tc qdisc add dev spooltq0 root netem rate "$net_rate" delay "$net_delay" 2>/dev/null; then
    qdisc="netem rate $net_rate delay $net_delay"
  else
    qdisc="tbf rate $net_rate burst 256kb latency 20ms"
    echo "dist_scaling: this kernel has no netem qdisc: links get $qdisc, no added delay" >&2
  fi
  ip link del spooltq0
  trap ns_down EXIT
  # Open MPI starts its daemon on "host" 10.77.0.N through this agent instead of ssh.
  cat >"$out/nsrsh" <<'EOF'
#!/bin/bash
host=$1; shift
while [[ "$host" == -* ]]; do host=$1; shift; done
ns=spoolns${host##*.}
# nsenter, not `ip netns exec`: that one mounts its own /sys, hiding the cgroups devsim needs.
exec nsenter --net=/run/netns/"$ns" unshare --uts /bin/sh -c "hostname $ns; exec /bin/sh -c \"\$0\"" "$*"
EOF
  chmod +x "$out/nsrsh"
fi

run_n() {  # N
  local n=$1 tag=n$1
  [ "$net" = 1 ] && [ "$n" -gt 1 ] && tag=n$1-net
  local dir=$out/$tag
  rm -rf "$dir" && mkdir -p "$dir"
  sync && echo 3 >/proc/sys/vm/drop_caches
  echo "== $tag: $(date -u +%H:%M:%S)"
  local rc=0
  if [ "$n" = 1 ]; then
    SPOOL_RUN_DIR=$dir "$out/rank.sh" "$spool" "${spool_args[@]}" --stats-json "$dir/stats.json" \
      >"$dir/out.txt" 2>"$dir/err.txt" || rc=$?
  elif [ "$net" = 1 ]; then
    ns_up "$n"
    : >"$dir/hosts"
    for i in $(seq 10 $((9 + n))); do echo "$subnet.$i slots=1" >>"$dir/hosts"; done
    SPOOL_RUN_DIR=$dir mpirun --hostfile "$dir/hosts" -np "$n" --mca plm_rsh_agent "$out/nsrsh" \
      --mca oob_tcp_if_include $subnet.0/24 --mca btl tcp,self --mca btl_tcp_if_include $subnet.0/24 \
      -x SPOOL_RUN_DIR -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
      "$out/rank.sh" "$spool" "${spool_args[@]}" --dist ep --stats-json "$dir/stats.json" \
      >"$dir/out.txt" 2>"$dir/err.txt" || rc=$?
  else
    SPOOL_RUN_DIR=$dir mpirun --oversubscribe -np "$n" -x SPOOL_RUN_DIR \
      "$out/rank.sh" "$spool" "${spool_args[@]}" --dist ep --stats-json "$dir/stats.json" \
      >"$dir/out.txt" 2>"$dir/err.txt" || rc=$?
  fi
  [ "$rc" = 0 ] || { tail -20 "$dir/err.txt"; die "$tag failed ($rc)"; }
  grep -a "generated\|dist ep" "$dir/err.txt" || true
}

for n in $ranks; do run_n "$n"; done

python3 - "$out" "$ranks" "$net" "$cap" "$bw" "$qdisc" <<'PY'
import glob, json, os, sys
out, ranks, net, cap, bw, qdisc = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1", *sys.argv[4:]
rows, base = [], None
for n in ranks:
    tag = f"n{n}-net" if net and n != "1" else f"n{n}"
    d = os.path.join(out, tag)
    s = json.load(open(os.path.join(d, "stats.json")))
    tok = s["total"]["decode_tok_s"]
    if n == "1":
        base = tok
    reps = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, "rank*.json")))]
    dist = s.get("dist") or {}
    rows.append((n, tag, tok, reps, dist, s))
lines = [f"cap per rank {cap}, read bandwidth per rank {bw}" + (f", ranks in network namespaces, each veth end: tc {qdisc}" if net else ", one host (MPI over shared memory)"),
         "", "| ranks | decode tok/s | x one rank | target 0.7 x N | GB read per rank (whole run) | peak MiB per rank "
         "| MB on the wire / token | waiting for ranks ms / token | network + MPI ms / token | network share |",
         "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|"]
for n, tag, tok, reps, dist, s in rows:
    x = tok / base if base else float("nan")
    gb = ", ".join(f"{r['read_bytes'] / 1e9:.2f}" for r in reps)
    peak = ", ".join(f"{r['peak_mem_bytes'] / 2**20:.0f}" for r in reps)
    wire = dist.get("decode_bytes_per_token")
    wait = dist.get("decode_wait_s_per_token")
    netw = dist.get("decode_network_s_per_token")
    share = dist.get("decode_network_share")
    f = lambda v, k: "-" if v is None else k.format(v)
    lines.append(f"| {n} | {tok:.3f} | {x:.2f} | {0.7 * int(n):.1f} | {gb} | {peak} | {f(wire and wire / 1e6, '{:.2f}')} "
                 f"| {f(wait and wait * 1e3, '{:.0f}')} | {f(netw and netw * 1e3, '{:.1f}')} | {f(share and share * 100, '{:.1f} %')} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
