#!/usr/bin/env python3
# Turns the raw outputs of bench/compare_llamacpp.sh and
# bench/perplexity_compare.sh into markdown tables and writes them into a
# marked section of docs/BENCHMARKS.md (replacing that section's old text).
# Standard library only.
import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys


def machine_info():
    model = platform.processor() or "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            model = m.group(1).strip()
    except OSError:
        pass
    return f"{model}, nproc {os.cpu_count()} ({os.uname().sysname} {os.uname().machine})"


def cpu_flags():
    """The SIMD flags that pick kernels (x86: avx2/fma/f16c/avx512*/vnni; arm: asimddp/i8mm)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")):
                flags = line.split(":", 1)[1].split()
                keep = [f for f in flags if re.match(r"(avx|fma|f16c|amx|asimd|i8mm|sve|bf16)", f)]
                return " ".join(sorted(set(keep)))
    except OSError:
        pass
    return "?"


def membw(run_dir):
    """Median GB/s of the spool_membw runs in run_dir, or None."""
    vals = []
    for f in glob.glob(os.path.join(run_dir, "membw-*.json")):
        try:
            vals.append(json.load(open(f))["read_gb_s"])
        except (OSError, ValueError, KeyError):
            pass
    return statistics.median(vals) if vals else None


def replace_section(path, marker, body):
    begin, end = f"<!-- BEGIN {marker} -->", f"<!-- END {marker} -->"
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def spool_samples(path):
    """{test: [tok/s, ...]} and extra info from one `spool bench --json` output."""
    out, info = {}, {}
    for r in json.load(open(path)):
        out.setdefault(r["test"], []).extend(r["samples"])
        info = {"isa": r.get("isa", "?"), "type": r.get("type", "?"),
                "bytes": r.get("weight_bytes_per_token", 0)}
    return out, info


def llama_samples(path):
    """{test: [tok/s, ...]} and extra info from one `llama-bench -o json` output."""
    out, info = {}, {}
    for r in json.load(open(path)):
        test = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
        out.setdefault(test, []).extend(r["samples_ts"])
        info = {"build": f"{r.get('build_commit', '?')} ({r.get('build_number', '?')})",
                "type": r.get("model_type", "?")}
    return out, info


def speed(args):
    rows, spool_info, llama_info = [], {}, {}
    bw = membw(args.run_dir)
    for t in args.types.split():
        spool, llama = {}, {}
        for f in sorted(glob.glob(os.path.join(args.run_dir, f"spool-{t}-[0-9]*.json"))):
            s, spool_info = spool_samples(f)
            for k, v in s.items():
                spool.setdefault(k, []).extend(v)
        for f in sorted(glob.glob(os.path.join(args.run_dir, f"llama-{t}-[0-9]*.json"))):
            s, llama_info = llama_samples(f)
            for k, v in s.items():
                llama.setdefault(k, []).extend(v)
        for test in sorted(set(spool) | set(llama), key=lambda x: (x[:2] != "pp", x)):
            a, b = spool.get(test, []), llama.get(test, [])
            ma = statistics.median(a) if a else float("nan")
            mb = statistics.median(b) if b else float("nan")
            share = ""
            if test.startswith("tg") and bw and spool_info.get("bytes"):
                gb = spool_info["bytes"] / 1e9
                share = f"{100 * gb * ma / bw:.0f} % / {100 * gb * mb / bw:.0f} %"
            rows.append(f"| {args.model_label} {t} | {test} | {ma:.2f} ({len(a)}) | {mb:.2f} ({len(b)}) | "
                        f"{ma / mb:.2f} | {share} |")
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load_start = open(os.path.join(args.run_dir, "load-start.txt")).read().strip() \
        if os.path.exists(os.path.join(args.run_dir, "load-start.txt")) else "?"
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    title = "spool vs llama.cpp: prefill and decode speed"
    if args.section != "speed-vs-llamacpp":
        title += f" ({args.section})"
    body = f"""## {title}

