#!/usr/bin/env bash
# Fails when a lower layer of src/ includes a higher one (docs/ARCHITECTURE.md).
# Each folder has a rank; a file may include headers of its own folder and of
# folders of a strictly lower rank. Folders of the same rank are independent
# and may not include each other. A folder missing from the table is an error
# too, so a new folder must be placed in the order when it is added.
# Subfolders (src/kernels/x86, ...) are layered the same way inside their
# folder by a second table, so that, e.g., the scalar references never reach
# into an instruction set's files and the x86 and NEON files never meet.
#   scripts/check-layers.sh [SRC_DIR]     (default: src/ next to this script)
# Registered as the ctest `layering` (label static).
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)/src}"

# Lowest first. Reasons for the less obvious places:
#  kernels (dispatch table, matmul, scalar references, SIMD) computes on
#    core's dtypes and quant blocks; storage and it know nothing of each other.
#  storage < format: the GGUF reader reads through Storage (files or HTTP).
#  text (tokenizers, Jinja, chat templates) reads GGUF/HF metadata, nothing of
#    weights, and sits beside weights; model owns a tokenizer, grammar masks tokens.
#  synth writes model files and uses model's router; plan (cost_plan) prices
#    synth's Kimi K3 shapes; agents run over runtime; server serves agents.
#  dist (expert parallelism over MPI) implements model's ExpertParallel.
declare -A rank=(
  [core]=0
  [kernels]=1 [storage]=1
  [format]=2
  [weights]=3 [text]=3
  [model]=4 [grammar]=4
  [synth]=5 [runtime]=5 [dist]=5
  [plan]=6 [agents]=6
  [server]=7
  [capi]=8
)
# Inside a folder, lowest first: the folder itself (the dispatch table, matmul
# and the ISA-independent headers), the scalar references, then one subfolder
# per instruction set family.
declare -A subrank=(
  [kernels]=0
  [kernels/ref]=1
  [kernels/x86]=2 [kernels/neon]=2
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
  # Subfolders must be placed in the second table.
  while IFS= read -r sub; do
    unit=${sub#"$src"/}
    if [ -z "${subrank[$unit]+x}" ]; then
      echo "check-layers: src/$unit is not in the subfolder table of $0" >&2
      fail=1
    fi
  done < <(find "$dir" -mindepth 1 -type d | sed 's#/$##' | sort)
  # Every #include "X/..." in the folder's sources (subfolders included), as
  # file:line:path-of-the-included-header.
  while IFS=: read -r file line target_path; do
    target=${target_path%%/*}
    if [ -z "${rank[$target]+x}" ]; then
      echo "check-layers: ${file#"$src"/}:$line includes \"$target/...\", not a folder of src/" >&2
      fail=1
    elif [ "$target" != "$folder" ] && [ "${rank[$target]}" -ge "$mine" ]; then
      echo "check-layers: ${file#"$src"/}:$line: $folder (layer $mine) includes $target (layer ${rank[$target]})" >&2
      fail=1
    elif [ "$target" = "$folder" ]; then
      # Within the folder: the including file's subfolder against the header's
      # (both are the folder itself where it has no subfolders).
      rel=${file#"$src"/}
      from=${rel%/*}
      to=${target_path%/*}
      if [ "$from" = "$to" ]; then
        :
      elif [ -z "${subrank[$from]+x}" ] || [ -z "${subrank[$to]+x}" ]; then
        missing=$to; [ -z "${subrank[$from]+x}" ] && missing=$from
        echo "check-layers: ${file#"$src"/}:$line includes \"$target_path\": src/$missing is not in the subfolder table" >&2
        fail=1
      elif [ "${subrank[$to]}" -ge "${subrank[$from]}" ]; then
        echo "check-layers: ${file#"$src"/}:$line: src/$from (sublayer ${subrank[$from]}) includes src/$to (sublayer ${subrank[$to]})" >&2
        fail=1
      fi
    fi
  done < <(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.c' \) -print0 | sort -z |
           xargs -0 grep -nHoE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[A-Za-z0-9_]+/[A-Za-z0-9_/.]+"' |
           sed -E 's#^([^:]+):([0-9]+):.*"([^"]+)"$#\1:\2:\3#' || true)
done
if [ "$fail" -ne 0 ]; then
  echo "check-layers: FAILED (the order is in $0)" >&2
  exit 1
fi
echo "check-layers: $(ls -d "$src"/*/ | wc -l) folders of src/ include only lower layers"
