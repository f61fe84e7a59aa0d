// Loading and the shared blocks of the Kimi hybrid architectures (see kimi_common.h).
#include "model/kimi_common.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/ops.h"

namespace spool {

void KimiModelBase::load_common() {
  const Manifest& m = weights().manifest();
  const TensorEntry& embd = m.require("token_embd.weight");
  if (embd.shape.size() != 2) throw Error("tensor 'token_embd.weight' must be 2-D, is " + embd.shape_string());
  config_ = read_config(file(), (int)embd.shape[1], RopeStyle::Normal);
  ModelConfig& c = config_;
  const std::string a = c.arch + ".";
  if (!c.mla.enabled()) throw Error(c.arch + " model has no attention.kv_lora_rank in its metadata");
  c.mla.nope = true;  // Kimi's MLA layers use no rotary embedding
  c.kda.n_head = c.n_head;
  c.kda.head_dim = (int)file().get_int(a + "kda.head_dim");
  c.kda.conv_kernel = (int)file().get_int(a + "ssm.conv_kernel");
  c.kda.gate_lower_bound = (float)file().get_float(a + "kda.gate_lower_bound", 0.0);
  // K3: latent experts and the situ activation (absent in Kimi Linear).
  c.n_embd_exp = (int)file().get_int(a + "expert_latent_length", 0);
  c.situ_beta = (float)file().get_float(a + "activation.situ_beta", 0.0);
  c.situ_linear_beta = (float)file().get_float(a + "activation.situ_linear_beta", 0.0);
  if (c.situ_beta < 0.0f || (c.situ_beta > 0.0f && c.situ_linear_beta <= 0.0f))
    throw Error("model metadata: activation.situ_beta and situ_linear_beta must both be positive");
  if (c.kda.head_dim <= 0 || c.kda.conv_kernel < 1)
    throw Error("model metadata: kda.head_dim and ssm.conv_kernel must be positive");
  if (c.layer_recurrent.empty()) c.layer_recurrent.assign(c.n_layer, 0);
  c.recurrent.conv_floats.assign(c.n_layer, 0);
  c.recurrent.ssm_floats.assign(c.n_layer, 0);
  for (int l = 0; l < c.n_layer; ++l)
    if (c.is_recurrent_layer(l)) {
      c.recurrent.conv_floats[l] = kda_conv_floats(c);
      c.recurrent.ssm_floats[l] = kda_ssm_floats(c);
    }
  if (c.n_vocab != tokenizer().n_vocab())
    throw Error("token_embd.weight has " + std::to_string(c.n_vocab) + " rows but the tokenizer has " +
                std::to_string(tokenizer().n_vocab()) + " tokens");

  token_embd_ = &embd;
  output_norm_ = &expect_tensor(m, "output_norm.weight", {c.n_embd});
  output_ = optional_tensor(m, "output.weight", {c.n_embd, c.n_vocab});
  if (!output_) output_ = token_embd_;
  if (output_norm_->type != DType::F32) throw Error("tensor 'output_norm.weight' must be F32");
  mats_ = {output_};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    KimiLayer L;
    L.attn_norm = &expect_tensor(m, p + "attn_norm.weight", {c.n_embd});
    L.ffn_norm = &expect_tensor(m, p + "ffn_norm.weight", {c.n_embd});
    if (c.is_recurrent_layer(l)) {
      L.kda = load_kda_weights(m, p, c);
      const auto w = kda_matmul_weights(L.kda);
      mats_.insert(mats_.end(), w.begin(), w.end());
    } else {
      L.mla = load_mla_weights(m, p, c);
      for (const TensorEntry* t : {L.mla.q, L.mla.q_a, L.mla.q_b, L.mla.kv_a, L.mla.wo})
        if (t) mats_.push_back(t);
    }
    if (c.is_moe_layer(l)) {
      L.moe = load_moe_weights(m, p, c);
      const auto w = moe_matmul_weights(L.moe);
      mats_.insert(mats_.end(), w.begin(), w.end());
    } else {
      L.ffn_gate = &expect_tensor(m, p + "ffn_gate.weight", {c.n_embd, c.n_ff});
      L.ffn_up = &expect_tensor(m, p + "ffn_up.weight", {c.n_embd, c.n_ff});
      L.ffn_down = &expect_tensor(m, p + "ffn_down.weight", {c.n_ff, c.n_embd});
      mats_.insert(mats_.end(), {L.ffn_gate, L.ffn_up, L.ffn_down});
    }
    for (const TensorEntry* t : {L.attn_norm, L.ffn_norm})
      if (t->type != DType::F32) throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
    layers_.push_back(L);
  }
}

