#!/usr/bin/env bash
# Packs the built fuzzers for a machine without spool's packages: the
# binaries, every shared library they load (and this machine's ld-linux), the
# seed corpora, the dictionaries, stories260K.gguf (the openai_request target's
# tokenizer) and fuzz/device_run.sh, into one folder (default .devbundle-fuzz,
# git-ignored through .git/info/exclude). Run there: BUNDLE/run.sh SECONDS OUT JOBS_PER_TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FUZZ_BUILD_DIR:-build-fuzz}
D=${1:-.devbundle-fuzz}
SHARED=${SPOOL_FUZZ_SHARED:-$(cd .. && pwd)/shared}
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib" "$D/shared/models"
strip --strip-debug -o "$D/bin/spool_fuzz" "$B/fuzz/spool_fuzz"  # stack traces keep symbol names
ldd "$D/bin/spool_fuzz" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | while read -r lib; do
  [ -f "$lib" ] && cp -nL "$lib" "$D/lib/"
done
[ -d "$B/fuzz/seeds" ] || python3 fuzz/make_corpus.py "$SHARED" "$B/fuzz/seeds" >/dev/null
cp -r "$B/fuzz/seeds" "$D/seeds"
# Corpus grown by earlier runs (here or on the device) continues from where it was.
[ -d "$B/fuzz/corpus" ] && cp -r "$B/fuzz/corpus" "$D/corpus"
cp -r fuzz/dict "$D/dict"
cp "$SHARED/models/stories260K.gguf" "$D/shared/models/"
cp fuzz/device_run.sh "$D/run.sh"
du -sh "$D"
