// Weight lookup and the shared blocks of llama-family decoders.
#include "model/llama_family.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/ops.h"

namespace spool {

LlamaWeights load_llama_weights(const Manifest& m, const ModelConfig& c, bool layers) {
  LlamaWeights w;
  w.token_embd = &expect_tensor(m, "token_embd.weight", {c.n_embd, c.n_vocab});
  w.output_norm = &expect_tensor(m, "output_norm.weight", {c.n_embd});
  w.output = optional_tensor(m, "output.weight", {c.n_embd, c.n_vocab});
  if (!w.output) w.output = w.token_embd;  // tied embeddings
  w.rope_freqs = optional_tensor(m, "rope_freqs.weight", {c.rope.n_dims / 2});
  for (int l = 0; l < (layers ? c.n_layer : 0); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights L;
    L.attn_norm = &expect_tensor(m, p + "attn_norm.weight", {c.n_embd});
    L.wq = &expect_tensor(m, p + "attn_q.weight", {c.n_embd, c.q_dim()});
    L.wk = &expect_tensor(m, p + "attn_k.weight", {c.n_embd, c.k_dim()});
    L.wv = &expect_tensor(m, p + "attn_v.weight", {c.n_embd, c.v_dim()});
    L.bq = optional_tensor(m, p + "attn_q.bias", {c.q_dim()});
    L.bk = optional_tensor(m, p + "attn_k.bias", {c.k_dim()});
    L.bv = optional_tensor(m, p + "attn_v.bias", {c.v_dim()});
    L.q_norm = optional_tensor(m, p + "attn_q_norm.weight", {c.head_dim_k});
    L.k_norm = optional_tensor(m, p + "attn_k_norm.weight", {c.head_dim_k});
    L.wo = &expect_tensor(m, p + "attn_output.weight", {c.n_head * c.head_dim_v, c.n_embd});
    L.ffn_norm = &expect_tensor(m, p + "ffn_norm.weight", {c.n_embd});
    if (c.is_moe_layer(l)) {
      L.moe = load_moe_weights(m, p, c);
    } else {
      if (m.find(p + "ffn_gate_inp.weight"))
        throw Error("layer " + std::to_string(l) + " has an expert router (" + p +
                    "ffn_gate_inp.weight) but the model metadata makes it a dense layer");
      L.ffn_gate = &expect_tensor(m, p + "ffn_gate.weight", {c.n_embd, c.n_ff});
      L.ffn_up = &expect_tensor(m, p + "ffn_up.weight", {c.n_embd, c.n_ff});
      L.ffn_down = &expect_tensor(m, p + "ffn_down.weight", {c.n_ff, c.n_embd});
    }
    for (const TensorEntry* t : {L.attn_norm, L.ffn_norm, L.bq, L.bk, L.bv, L.q_norm, L.k_norm})
      if (t && t->type != DType::F32)
        throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
    w.layers.push_back(L);
  }
  if (w.output_norm->type != DType::F32) throw Error("tensor 'output_norm.weight' must be F32");
  return w;
}

void LlamaScratch::resize(const ModelConfig& c, int n) {
  auto grow = [](std::vector<float>& v, size_t size) { if (v.size() < size) v.resize(size); };
  grow(x, (size_t)n * c.n_embd);
  grow(xn, (size_t)n * c.n_embd);
  grow(q, (size_t)n * c.q_dim());
  grow(k, (size_t)n * c.k_dim());
  grow(v, (size_t)n * c.v_dim());
  grow(att, (size_t)n * c.n_head * c.head_dim_v);
  grow(gate, (size_t)n * c.n_ff);
  grow(up, (size_t)n * c.n_ff);
  grow(out, (size_t)n * c.n_embd);
}

LlamaFamilyModel::LlamaFamilyModel(ModelParts parts, RopeStyle style, OwnLayers) : Model(std::move(parts)) {
  const Manifest& m = parts_.weights->manifest();
  const TensorEntry& embd = m.require("token_embd.weight");
  if (embd.shape.size() != 2) throw Error("tensor 'token_embd.weight' must be 2-D, is " + embd.shape_string());
  config_ = read_config(parts_.file, (int)embd.shape[1], style);
  if (config_.n_vocab != tokenizer().n_vocab())
    throw Error("token_embd.weight has " + std::to_string(config_.n_vocab) + " rows but the tokenizer has " +
                std::to_string(tokenizer().n_vocab()) + " tokens");
  w_ = load_llama_weights(m, config_, false);
  if (w_.rope_freqs) {
    WeightRef rf = weights().acquire(*w_.rope_freqs);
    rope_freqs_.assign(rf.f32(), rf.f32() + config_.rope.n_dims / 2);
  }
}

LlamaFamilyModel::LlamaFamilyModel(ModelParts parts, RopeStyle style)
    : LlamaFamilyModel(std::move(parts), style, OwnLayers{}) {
  w_ = load_llama_weights(weights().manifest(), config_);
  std::vector<const TensorEntry*> mats = {w_.output};  // every matmul weight, for packing
  for (const LlamaLayerWeights& L : w_.layers) {
    mats.insert(mats.end(), {L.wq, L.wk, L.wv, L.wo});
    if (L.has_experts()) {
      const std::vector<const TensorEntry*> experts = moe_matmul_weights(L.moe);
      mats.insert(mats.end(), experts.begin(), experts.end());
    } else {
      mats.insert(mats.end(), {L.ffn_gate, L.ffn_up, L.ffn_down});
    }
  }
  weights().prepare_matmul_weights(mats, &pool());
}

void LlamaFamilyModel::embed(const Batch& batch, float* x) {
  WeightRef e = weights().acquire(*w_.token_embd);
  const MatView mv = e.mat();
  for (int t = 0; t < batch.size(); ++t) {
    const int32_t tok = batch.tokens[t];
    if (tok < 0 || tok >= config_.n_vocab)
      throw Error("token id " + std::to_string(tok) + " is out of range (vocab " + std::to_string(config_.n_vocab) + ")");
    get_row(mv, tok, x + (size_t)t * config_.n_embd);
  }
}

void LlamaFamilyModel::norm(const TensorEntry& w, const float* x, float* out, int n_tokens) {
  WeightRef r = weights().acquire(w);
  rms_norm(x, r.f32(), out, n_tokens, config_.n_embd, config_.rms_eps);
}

void LlamaFamilyModel::linear(const TensorEntry& w, const float* x, float* y, int n_tokens) {
  WeightRef r = weights().acquire(w);
  matmul(pool(), r.mat(), x, n_tokens, y, s_.mm);
}

void LlamaFamilyModel::linear_bias(const TensorEntry& w, const TensorEntry* b, const float* x, float* y,
                                   int n_tokens) {
  linear(w, x, y, n_tokens);
  if (b) {
    WeightRef rb = weights().acquire(*b);
    add_bias(y, rb.f32(), n_tokens, (int)b->shape[0]);
  }
}

void LlamaFamilyModel::linear_many(std::initializer_list<const TensorEntry*> w, std::initializer_list<float*> y,
                                   const float* x, int n_tokens) {
  SPOOL_CHECK(w.size() == y.size() && w.size() <= 4);
  auto wi = w.begin();
  auto yi = y.begin();
  if (weights().streaming()) {  // one pin at a time: a streaming store may hold few tensor slots
    for (; wi != w.end(); ++wi, ++yi) linear(**wi, x, *yi, n_tokens);
    return;
  }
  std::vector<WeightRef> refs;
  refs.reserve(4);
  MatView views[4];
  const MatView* vp[4];
  float* yp[4];
  int n = 0;
  for (; wi != w.end(); ++wi, ++yi, ++n) {
    refs.push_back(weights().acquire(**wi));
    views[n] = refs.back().mat();
    vp[n] = &views[n];
    yp[n] = *yi;
  }
  matmul_many(pool(), vp, yp, n, x, n_tokens, s_.mm);
}

void LlamaFamilyModel::qkv(const LlamaLayerWeights& L, const float* xn, int n_tokens) {
  linear_many({L.wq, L.wk, L.wv}, {s_.q.data(), s_.k.data(), s_.v.data()}, xn, n_tokens);
  const TensorEntry* bias[3] = {L.bq, L.bk, L.bv};
  float* out[3] = {s_.q.data(), s_.k.data(), s_.v.data()};
  for (int i = 0; i < 3; ++i) {
    if (!bias[i]) continue;
    WeightRef rb = weights().acquire(*bias[i]);
    add_bias(out[i], rb.f32(), n_tokens, (int)bias[i]->shape[0]);
  }
}

void LlamaFamilyModel::head_norm(const TensorEntry* w, float* x, int n_tokens, int n_heads) {
  WeightRef r = weights().acquire(*w);
  rms_norm(x, r.f32(), x, (int64_t)n_tokens * n_heads, config_.head_dim_k, config_.rms_eps);
}

void LlamaFamilyModel::rope_inplace(float* x, int n_tokens, int n_heads, const Batch& batch) {
  rope(x, n_tokens, n_heads, config_.head_dim_k, batch.pos.data(), config_.rope,
       rope_freqs_.empty() ? nullptr : rope_freqs_.data());
}

void LlamaFamilyModel::ffn_swiglu(const LlamaLayerWeights& L, const float* xn, float* out, int n_tokens) {
  linear_many({L.ffn_gate, L.ffn_up}, {s_.gate.data(), s_.up.data()}, xn, n_tokens);  // both [n_tokens, n_ff]
  swiglu(s_.gate.data(), s_.up.data(), (int64_t)n_tokens * config_.n_ff);
  linear(*L.ffn_down, s_.gate.data(), out, n_tokens);  // [n_tokens, n_embd]
}

void LlamaFamilyModel::ffn_moe(const LlamaLayerWeights& L, const float* xn, float* out, int n_tokens) {
  moe_forward(weights(), pool(), config_, L.moe, xn, out, n_tokens, moe_s_, expert_parallel());  // [n_tokens, n_embd]
}

void LlamaFamilyModel::attention_block(int l, const Batch& batch, KvCache& kv, float* x, int n_tokens,
                                       QkNorm qk_norm) {
  const ModelConfig& c = config_;
  const LlamaLayerWeights& L = w_.layers[l];
  float* xn = s_.xn.data();  // [n_tokens, n_embd] normed input
  norm(*L.attn_norm, x, xn, n_tokens);
  qkv(L, xn, n_tokens);  // q: [n, n_head * head_dim], k: [n, n_head_kv * head_dim], v: [n, n_head_kv * head_dim_v]
  if (qk_norm == QkNorm::PerHead) {
    head_norm(L.q_norm, s_.q.data(), n_tokens, c.n_head);
    head_norm(L.k_norm, s_.k.data(), n_tokens, c.n_head_kv);
  }
  rope_inplace(s_.q.data(), n_tokens, c.n_head, batch);
  rope_inplace(s_.k.data(), n_tokens, c.n_head_kv, batch);
  kv_store(kv, l, batch, s_.k.data(), s_.v.data());
  attention(pool(), c, kv, l, batch, s_.q.data(), s_.att.data(), 1.0f / std::sqrt((float)c.head_dim_k));
  linear(*L.wo, s_.att.data(), s_.out.data(), n_tokens);  // [n_tokens, n_embd]
  add_inplace(x, s_.out.data(), (int64_t)n_tokens * c.n_embd);
}

void LlamaFamilyModel::ffn_block(int l, float* x, int n_tokens) {
  const LlamaLayerWeights& L = w_.layers[l];
  float* xn = s_.xn.data();  // [n_tokens, n_embd] normed input
  norm(*L.ffn_norm, x, xn, n_tokens);
  if (L.has_experts())
    ffn_moe(L, xn, s_.out.data(), n_tokens);  // [n_tokens, n_embd] top-k of the layer's experts
  else
    ffn_swiglu(L, xn, s_.out.data(), n_tokens);  // [n_tokens, n_embd]
  add_inplace(x, s_.out.data(), (int64_t)n_tokens * config_.n_embd);
}

void LlamaFamilyModel::output_logits(const Batch& batch, const float* x, float* logits) {
  // Gather the rows that want logits, then one matmul for all of them.
  const int d = config_.n_embd;
  int n_out = 0;
  for (int t = 0; t < batch.size(); ++t)
    if (batch.want_logits[t]) std::memcpy(s_.xn.data() + (size_t)n_out++ * d, x + (size_t)t * d, d * sizeof(float));
  if (n_out == 0) return;
  norm(*w_.output_norm, s_.xn.data(), s_.xn.data(), n_out);  // [n_out, n_embd]
  linear(*w_.output, s_.xn.data(), logits, n_out);           // [n_out, n_vocab]
}

}  // namespace spool
