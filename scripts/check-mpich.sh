#!/usr/bin/env bash
# By hand (not in CI): spool's MPI transport built against MPICH instead of
# Open MPI, and `--dist ep` under MPICH's mpiexec with 2 and 4 ranks giving one
# process's greedy text on the DeepSeek-V3 fixture. Installs Debian's mpich
# (beside Open MPI; `mpirun` stays Open MPI's), builds in BUILD_DIR.
#   scripts/check-mpich.sh [BUILD_DIR]    (default /tmp/build-mpich)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-/tmp/build-mpich}
die() { echo "check-mpich: $*" >&2; exit 1; }
[ -x /usr/bin/mpicxx.mpich ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q mpich libmpich-dev >/dev/null
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
  -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >/dev/null
grep -q "^MPI_CXX_LIB_NAMES:STRING=.*mpich" "$build/CMakeCache.txt" || die "CMake did not take MPICH"
cmake --build "$build" -j"$(nproc)" --target spool >/dev/null
ldd "$build/spool" | grep -q libmpich || die "spool is not linked with MPICH"
f=$here/../shared/fixtures/gguf/deepseek3-tiny.q8_0.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/spool" run -m "$f" --prompt-ids 1,5,9,13,2,7 -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null
for n in 2 4; do
  mpiexec.mpich -n "$n" "$build/spool" run -m "$f" --prompt-ids 1,5,9,13,2,7 -n 24 --temp 0 -t 1 --dist ep \
    >"$tmp/dist.txt" 2>"$tmp/dist.err" || { cat "$tmp/dist.err"; die "$n ranks failed"; }
  cmp -s "$tmp/one.txt" "$tmp/dist.txt" || die "$n ranks: text differs from one process"
  grep -q "dist ep: $n ranks" "$tmp/dist.err" || die "$n ranks: no traffic line"
  echo "check-mpich: $n ranks under MPICH: greedy text identical to one process"
done