Measured {date} on {machine_info()}; CPU flags: {cpu_flags()}.
spool kernels: {spool_info.get('isa', '?')}{f" (SPOOL_ISA={args.spool_isa_env})" if args.spool_isa_env else ""};
llama.cpp build {llama_info.get('build', '?')}{f", built {args.peer_label}" if args.peer_label else ""}.
Memory read bandwidth (`spool_membw`, {args.threads} threads, median of the runs before and after):
{f"{bw:.1f} GB/s" if bw else "not measured"}; the last column is weight bytes per token x tok/s / that bandwidth
(spool / llama.cpp), the distance of decode from the memory-bound limit. Synthetic random-weight models (`spool synth --preset
{args.preset}`), {args.threads} threads, {args.rounds} rounds alternating spool and llama-bench (the first tool
alternates between rounds), {args.reps} repetitions per run after each tool's warm-up. Cells: median tok/s over all
samples (sample count). Ratio > 1 means spool is faster. llama.cpp keeps its KV cache in F16, spool in F32.
Load average (1/5/15 min) at the start: {load_start}; at the end: {load_end}. A load above the core count means
other jobs shared the CPUs and the numbers are noisy.

| model | test | spool tok/s | llama.cpp tok/s | spool / llama.cpp | share of memory bandwidth |
|---|---|---|---|---|---|
""" + "\n".join(rows) + f"""

Commands (per model, per round):

    {args.spool_cmd}
    {args.llama_cmd}

Produced by `{f"SPOOL_ISA={args.spool_isa_env} " if args.spool_isa_env else ""}SECTION={args.section} bench/compare_llamacpp.sh {args.peer}`; raw JSON in `{args.run_dir}`.
"""
    replace_section(args.out, args.section, body)
    print(body)


def ppl(args):
    rows = []
    for line in open(args.results):
        label, ours, theirs = line.split()
        a, b = float(ours), float(theirs)
        rows.append(f"| {label} | {a:.4f} | {b:.4f} | {(a - b) / b * 100:+.3f} % |")
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    body = f"""## spool vs llama.cpp: perplexity

Measured {date} on {machine_info()}. Same text (`{args.text}`), context {args.ctx}, first {args.chunks}
chunks, {args.threads} threads. stories260K is the real pretrained model; the 1.1B models are synthetic
random-weight models (perplexity near the vocabulary size is expected; what matters is that both implementations
agree). llama.cpp keeps its KV cache in F16, spool in F32.

| model | spool PPL | llama.cpp PPL | relative difference |
|---|---|---|---|
""" + "\n".join(rows) + f"""

Commands (per model):

    {args.spool_cmd}
    {args.llama_cmd}

Produced by `bench/perplexity_compare.sh {args.peer} {args.text}`.
"""
    replace_section(args.out, "perplexity-vs-llamacpp", body)
    print(body)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="mode", required=True)
    for name in ("speed", "ppl"):
        s = sub.add_parser(name)
        s.add_argument("--out", required=True)
        s.add_argument("--peer", required=True)
        s.add_argument("--threads", required=True)
        s.add_argument("--spool-cmd", required=True)
        s.add_argument("--llama-cmd", required=True)
    s = sub.choices["speed"]
    s.add_argument("--run-dir", required=True)
    s.add_argument("--types", required=True)
    s.add_argument("--preset", required=True)
    s.add_argument("--model-label", required=True)
    s.add_argument("--rounds", required=True)
    s.add_argument("--reps", required=True)
    s.add_argument("--section", default="speed-vs-llamacpp")
    s.add_argument("--peer-label", default="")
    s.add_argument("--spool-isa-env", default="")
    s = sub.choices["ppl"]
    s.add_argument("--results", required=True, help="lines: LABEL SPOOL_PPL LLAMA_PPL")
    s.add_argument("--text", required=True)
    s.add_argument("--ctx", required=True)
    s.add_argument("--chunks", required=True)
    args = p.parse_args()
    speed(args) if args.mode == "speed" else ppl(args)


if __name__ == "__main__":
    sys.exit(main())
