#!/usr/bin/env bash
# Fails when a lower layer of src/ includes a higher one (docs/ARCHITECTURE.md).
# Each folder has a rank; a file may include headers of its own folder and of
# folders of a strictly lower rank. Folders of the same rank are independent
# and may not include each other. A folder missing from the table is an error
# too, so a new folder must be placed in the order when it is added.
#   scripts/check-layers.sh [SRC_DIR]     (default: src/ next to this script)
# Registered as the ctest `layering` (label static).
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)/src}"

# Lowest first. Reasons for the less obvious places:
#  storage < format: the GGUF reader reads through Storage (files or HTTP).
#  text (tokenizers, Jinja, chat templates) reads GGUF/HF metadata, nothing of
#    weights, and sits beside weights; model owns a tokenizer, grammar masks tokens.
#  synth writes model files and uses model's router; plan (cost_plan) prices
#    synth's Kimi K3 shapes; agents run over runtime; server serves agents.
declare -A rank=(
  [core]=0
  [storage]=1
  [format]=2
  [weights]=3 [text]=3
  [model]=4 [grammar]=4
  [synth]=5 [runtime]=5
  [plan]=6 [agents]=6
  [server]=7
  [capi]=8
)

fail=0
for dir in "$src"/*/; do
  folder=$(basename "$dir")
  if [ -z "${rank[$folder]+x}" ]; then
    echo "check-layers: src/$folder is not in the layer table of $0" >&2
    fail=1
    continue
  fi
  mine=${rank[$folder]}
  # Every #include "X/..." in the folder's sources, as file:line:X.
  while IFS=: read -r file line target; do
    if [ -z "${rank[$target]+x}" ]; then
      echo "check-layers: ${file#"$src"/}:$line includes \"$target/...\", not a folder of src/" >&2
      fail=1
    elif [ "$target" != "$folder" ] && [ "${rank[$target]}" -ge "$mine" ]; then
      echo "check-layers: ${file#"$src"/}:$line: $folder (layer $mine) includes $target (layer ${rank[$target]})" >&2
      fail=1
    fi
  done < <(grep -nHoE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[A-Za-z0-9_]+/' \
             "$dir"*.h "$dir"*.cpp "$dir"*.c 2>/dev/null |
           sed -E 's#^([^:]+):([0-9]+):.*"([A-Za-z0-9_]+)/$#\1:\2:\3#' || true)
done
if [ "$fail" -ne 0 ]; then
  echo "check-layers: FAILED (the order is in $0)" >&2
  exit 1
fi
echo "check-layers: $(ls -d "$src"/*/ | wc -l) folders of src/ include only lower layers"