void KimiModelBase::check_recurrent_positions(const Batch& batch, KvCache& kv) const {
  const RecurrentState* st = kv.recurrent();
  if (!st) return;
  std::map<int, int> next;  // seq -> the position its next token must have
  for (int t = 0; t < batch.size(); ++t) {
    const int seq = batch.seq[t];
    auto it = next.find(seq);
    if (it == next.end()) it = next.emplace(seq, st->n_tokens(seq)).first;
    if (batch.pos[t] != it->second)
      throw Error("sequence " + std::to_string(seq) + ": position " + std::to_string(batch.pos[t]) +
                  " does not continue its recurrent state (" + std::to_string(it->second) +
                  " expected; a linear-attention model cannot go back: clear the sequence to recompute)");
    ++it->second;
  }
}

void KimiModelBase::advance_recurrent(const Batch& batch, KvCache& kv) const {
  RecurrentState* st = kv.recurrent();
  if (!st) return;
  for (int t = 0; t < batch.size(); ++t) st->set_n_tokens(batch.seq[t], batch.pos[t] + 1);
}

void KimiModelBase::attention(int l, const Batch& batch, KvCache& kv, const float* xn, float* out) {
  if (config_.is_recurrent_layer(l))
    kda_forward(weights(), pool(), config_, layers_[l].kda, *kv.recurrent(), l, batch, xn, out, kda_s_);
  else
    mla_[l].forward(weights(), pool(), kv, config_.kv_layer(l), batch, xn, out, mla_form());
}

void KimiModelBase::feed_forward(int l, const float* xn, float* out, int n) {
  if (config_.is_moe_layer(l))
    moe_forward(weights(), pool(), config_, layers_[l].moe, xn, out, n, moe_s_, expert_parallel());  // routed + shared experts
  else
    ffn_dense(layers_[l], xn, out, n);
}

void KimiModelBase::embed(const Batch& batch, float* x) {
  WeightRef e = weights().acquire(*token_embd_);
  for (int t = 0; t < batch.size(); ++t) {
    const int32_t tok = batch.tokens[t];
    if (tok < 0 || tok >= config_.n_vocab)
      throw Error("token id " + std::to_string(tok) + " is out of range (vocab " + std::to_string(config_.n_vocab) + ")");
    get_row(e.mat(), tok, x + (size_t)t * config_.n_embd);
  }
}

void KimiModelBase::norm(const TensorEntry& w, const float* x, float* out, int n) {
  WeightRef r = weights().acquire(w);
  rms_norm(x, r.f32(), out, n, config_.n_embd, config_.rms_eps);
}

void KimiModelBase::linear(const TensorEntry& w, const float* x, float* y, int n) {
  WeightRef r = weights().acquire(w);
  matmul(pool(), r.mat(), x, n, y, mm_);
}

void KimiModelBase::ffn_dense(const KimiLayer& L, const float* xn, float* out, int n) {
  const size_t n_ff = config_.n_ff;
  if (gate_.size() < n * n_ff) gate_.resize(n * n_ff), up_.resize(n * n_ff);
  linear(*L.ffn_gate, xn, gate_.data(), n);  // [n, n_ff]
  linear(*L.ffn_up, xn, up_.data(), n);      // [n, n_ff]
  ffn_activation(config_, gate_.data(), up_.data(), (int64_t)n * n_ff);
  linear(*L.ffn_down, gate_.data(), out, n);  // [n, n_embd]
}

void KimiModelBase::output_logits(const Batch& batch, const float* x, float* logits) {
  const int d = config_.n_embd;
  int n_out = 0;
  for (int t = 0; t < batch.size(); ++t)
    if (batch.want_logits[t]) std::memcpy(xn_.data() + (size_t)n_out++ * d, x + (size_t)t * d, d * sizeof(float));
  if (n_out == 0) return;
  norm(*output_norm_, xn_.data(), xn_.data(), n_out);  // [n_out, n_embd]
  linear(*output_, xn_.data(), logits, n_out);         // [n_out, n_vocab]
}

}  // namespace spool
