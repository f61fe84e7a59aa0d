#!/usr/bin/python3
"""A trained small llama GGUF (F32) widened so that every matmul row is a
multiple of 256 (what the k-quant and IQ types' 256-weight blocks need), and
computing the same function: the embedding width and the heads are tiled T
times (a matrix reading the residual stream takes each input copy at 1/T, a
matrix writing it writes every copy, RMSNorm of T equal copies is the norm of
one, and a tiled head attends as the original), the feed-forward width is
padded with units whose gate and up rows are zero (exactly zero after any
quantization, so silu(0) * 0 adds nothing whatever their down column holds).
Quantized, the T copies of a row sit in one block and stay equal.

Issue 26 uses it on stories260K (dim 64, 8 heads, FFN 172 -> dim 256, 32 heads,
FFN 256) for the greedy-ids check against llama.cpp on a model whose logits are
decisive (random weights are not). Reads and writes with llama.cpp's gguf-py
(give its directory: it is the peer checkout's, outside this repository).

  bench/peer/tile_llama.py GGUF_PY_DIR IN.gguf OUT.gguf [T=4]   (Debian python3 with python3-numpy)
"""
import sys

sys.path.insert(0, sys.argv[1])
import numpy as np  # noqa: E402
from gguf import GGUFReader, GGUFWriter, GGUFValueType  # noqa: E402

src, dst = sys.argv[2], sys.argv[3]
T = int(sys.argv[4]) if len(sys.argv) > 4 else 4
r = GGUFReader(src)
arch = r.fields["general.architecture"].contents()
assert arch == "llama", f"a llama GGUF, not {arch}"
kv = {name: f for name, f in r.fields.items() if not name.startswith("GGUF.") and name != "general.architecture"}
get = lambda k: int(kv[f"llama.{k}"].contents())
dim, ffn, n_head, n_kv = get("embedding_length"), get("feed_forward_length"), get("attention.head_count"), \
    get("attention.head_count_kv")
ffn2 = -(-ffn // 256) * 256
assert (dim * T) % 256 == 0, f"dim {dim} x {T} is not a multiple of 256"


def tile_in(w):  # [out, in] -> [out, in * T], each copy of the input at 1/T
    return np.tile(w, (1, T)) / T


def tile_out(w):  # [out, in] -> [out * T, in], every output written T times (heads: T blocks of all heads)
    return np.tile(w, (T, 1))


def pad_rows(w, n):  # [out, in] -> [n, in], the new rows zero
    return np.concatenate([w, np.zeros((n - w.shape[0], w.shape[1]), w.dtype)], axis=0)


def pad_cols(w, n):
    return np.concatenate([w, np.zeros((w.shape[0], n - w.shape[1]), w.dtype)], axis=1)


out = GGUFWriter(dst, arch)
for name, f in kv.items():
    v = f.contents()
    if name == "llama.embedding_length":
        v = dim * T
    elif name == "llama.feed_forward_length":
        v = ffn2
    elif name in ("llama.attention.head_count", "llama.attention.head_count_kv"):
        v = v * T
    elif name == "general.name":
        v = f"{v} tiled x{T}"
    sub = f.types[-1] if f.types[0] == GGUFValueType.ARRAY else None
    out.add_key_value(name, v, f.types[0], sub_type=sub)

for t in r.tensors:
    assert t.tensor_type == 0, f"{t.name}: F32 only"
    w = np.array(t.data, dtype=np.float32)
    n = t.name
    if n == "token_embd.weight":
        w = np.tile(w, (1, T))                      # [vocab, dim * T]: the copies, not scaled
    elif n.endswith("_norm.weight"):
        w = np.tile(w, T)                           # RMSNorm of T equal copies: the same per copy
    elif n == "output.weight":
        w = tile_in(w)
    elif n.endswith(("attn_q.weight", "attn_k.weight", "attn_v.weight")):
        w = tile_out(tile_in(w))
    elif n.endswith("attn_output.weight"):
        w = tile_out(tile_in(w))
    elif n.endswith(("ffn_gate.weight", "ffn_up.weight")):
        w = pad_rows(tile_in(w), ffn2)
    elif n.endswith("ffn_down.weight"):
        w = tile_out(pad_cols(w, ffn2))
    else:
        raise SystemExit(f"tile_llama: no rule for {n}")
    out.add_tensor(n, np.ascontiguousarray(w, dtype=np.float32))

out.write_header_to_file()
out.write_kv_data_to_file()
out.write_tensors_to_file()
out.close()
print(f"tile_llama: {src} -> {dst}: dim {dim} -> {dim * T}, heads {n_head}/{n_kv} -> {n_head * T}/{n_kv * T}, "
      f"FFN {ffn} -> {ffn2}")
