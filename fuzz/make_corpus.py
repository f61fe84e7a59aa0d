#!/usr/bin/env python3
"""Writes the fuzz seed corpora from the shared test data (never committed in bulk).

usage: fuzz/make_corpus.py SHARED_DIR OUT_DIR [--source-dir REPO]

OUT_DIR/<target>/ gets small valid inputs of each parser's format taken from
../shared (GGUF models rewritten with tiny tensors, safetensors headers, HF
config/tokenizer files, chat templates, cases' conversations), the repo's
examples (pipeline specs) and hand-written requests and HTTP responses. The
fuzzers mutate from there; their dictionaries are in fuzz/dict/.
"""
import json
import os
import struct
import sys
from pathlib import Path

SEP = b"\n--spool-fuzz-part--\n"


def put(out: Path, target: str, name: str, data: bytes):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


# ---- GGUF: read the header and rewrite it with tiny tensors -------------------------------------------------------

def read_gguf_header(data: bytes):
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        nonlocal pos
        start = pos
        if t == 8:
            string()
        elif t == 9:
            et = take("I")
            n = take("Q")
            for _ in range(n):
                value(et)
        else:
            take(sizes[t])
        return data[start:pos]

    assert data[:4] == b"GGUF"
    pos = 4
    version = take("I")
    n_tensors = take("Q")
    n_kv = take("Q")
    kvs = []
    for _ in range(n_kv):
        key = string()
        t = take("I")
        kvs.append((key, t, value(t)))
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        shape = [take("Q") for _ in range(nd)]
        ttype = take("I")
        take("Q")
        tensors.append((name, shape, ttype))
    return version, kvs, tensors


# ggml type -> (block size, bytes per block) for the types the fixtures use
TYPE_BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144), 14: (256, 210)}


def write_gguf(version, kvs, tensors, max_vocab_bytes=None):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, t, raw in kvs:
        out += struct.pack("<Q", len(key)) + key + struct.pack("<I", t) + raw
    offset = 0
    infos = bytearray()
    for name, shape, ttype in tensors:
        bs, bb = TYPE_BLOCK.get(ttype, (1, 4))
        if ttype not in TYPE_BLOCK:
            ttype = 0
        small = [bs] + [1] * (len(shape) - 1)  # one block per tensor
        infos += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(small))
        infos += b"".join(struct.pack("<Q", d) for d in small)
        infos += struct.pack("<IQ", ttype, offset)
        offset += (bb + 31) // 32 * 32
    out += infos
    out += b"\0" * ((-len(out)) % 32)
    out += b"\0" * offset
    return bytes(out)


def gguf_seeds(shared: Path, out: Path):
    models = [shared / "models/stories260K.gguf"]
    models += sorted((shared / "fixtures/gguf").glob("*.f32.gguf"))
    models += [p for p in sorted((shared / "models/llama.cpp-vocab").glob("*.gguf")) if p.stat().st_size < 650_000]
    for p in models:
        try:
            version, kvs, tensors = read_gguf_header(p.read_bytes())
        except Exception as e:  # a file this reader does not know (v1): skip it
            print(f"skip {p.name}: {e}", file=sys.stderr)
            continue
        data = write_gguf(version, kvs, tensors)
        if len(data) <= 1_000_000:
            put(out, "gguf", p.stem, data)


# ---- safetensors: the header with a tiny data section -------------------------------------------------------------

def safetensors_seeds(shared: Path, out: Path):
    for p in sorted(shared.glob("fixtures/*/*.safetensors")):
        raw = p.read_bytes()
        (hlen,) = struct.unpack_from("<Q", raw, 0)
        header = json.loads(raw[8:8 + hlen])
        # Keep up to 6 tensors, each re-pointed at a small data section.
        small = {}
        data = bytearray()
        for name, e in list(header.items()):
            if name == "__metadata__":
                small[name] = e
                continue
            if len(small) >= 6:
                break
            size = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "F8_E4M3": 1, "I32": 4, "U8": 1}.get(e["dtype"], 4)
            shape = [2, 2] if len(e["shape"]) >= 2 else [3]
            n = size * (4 if len(shape) == 2 else 3)
            small[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [len(data), len(data) + n]}
            data += bytes(range(n))
        h = json.dumps(small).encode()
        put(out, "safetensors", f"{p.parent.name}-{p.stem}", struct.pack("<Q", len(h)) + h + bytes(data))


# ---- HF files, chat templates, requests, specs, HTTP responses ------------------------------------------------------

def hf_seeds(shared: Path, out: Path):
    for cfg in sorted(shared.glob("fixtures/*/config.json")):
        put(out, "hf_config", cfg.parent.name, cfg.read_bytes())
    seen = set()
    for tok in sorted(shared.glob("fixtures/*/tokenizer.json")):
        data = tok.read_bytes()
        tcfg = tok.parent / "tokenizer_config.json"
        if tcfg.exists():
            data += SEP + tcfg.read_bytes()
        if data in seen:
            continue
        seen.add(data)
        put(out, "hf_tokenizer", tok.parent.name, data)


