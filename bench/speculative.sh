#!/usr/bin/env bash
# Speculative decoding (issue 30): what a verify step costs, what n-gram
# drafts gain on a trained model, that auto mode costs nothing where nothing
# can be predicted, and an agent pipeline's wall time. Prints markdown tables.
#
#   bench/speculative.sh [SPOOL_BIN]
#
# Parts (PARTS="verify stories random pipeline stream", default all but stream):
#   verify    spool bench --verify 4,8 on a synthetic 1.1B Q4_0 (spool synth), native ISA and SPOOL_ISA=avx2;
#             with LLAMA_BENCH=path, llama.cpp's pp5 / pp9 / tg16 on the same file for the same ratio.
#   stories   stories260K, greedy, 5 prompts x 400 tokens: --spec off / auto / on, interleaved, REPS times;
#             identical text checked; plus the upper bound with acceptance 1 (the plain run's own output given
#             as --spec-context, so every draft is right).
#   random    the synthetic 1.1B Q4_0 (random weights), greedy 64 tokens: off / auto / on, drafts offered from
#             the plain run's text with every third word replaced (--spec-context).
#   stream    the Kimi-K2-shaped streamed MoE (KIMI=path, spool synth --arch deepseek2 --preset kimi-k2-scaled)
#             under devsim 1 GiB + --read-bw 1G, cold, 16 tokens: off / auto / on, drafts as for random.
#   pipeline  planner -> 4 executors copying the plan -> summarizer on stories260K (spool agents run): wall
#             time and outputs with --spec off vs auto.
#   draft     a draft model (-md DRAFT, default stories260K) for STORIES, greedy, the stories prompts x 400
#             tokens: off / auto without a draft model / auto and on with it / on with STORIES as its own draft
#             (acceptance 1); identical text checked. Meant for STORIES = stories260K widened 32x (Q8_0), whose
#             function stories260K computes at 1/1000 of the bytes: a big model and its small sibling.
#   bigsmall  a big-planner / small-executor pipeline: planner and summarizer on STORIES, 4 executors copying the
#             plan on DRAFT (spool agents run -m big=STORIES -m small=DRAFT): wall time with --spec off, auto, and
#             auto -md DRAFT (the small model drafts for the big one); outputs checked identical.
# Environment: THREADS (2), REPS (5), DIR (/tmp/spool-bench), KIMI, LLAMA_BENCH, DEVSIM (../shared/tools/devsim), DRAFT,
# STORIES (the trained model of the stories and pipeline parts; default stories260K; e.g. stories260K widened 32x
# by bench/peer/tile_llama.py and quantized to Q8_0, the same function at a memory-bound size).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
spool="$(realpath "${1:-$here/../build/spool}")"
shared="$(realpath "$here/../../shared")"
threads="${THREADS:-2}"
reps="${REPS:-5}"
dir="${DIR:-/tmp/spool-bench}"
parts="${PARTS:-verify stories random pipeline}"
stories="${STORIES:-$shared/models/stories260K.gguf}"
sname="$(basename "$stories")"
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
isa="$(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# bench/speculative.sh — $(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, ${isa:-no AVX-512}, $threads threads"
echo

q4="$dir/q4_0-1.1b.gguf"
if [[ " $parts " == *" verify "* || " $parts " == *" random "* ]] && [ ! -f "$q4" ]; then
  "$spool" synth --preset tinyllama-1.1b --type Q4_0 -t "$threads" -o "$q4" >/dev/null 2>&1
fi

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# tok/s, drafted, accepted of a run's --stats-json
stats_line() {
  /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['generated_tokens']/s['gen_s'], s['spec']['drafted_tokens'], s['spec']['accepted_tokens'])" "$1"
}
# a text with every third word replaced: a copy with edits, for drafts that are offered and often wrong
edit_copy() { awk '{for (i = 1; i <= NF; i++) if (i % 3 == 0) $i = "zebra"; print}' "$1"; }
# rows of PREFIX.MODE for each MODE (stats_line lines), against PREFIX.off
table() {
  local prefix="$1" off_tps tps
  shift
  off_tps="$(cut -d' ' -f1 "$prefix.off" | median)"
  echo "| --spec | tok/s (median) | vs off | drafted / accepted (all runs) |"
  echo "|---|---|---|---|"
  for mode in "$@"; do
    tps="$(cut -d' ' -f1 "$prefix.$mode" | median)"
    printf '| %s | %.3f | %.3fx | %s |\n' "$mode" "$tps" "$(echo "$tps / $off_tps" | bc -l)" \
      "$(awk '{d+=$2; a+=$3} END {print d " / " a}' "$prefix.$mode")"
  done
}

