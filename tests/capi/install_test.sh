#!/usr/bin/env bash
# The C API as a user installs and builds against it: `cmake --install` into a
# temporary prefix, then
#   - libspool.so exports spool_* symbols only (nm -D);
#   - examples/c/generate.c built with `pkg-config spool` (libspool.so) and
#     `pkg-config spool-static` (libspool.a),
#     and through find_package(spool) (examples/c/CMakeLists.txt), each prints
#     the same greedy text as `spool run --temp 0` on stories260K;
#   - examples/python/generate.py (ctypes) and examples/node/generate.mjs
#     (koffi) print that text too;
#   - tests/capi/capi_test.c built against the installed library passes.
# Usage: tests/capi/install_test.sh BUILD_DIR SHARED_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"; shared="$(cd "$2" && pwd)"
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc="$(find "$tmp/prefix" -name spool.pc)"
[ -n "$pc" ] || fail "no spool.pc installed"
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir="$(pkg-config --variable=libdir spool)"
[ -f "$libdir/libspool.so.1" ] && [ -f "$libdir/libspool.a" ] && [ -f "$tmp/prefix/include/spool.h" ] ||
  fail "libspool.so.1, libspool.a or spool.h missing under $tmp/prefix"

# Exports: the C API and nothing else.
leaked="$(nm -D --defined-only "$libdir/libspool.so.1" | awk '{print $3}' | grep -v '^spool_' || true)"
[ -z "$leaked" ] || fail "libspool.so exports symbols beyond spool_*: $(echo "$leaked" | head -5 | tr '\n' ' ')"
n_api="$(nm -D --defined-only "$libdir/libspool.so.1" | grep -c ' T spool_')"
grep '^SPOOL_API ' "$src/include/spool.h" | grep -oE 'spool_[a-z_]+\(' | tr -d '(' | sort >"$tmp/declared"
nm -D --defined-only "$libdir/libspool.so.1" | awk '{print $3}' | sort >"$tmp/exported"
diff "$tmp/declared" "$tmp/exported" >/dev/null || fail "exports differ from spool.h's declarations: $(diff "$tmp/declared" "$tmp/exported" | tr '\n' ' ')"
echo "install_test: libspool.so exports exactly the $n_api functions of spool.h"

model="$shared/models/stories260K.gguf"
prompt="Once upon a time"
expected="$prompt$("$build/spool" run -m "$model" -p "$prompt" -n 40 --temp 0 -t 2 2>/dev/null)"
check_output() {  # NAME OUTPUT
  [ "$2" = "$expected" ] || fail "$1 printed '$2', expected '$expected'"
  echo "install_test: $1: OK"
}

cflags="-std=c11 -Wall -Wextra -Werror"
cc $cflags "$src/examples/c/generate.c" $(pkg-config --cflags --libs spool) -Wl,-rpath,"$libdir" -o "$tmp/generate"
check_output "C example (pkg-config, shared)" "$("$tmp/generate" "$model" "$prompt" 40 2>/dev/null)"
# ldd's output is captured first: `ldd | grep -q` under pipefail fails at
# random when grep exits on its match and ldd dies of SIGPIPE.
ldd_out="$(ldd "$tmp/generate")"
grep -qF "$libdir/libspool.so.1" <<<"$ldd_out" || fail "the shared example does not load the installed libspool.so: $(tr "\n" " " <<<"$ldd_out")"
cc $cflags "$src/examples/c/generate.c" $(pkg-config --cflags --libs spool-static) -o "$tmp/generate_static"
ldd_out="$(ldd "$tmp/generate_static" || true)"
! grep -q libspool <<<"$ldd_out" || fail "the static example links libspool.so"
check_output "C example (pkg-config spool-static)" "$("$tmp/generate_static" "$model" "$prompt" 40 2>/dev/null)"
cmake -S "$src/examples/c" -B "$tmp/cmake-example" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-example" >/dev/null
check_output "C example (find_package)" "$("$tmp/cmake-example/generate" "$model" "$prompt" 40 2>/dev/null)"

py_out="$(python3 "$src/examples/python/generate.py" --lib "$libdir/libspool.so.1" "$model" "$prompt" 40 2>/dev/null)"
check_output "Python ctypes example" "$(head -n 1 <<<"$py_out")"
grep -q '^tokens: 1,' <<<"$py_out" || fail "Python example: no token ids with BOS: $py_out"
grep -q "^round trip: ' $prompt'" <<<"$py_out" || fail "Python example: detokenize did not round-trip: $py_out"

# Node through koffi (examples/node; npm ci installs it when missing).
if [ ! -f "$src/examples/node/node_modules/koffi/package.json" ]; then
  npm ci --prefix "$src/examples/node" --no-audit --no-fund >&2
fi
node_out="$(node "$src/examples/node/generate.mjs" --lib "$libdir/libspool.so.1" "$model" "$prompt" 40 2>/dev/null)"
check_output "Node koffi example" "$(head -n 1 <<<"$node_out")"
grep -q '^tokens: 1,' <<<"$node_out" || fail "Node example: no token ids with BOS: $node_out"

cc $cflags "$src/tests/capi/capi_test.c" $(pkg-config --cflags --libs spool) -Wl,-rpath,"$libdir" -o "$tmp/capi_test"
"$tmp/capi_test" "$shared" >/dev/null || fail "capi_test against the installed library"
echo "install_test: capi_test against the installed library: OK"