def jinja_seeds(shared: Path, out: Path):
    for p in sorted(shared.glob("fixtures/*/chat_template.jinja")):
        put(out, "jinja", p.parent.name, p.read_bytes())
    for p in sorted(shared.glob("fixtures/*/tokenizer_config.json")):
        ct = json.loads(p.read_text()).get("chat_template")
        if isinstance(ct, str):
            put(out, "jinja", p.parent.name + "-config", ct.encode())
    for i, t in enumerate([
        "{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}\n{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{{ f(3) }}{{ f(2, y=5) }}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}",
        "{{ messages[0]['content'][1:5] }}{{ 'a,b'.split(',') | join('-') }}{{ range(3) | list }}{{ {'k': [1, 2.5, none]} | tojson }}",
        "{%- for m in messages -%}{%- if loop.first and m.role == 'system' -%}{{ m.content }}{%- elif m.tool_calls -%}{{ m.tool_calls[0].function.arguments | tojson }}{%- else -%}{{ raise_exception('x') if m.role == 'bad' else m.content }}{%- endif -%}{%- endfor -%}",
        "{% filter upper %}{{ bos_token }}text{% endfilter %}{% call(x) f() %}{{ x }}{% endcall %}{% raw %}{{ x }}{% endraw %}",
    ]):
        put(out, "jinja", f"hand-{i}", t.encode())


def request_seeds(out: Path):
    bodies = [
        {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0},
        {"prompt": [1, 2, 3], "stream": True, "stream_options": {"include_usage": True}, "logprobs": 2},
        {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
         "stop": ["\n", "User:"], "top_p": 0.9, "top_k": 40, "seed": 7, "max_completion_tokens": 16},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part"}]}], "logprobs": True, "top_logprobs": 3,
         "frequency_penalty": 0.5, "presence_penalty": -0.5, "repeat_penalty": 1.1, "min_p": 0.05, "ignore_eos": True},
        {"prompt": "x", "n": 1, "best_of": 1, "echo": False, "max_tokens": 0},
    ]
    for i, b in enumerate(bodies):
        put(out, "openai_request", f"body-{i}", json.dumps(b).encode())


def spec_seeds(src: Path, out: Path):
    for p in sorted((src / "examples/agents").glob("*")):
        put(out, "pipeline_spec", p.name, p.read_bytes())
    # YAML anchors, aliases and merge keys: shared settings, a cycle, nested
    # aliases that expand exponentially, and long repeated strings (issue 25).
    laughs = "a0: &a0 [lol, lol, lol, lol]\n" + "".join(
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 10))
    yaml_docs = {
        "alias-shared.yaml": "defaults: &d {temperature: 0.2, max_tokens: 8}\nagents:\n"
                             "  - {name: a, prompt: '{input}', sampling: *d}\n  - {name: b, prompt: '{a}', sampling: *d}\n",
        "alias-merge.yaml": "base: &b\n  prompt: '{input}'\nagents:\n  - <<: *b\n    name: a\n  - <<: *b\n    name: b\n",
        "alias-cycle.yaml": "a: &a [*a]\n",
        "alias-map-cycle.yaml": "agents: &x\n  - name: a\n    prompt: *x\n",
        "alias-laughs.yaml": laughs,
        "alias-long.yaml": "s: &s " + "x" * 4096 + "\nagents: [*s, *s, *s, *s, *s, *s, *s, *s]\n",
    }
    for name, text in yaml_docs.items():
        put(out, "pipeline_spec", name, text.encode())


def http_seeds(out: Path):
    def rec(tag, data):
        return bytes([tag, len(data)]) + data

    # offset 16 (3 bytes), n 31+1 (2 bytes), flags, whole-size-1 (2 bytes)
    req = bytes([16, 0, 0, 31, 0, 0, 0xff, 0x0f])
    ok = req + rec(2, b"HTTP/1.1 206 Partial Content") + rec(2, b"Content-Range: bytes 16-47/4096") + rec(2, b"") + \
        rec(1, b"a" * 20) + rec(1, b"b" * 12)
    put(out, "http_range", "partial", ok)
    probe = bytes([0, 0, 0, 0, 0, 1, 0, 0]) + rec(2, b"HTTP/1.1 206 Partial Content") + \
        rec(2, b"content-range: bytes 0-0/1234567") + rec(1, b"G")
    put(out, "http_range", "probe", probe)
    redirect = req + rec(2, b"HTTP/1.1 302 Found") + rec(2, b"Location: http://x/y") + rec(1, b"moved") + \
        rec(2, b"HTTP/1.1 503 Busy") + rec(2, b"Retry-After: 2") + rec(0xff, b"") + \
        rec(2, b"HTTP/2 206") + rec(2, b"Content-Range: bytes 16-47/*") + rec(1, b"c" * 32)
    put(out, "http_range", "redirect-retry", redirect)
    whole = bytes([0, 0, 0, 0, 0, 2, 9, 0]) + rec(2, b"HTTP/1.1 200 OK") + rec(1, b"z" * 10)
    put(out, "http_range", "whole-200", whole)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    shared, out = Path(sys.argv[1]), Path(sys.argv[2])
    src = Path(sys.argv[sys.argv.index("--source-dir") + 1]) if "--source-dir" in sys.argv else Path(__file__).parent.parent
    gguf_seeds(shared, out)
    safetensors_seeds(shared, out)
    hf_seeds(shared, out)
    jinja_seeds(shared, out)
    request_seeds(out)
    spec_seeds(src, out)
    http_seeds(out)
    for d in sorted(out.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