if [[ " $parts " == *" verify "* ]]; then
  echo "## Verify step cost (synthetic 1.1B Q4_0, 64 positions cached, -n 32 steps, median of $reps)"
  echo
  echo "| ISA | step 1+0 (steps/s) | 1+4 / 1+0 | 1+8 / 1+0 |"
  echo "|---|---|---|---|"
  for cap in native avx2; do
    env_isa=(); [ "$cap" = avx2 ] && env_isa=(SPOOL_ISA=avx2)
    env "${env_isa[@]}" "$spool" bench -m "$q4" -t "$threads" -p 64 -n 32 -r "$reps" --verify 4,8 --json 2>/dev/null >"$tmp/v.json"
    /usr/bin/python3 - "$tmp/v.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
by = {x["rows"]: x for x in r}
print(f"| {r[0]['isa']} | {by[1]['steps_s_median']:.2f} | {by[5]['cost_ratio']:.2f}x | {by[9]['cost_ratio']:.2f}x |")
EOF
  done
  if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$q4" -t "$threads" -p 5,9 -n 16 -r "$reps" -o json 2>/dev/null >"$tmp/l.json"
    /usr/bin/python3 - "$tmp/l.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = {(x["n_prompt"], x["n_gen"]): x["avg_ts"] for x in r}
tg = t[(0, 16)]
step = lambda n: n / t[(n, 0)]
print(f"| llama.cpp (pp5, pp9 from an empty cache vs tg16) | {tg:.2f} | {step(5) * tg:.2f}x | {step(9) * tg:.2f}x |")
EOF
  fi
  echo
fi

rprompt="The quick brown fox jumps over the lazy dog."

prompts=(
  "Once upon a time, there was a little girl named Lily. She loved to play with her ball in the park."
  "Tom and his dog went to the park. They saw a big tree."
  "One day, a little bird was flying in the sky. It was a sunny day."
  "Sue had a red hat. She liked her red hat very much."
  "There was a big cat who lived in a small house."
)

if [[ " $parts " == *" stories "* ]]; then
  echo "## $sname, greedy, ${#prompts[@]} prompts x 400 tokens, n-gram drafts (--spec-max 8), median of $reps"
  echo
  for mode in off auto on bound; do : >"$tmp/tps.$mode"; done
  for r in $(seq "$reps"); do
    for i in "${!prompts[@]}"; do
      for mode in off auto on bound; do
        extra=(--spec "$mode")
        [ "$mode" = bound ] && extra=(--spec on --spec-context "$tmp/out.off.$i")
        "$spool" run -m "$stories" -p "${prompts[$i]}" -n 400 --temp 0 -t "$threads" "${extra[@]}" \
          --stats-json "$tmp/s.json" >"$tmp/out.$mode.$i" 2>/dev/null
        [ "$r" = 1 ] && [ "$mode" != off ] && ! cmp -s "$tmp/out.off.$i" "$tmp/out.$mode.$i" &&
          { echo "TEXT DIFFERS: --spec $mode, prompt $i" >&2; exit 1; }
        /usr/bin/python3 -c "import json,sys; s=json.load(open('$tmp/s.json')); print(s['generated_tokens']/s['gen_s'], s['spec']['accepted_tokens'], s['spec']['drafted_tokens'])" >>"$tmp/tps.$mode"
      done
    done
  done
  echo "| --spec | decode tok/s (median over prompts x reps) | vs off | drafted | accepted |"
  echo "|---|---|---|---|---|"
  off_tps="$(cut -d' ' -f1 "$tmp/tps.off" | median)"
  for mode in off auto on bound; do
    tps="$(cut -d' ' -f1 "$tmp/tps.$mode" | median)"
    acc="$(awk '{a+=$2; d+=$3} END {print a, d}' "$tmp/tps.$mode")"
    label="$mode"; [ "$mode" = bound ] && label="on, acceptance 1 (own output as --spec-context)"
    printf '| %s | %.0f | %.2fx | %s | %s |\n' "$label" "$tps" "$(echo "$tps / $off_tps" | bc -l)" \
      "${acc#* }" "${acc% *}"
  done
  echo
  echo "Text identical to --spec off for every prompt and mode."
  echo
fi

if [[ " $parts " == *" random "* ]]; then
  echo "## Random weights (synthetic 1.1B Q4_0), greedy 64 tokens, drafts from an edited copy, median of $reps"
  echo
  # Random weights continue nothing, so n-gram drafts are rarely on offer: each run is given the plain run's
  # text with every third word replaced as --spec-context, so drafts are offered and often wrong.
  "$spool" run -m "$q4" -p "$rprompt" -n 64 --temp 0 -t "$threads" --spec off >"$tmp/rplain" 2>/dev/null
  edit_copy "$tmp/rplain" >"$tmp/rctx"
  for mode in off auto on plain; do : >"$tmp/r.$mode"; done
  for r in $(seq "$reps"); do
    for mode in off auto on plain; do
      ctx=(--spec-context "$tmp/rctx"); spec="$mode"
      [ "$mode" = plain ] && ctx=() && spec=auto  # nothing to copy: drafts only where the text repeats itself
      "$spool" run -m "$q4" -p "$rprompt" -n 64 --temp 0 -t "$threads" --spec "$spec" "${ctx[@]}" \
        --stats-json "$tmp/s.json" >"$tmp/rout.$mode" 2>/dev/null
      stats_line "$tmp/s.json" >>"$tmp/r.$mode"
    done
    for mode in auto on plain; do
      cmp -s "$tmp/rout.off" "$tmp/rout.$mode" || { echo "TEXT DIFFERS on the random model (--spec $mode)" >&2; exit 1; }
    done
  done
  table "$tmp/r" off auto on plain
  echo "(plain: --spec auto without the edited copy, where only the text's own repetitions offer drafts)"
  echo
fi

if [[ " $parts " == *" stream "* ]]; then
  kimi="${KIMI:?set KIMI to the Kimi-K2-shaped synthetic MoE (spool synth --arch deepseek2 --preset kimi-k2-scaled)}"
  devsim="${DEVSIM:-$shared/tools/devsim}"
  echo "## Streamed Kimi-K2-shaped MoE ($(du -h "$kimi" | cut -f1)), devsim 1 GiB + --read-bw 1G, cold, 16 tokens, drafts from an edited copy"
  echo
  "$spool" run -m "$kimi" -p "$rprompt" -n 16 --temp 0 -t "$threads" --mem-budget 1G --spec off >"$tmp/kplain" 2>/dev/null
  edit_copy "$tmp/kplain" >"$tmp/kctx"
  for mode in off auto on; do : >"$tmp/k.$mode"; done
  for r in $(seq "${STREAM_REPS:-2}"); do
    for mode in off auto on; do
      "$devsim" --mem 1G --read-bw 1G --path "$kimi" --cold -- "$spool" run -m "$kimi" -p "$rprompt" -n 16 --temp 0 \
        -t "$threads" --spec "$mode" --spec-context "$tmp/kctx" --stats-json "$tmp/s.json" >"$tmp/kout.$mode" 2>/dev/null
      stats_line "$tmp/s.json" >>"$tmp/k.$mode"
    done
    for mode in auto on; do
      cmp -s "$tmp/kout.off" "$tmp/kout.$mode" || { echo "TEXT DIFFERS on the streamed MoE (--spec $mode)" >&2; exit 1; }
    done
  done
  table "$tmp/k" off auto on
  echo
fi

if [[ " $parts " == *" draft "* ]]; then
  draft="${DRAFT:-$shared/models/stories260K.gguf}"
  echo "## $sname with a draft model ($(basename "$draft")), greedy, ${#prompts[@]} prompts x 400 tokens, median of $reps"
  echo
  modes=(off ngram md-auto md-on self)
  for mode in "${modes[@]}"; do : >"$tmp/d.$mode"; done
  for r in $(seq "$reps"); do
    for i in "${!prompts[@]}"; do
      for mode in "${modes[@]}"; do
        case "$mode" in
          off) extra=(--spec off) ;;
          ngram) extra=(--spec auto) ;;
          md-auto) extra=(--spec auto -md "$draft") ;;
          md-on) extra=(--spec on -md "$draft") ;;
          self) extra=(--spec on -md "$stories") ;;
        esac
        "$spool" run -m "$stories" -p "${prompts[$i]}" -n 400 --temp 0 -t "$threads" "${extra[@]}" \
          --stats-json "$tmp/s.json" >"$tmp/dout.$mode.$i" 2>/dev/null
        [ "$r" = 1 ] && [ "$mode" != off ] && ! cmp -s "$tmp/dout.off.$i" "$tmp/dout.$mode.$i" &&
          { echo "TEXT DIFFERS: $mode, prompt $i" >&2; exit 1; }
        /usr/bin/python3 -c "import json,sys; s=json.load(open('$tmp/s.json'))['spec'], json.load(open('$tmp/s.json')); print(s[1]['generated_tokens']/s[1]['gen_s'], s[0]['drafted_tokens'], s[0]['accepted_tokens'], s[0]['model_drafted_tokens'], s[0]['model_accepted_tokens'], s[0]['draft_seconds'] / s[1]['gen_s'])" >>"$tmp/d.$mode"
      done
    done
  done
  echo "| run | decode tok/s (median) | vs off | drafted / accepted | by the draft model: drafted / accepted | time drafting |"
  echo "|---|---|---|---|---|---|"
  off_tps="$(cut -d' ' -f1 "$tmp/d.off" | median)"
  for mode in "${modes[@]}"; do
    tps="$(cut -d' ' -f1 "$tmp/d.$mode" | median)"
    case "$mode" in
      off) label="--spec off" ;;
      ngram) label="--spec auto, n-gram drafts only" ;;
      md-auto) label="--spec auto -md $(basename "$draft")" ;;
      md-on) label="--spec on -md $(basename "$draft")" ;;
      self) label="--spec on -md $sname (itself: acceptance 1)" ;;
    esac
    printf '| %s | %.1f | %.2fx | %s | %s | %s |\n' "$label" "$tps" "$(echo "$tps / $off_tps" | bc -l)" \
      "$(awk '{d+=$2; a+=$3} END {print d " / " a}' "$tmp/d.$mode")" \
      "$(awk '{d+=$4; a+=$5} END {print d " / " a}' "$tmp/d.$mode")" \
      "$(cut -d' ' -f6 "$tmp/d.$mode" | median | awk '{printf "%.0f %%", 100 * $1}')"
  done
  echo
  echo "Text identical to --spec off for every prompt and run."
  echo
fi

if [[ " $parts " == *" pipeline "* ]]; then
  cat >"$tmp/pipeline.json" <<'EOF'
{
  "name": "plan-copy-summarize",
  "task": "Lily finds a lost dog in the park and brings it home.",
  "temperature": 0,
  "max_tokens": 160,
  "agents": [
    {"name": "planner", "prompt": "Task: {task}\nWrite the story plan."},
    {"name": "one", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part one."},
    {"name": "two", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part two."},
    {"name": "three", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part three."},
    {"name": "four", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part four."},
    {"name": "summarizer", "prompt": "Results:\n{previous}\nWrite the final story."}
  ],
  "stages": ["planner", {"parallel": ["one", "two", "three", "four"]}, "summarizer"]
}
EOF
  echo "## Agent pipeline: planner -> 4 executors copying the plan -> summarizer ($sname, temperature 0, 160 tokens a step)"
  echo
  : >"$tmp/p.off"; : >"$tmp/p.auto"
  for r in $(seq "$reps"); do
    for mode in off auto; do
      t0=$(date +%s.%N)
      "$spool" agents run "$tmp/pipeline.json" -m "$stories" -t "$threads" --spec "$mode" --json >"$tmp/pout.$mode" 2>/dev/null
      t1=$(date +%s.%N)
      echo "$t1 - $t0" | bc -l >>"$tmp/p.$mode"
    done
    /usr/bin/python3 - "$tmp/pout.off" "$tmp/pout.auto" <<'EOF' || { echo "PIPELINE OUTPUTS DIFFER" >&2; exit 1; }
import json, sys
def outputs(p):
    return {e["agent"]: e["output"] for e in map(json.loads, open(p)) if e.get("type") == "output"}
a, b = outputs(sys.argv[1]), outputs(sys.argv[2])
sys.exit(0 if a == b and len(a) == 6 else 1)
EOF
  done
  off_s="$(median <"$tmp/p.off")"; auto_s="$(median <"$tmp/p.auto")"
  echo "| --spec | wall s (median of $reps) | vs off |"
  echo "|---|---|---|"
  printf '| off | %.3f | 1.00x |\n| auto | %.3f | %.2fx faster |\n' "$off_s" "$auto_s" "$(echo "$off_s / $auto_s" | bc -l)"
  echo
  echo "Outputs of all six steps identical."
fi

if [[ " $parts " == *" bigsmall "* ]]; then
  draft="${DRAFT:-$shared/models/stories260K.gguf}"
  cat >"$tmp/bigsmall.json" <<'EOF'
{
  "name": "big-plan-small-exec",
  "task": "Lily finds a lost dog in the park and brings it home.",
  "temperature": 0,
  "max_tokens": 160,
  "agents": [
    {"name": "planner", "model": "big", "prompt": "Task: {task}\nWrite the story plan."},
    {"name": "one", "model": "small", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part one."},
    {"name": "two", "model": "small", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part two."},
    {"name": "three", "model": "small", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part three."},
    {"name": "four", "model": "small", "prompt": "Plan:\n{agents.planner.output}\nCopy the plan, then write part four."},
    {"name": "summarizer", "model": "big", "prompt": "Results:\n{previous}\nWrite the final story."}
  ],
  "stages": ["planner", {"parallel": ["one", "two", "three", "four"]}, "summarizer"]
}
EOF
  echo "## Big planner ($sname) / small executors ($(basename "$draft")), spool agents run, wall time, median of $reps"
  echo
  modes=(off auto md)
  for mode in "${modes[@]}"; do : >"$tmp/b.$mode"; done
  for r in $(seq "$reps"); do
    for mode in "${modes[@]}"; do
      extra=(--spec "$mode"); [ "$mode" = md ] && extra=(--spec auto -md "$draft")
      t0=$(date +%s.%N)
      "$spool" agents run "$tmp/bigsmall.json" -m big="$stories" -m small="$draft" -t "$threads" "${extra[@]}" --json \
        >"$tmp/bout.$mode" 2>/dev/null
      t1=$(date +%s.%N)
      echo "$t1 - $t0" | bc -l >>"$tmp/b.$mode"
    done
    for mode in auto md; do
      /usr/bin/python3 - "$tmp/bout.off" "$tmp/bout.$mode" <<'EOF' || { echo "PIPELINE OUTPUTS DIFFER ($mode)" >&2; exit 1; }
import json, sys
def outputs(p):
    return {e["agent"]: e["output"] for e in map(json.loads, open(p)) if e.get("type") == "output"}
a, b = outputs(sys.argv[1]), outputs(sys.argv[2])
sys.exit(0 if a == b and len(a) == 6 else 1)
EOF
    done
  done
  off_s="$(median <"$tmp/b.off")"
  echo "| --spec | wall s (median of $reps) | vs off |"
  echo "|---|---|---|"
  for mode in "${modes[@]}"; do
    t="$(median <"$tmp/b.$mode")"
    label="$mode"; [ "$mode" = md ] && label="auto -md $(basename "$draft") (the small model drafts for the big)"
    printf '| %s | %.3f | %.2fx faster |\n' "$label" "$t" "$(echo "$off_s / $t" | bc -l)"
  done
  echo
  echo "Outputs of all six steps identical."
fi
