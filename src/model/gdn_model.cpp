// Weights and blocks of the Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5-MoE).
#include "model/gdn_model.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/delta_rule.h"
#include "model/ops.h"

namespace spool {
namespace {

std::atomic<int> g_chunk_size{64};

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }

void need_f32(const TensorEntry* t) {
  if (t && t->type != DType::F32) throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
}

}  // namespace

void GatedDeltaNetModel::set_chunk_size(int n) { g_chunk_size = n < 1 ? 1 : n; }

GatedDeltaNetModel::GatedDeltaNetModel(ModelParts parts, bool v_grouped_default)
    : LlamaFamilyModel(std::move(parts), RopeStyle::Neox, OwnLayers{}) {
  ModelConfig& c = config_;
  const gguf::File& f = file();
  const std::string a = c.arch + ".";
  if (c.n_expert == 0) throw Error(c.arch + " model has no expert_count in its metadata");
  g_ = read_gdn_shape(f, c, v_grouped_default);
  n_ff_shexp_ = (int)f.get_int(a + "expert_shared_feed_forward_length", c.n_ff);
  c.n_expert_shared = 0;  // the shared expert is gated here, not summed by moe_forward

  const Manifest& m = weights().manifest();
  std::vector<const TensorEntry*> mats = {w_.output};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    GdnLayerWeights L;
    L.attn_norm = &expect_tensor(m, p + "attn_norm.weight", {c.n_embd});
    L.post_norm = optional_tensor(m, p + "post_attention_norm.weight", {c.n_embd});
    if (!L.post_norm) L.post_norm = &expect_tensor(m, p + "ffn_norm.weight", {c.n_embd});
    if (!c.is_recurrent_layer(l)) {
      L.wq = &expect_tensor(m, p + "attn_q.weight", {c.n_embd, 2 * c.q_dim()});
      L.wk = &expect_tensor(m, p + "attn_k.weight", {c.n_embd, c.k_dim()});
      L.wv = &expect_tensor(m, p + "attn_v.weight", {c.n_embd, c.v_dim()});
      L.wo = &expect_tensor(m, p + "attn_output.weight", {c.q_dim(), c.n_embd});
      L.q_norm = &expect_tensor(m, p + "attn_q_norm.weight", {c.head_dim_k});
      L.k_norm = &expect_tensor(m, p + "attn_k_norm.weight", {c.head_dim_k});
      mats.insert(mats.end(), {L.wq, L.wk, L.wv, L.wo});
    } else {
      const int qkvz = 2 * g_.key_dim() + 2 * g_.value_dim();
      L.ssm_in = optional_tensor(m, p + "ssm_in.weight", {c.n_embd, qkvz});
      if (!L.ssm_in) {
        L.qkv = &expect_tensor(m, p + "attn_qkv.weight", {c.n_embd, g_.conv_dim()});
        L.gate = &expect_tensor(m, p + "attn_gate.weight", {c.n_embd, g_.value_dim()});
        mats.insert(mats.end(), {L.qkv, L.gate});
      } else {
        mats.push_back(L.ssm_in);
      }
      L.ssm_ba = optional_tensor(m, p + "ssm_ba.weight", {c.n_embd, 2 * g_.n_v});
      if (!L.ssm_ba) {
        L.beta = &expect_tensor(m, p + "ssm_beta.weight", {c.n_embd, g_.n_v});
        L.alpha = &expect_tensor(m, p + "ssm_alpha.weight", {c.n_embd, g_.n_v});
        mats.insert(mats.end(), {L.beta, L.alpha});
      } else {
        mats.push_back(L.ssm_ba);
      }
      L.conv = &expect_tensor(m, p + "ssm_conv1d.weight", {g_.conv_k, g_.conv_dim()});
      L.dt = &expect_tensor(m, p + "ssm_dt.bias", {g_.n_v});
      L.a = &expect_tensor(m, p + "ssm_a", {g_.n_v});
      L.ssm_norm = &expect_tensor(m, p + "ssm_norm.weight", {g_.dv});
      L.ssm_out = &expect_tensor(m, p + "ssm_out.weight", {g_.value_dim(), c.n_embd});
      mats.push_back(L.ssm_out);
      for (const TensorEntry* t : {L.conv, L.dt, L.a, L.ssm_norm}) need_f32(t);
    }
    if (!c.is_moe_layer(l)) throw Error(c.arch + ": layer " + std::to_string(l) + " has no experts (dense layers are not supported)");
    L.moe = load_moe_weights(m, p, c);
    const std::vector<const TensorEntry*> experts = moe_matmul_weights(L.moe);
    mats.insert(mats.end(), experts.begin(), experts.end());
    L.sh_gate = &expect_tensor(m, p + "ffn_gate_shexp.weight", {c.n_embd, n_ff_shexp_});
    L.sh_up = &expect_tensor(m, p + "ffn_up_shexp.weight", {c.n_embd, n_ff_shexp_});
    L.sh_down = &expect_tensor(m, p + "ffn_down_shexp.weight", {n_ff_shexp_, c.n_embd});
    L.sh_gate_inp = &expect_tensor(m, p + "ffn_gate_inp_shexp.weight", {c.n_embd});
    mats.insert(mats.end(), {L.sh_gate, L.sh_up, L.sh_down});
    for (const TensorEntry* t : {L.attn_norm, L.post_norm, L.q_norm, L.k_norm, L.sh_gate_inp}) need_f32(t);
    layers_.push_back(L);
  }
  weights().prepare_matmul_weights(mats, &pool());
  dr_scratch_.resize(pool().size());
}

void GatedDeltaNetModel::grow(int n) {
  const ModelConfig& c = config_;
  s_.resize(c, n);
  auto g = [](std::vector<float>& v, size_t size) { if (v.size() < size) v.resize(size); };
  g(qg_, (size_t)n * 2 * c.q_dim());                              // [n, n_head * 2 * head_dim]
  g(gate_, (size_t)n * c.q_dim());                                // [n, n_head * head_dim]
  g(mixed_, (size_t)n * (2 * g_.key_dim() + 2 * g_.value_dim()));  // [n, conv_dim] (or the fused qkvz)
  g(z_, (size_t)n * g_.value_dim());                               // [n, value_dim]
  g(ba_, (size_t)n * 2 * g_.n_v);                                  // [n, 2 * n_v]
  g(gdecay_, (size_t)n * g_.n_v);                                  // [n, n_v] log decay
  g(beta_, (size_t)n * g_.n_v);                                    // [n, n_v]
  g(seq_in_, (size_t)n * g_.conv_dim());                           // [m, conv_dim] one sequence's rows
  g(seq_conv_, (size_t)n * g_.conv_dim());                         // [m, conv_dim]
  g(seq_o_, (size_t)n * g_.value_dim());                           // [m, value_dim]
  g(seq_g_, (size_t)n * g_.n_v);                                   // [m, n_v]
  g(seq_b_, (size_t)n * g_.n_v);                                   // [m, n_v]
  g(o_, (size_t)n * g_.value_dim());                               // [n, value_dim]
  g(sh_g_, (size_t)n * n_ff_shexp_);                               // [n, n_ff_shexp]
  g(sh_u_, (size_t)n * n_ff_shexp_);                               // [n, n_ff_shexp]
  g(sh_s_, (size_t)n * c.n_embd);                                  // [n, n_embd]
}

void GatedDeltaNetModel::attention_layer(int l, const Batch& batch, KvCache& kv, const float* xn, float* out) {
  const ModelConfig& c = config_;
  const GdnLayerWeights& L = layers_[l];
  const int n = batch.size(), hd = c.head_dim_k;
  linear_many({L.wq, L.wk, L.wv}, {qg_.data(), s_.k.data(), s_.v.data()}, xn, n);
  for (int t = 0; t < n; ++t)  // per head: q then its output gate
    for (int h = 0; h < c.n_head; ++h) {
      const float* src = qg_.data() + ((size_t)t * c.n_head + h) * 2 * hd;
      std::memcpy(s_.q.data() + ((size_t)t * c.n_head + h) * hd, src, hd * sizeof(float));
      std::memcpy(gate_.data() + ((size_t)t * c.n_head + h) * hd, src + hd, hd * sizeof(float));
    }
  head_norm(L.q_norm, s_.q.data(), n, c.n_head);
  head_norm(L.k_norm, s_.k.data(), n, c.n_head_kv);
  rope_inplace(s_.q.data(), n, c.n_head, batch);
  rope_inplace(s_.k.data(), n, c.n_head_kv, batch);
  const int kl = c.kv_layer(l);
  kv_store(kv, kl, batch, s_.k.data(), s_.v.data());
  attention(pool(), c, kv, kl, batch, s_.q.data(), s_.att.data(), 1.0f / std::sqrt((float)hd));
  const int64_t na = (int64_t)n * c.q_dim();
  for (int64_t i = 0; i < na; ++i) s_.att[i] *= sigmoid(gate_[i]);
  linear(*L.wo, s_.att.data(), out, n);
}

// mixed_ [n, conv_dim] = q k v, z_ [n, value_dim], gdecay_ / beta_ [n, n_v].
void GatedDeltaNetModel::project_gdn(const GdnLayerWeights& L, const float* xn, int n) {
  const int r = g_.n_v / g_.n_k, C = g_.conv_dim();
  if (L.ssm_in) {  // Qwen3-Next checkpoints: [q k v z] per key head
    const int per = 2 * g_.dk + 2 * r * g_.dv;
    std::vector<float>& fused = seq_conv_;  // scratch [n, n_k * per]
    if (fused.size() < (size_t)n * g_.n_k * per) fused.resize((size_t)n * g_.n_k * per);
    linear(*L.ssm_in, xn, fused.data(), n);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < g_.n_k; ++h) {
        const float* src = fused.data() + ((size_t)t * g_.n_k + h) * per;
        float* row = mixed_.data() + (size_t)t * C;
        std::memcpy(row + h * g_.dk, src, g_.dk * sizeof(float));
        std::memcpy(row + g_.key_dim() + h * g_.dk, src + g_.dk, g_.dk * sizeof(float));
        std::memcpy(row + 2 * g_.key_dim() + h * r * g_.dv, src + 2 * g_.dk, r * g_.dv * sizeof(float));
        std::memcpy(z_.data() + (size_t)t * g_.value_dim() + h * r * g_.dv, src + 2 * g_.dk + r * g_.dv,
                    r * g_.dv * sizeof(float));
      }
  } else {
    linear_many({L.qkv, L.gate}, {mixed_.data(), z_.data()}, xn, n);
  }
  float* b = beta_.data();
  float* a = gdecay_.data();
  if (L.ssm_ba) {  // [b a] per key head
    linear(*L.ssm_ba, xn, ba_.data(), n);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < g_.n_k; ++h)
        for (int i = 0; i < r; ++i) {
          b[(size_t)t * g_.n_v + h * r + i] = ba_[((size_t)t * g_.n_k + h) * 2 * r + i];
          a[(size_t)t * g_.n_v + h * r + i] = ba_[((size_t)t * g_.n_k + h) * 2 * r + r + i];
        }
  } else {
    linear_many({L.beta, L.alpha}, {b, a}, xn, n);
  }
  WeightRef dt = weights().acquire(*L.dt), A = weights().acquire(*L.a);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < g_.n_v; ++j) {
      const size_t i = (size_t)t * g_.n_v + j;
      a[i] = A.f32()[j] * softplus(a[i] + dt.f32()[j]);  // g = -exp(A_log) * softplus(a + dt_bias)
      b[i] = sigmoid(b[i]);
    }
}

// One sequence's rows of this batch through the conv and the delta rule; o_ rows filled. stepwise: the
// delta rule one token at a time (Batch::stepwise_seqs).
void GatedDeltaNetModel::run_sequence(int l, const GdnLayerWeights& L, RecurrentState& rs, int seq,
                                      const std::vector<int>& rows, bool stepwise) {
  const int m = (int)rows.size(), C = g_.conv_dim(), nv = g_.n_v, VD = g_.value_dim();
  for (int i = 0; i < m; ++i) {
    std::memcpy(seq_in_.data() + (size_t)i * C, mixed_.data() + (size_t)rows[i] * C, C * sizeof(float));
    std::memcpy(seq_g_.data() + (size_t)i * nv, gdecay_.data() + (size_t)rows[i] * nv, nv * sizeof(float));
    std::memcpy(seq_b_.data() + (size_t)i * nv, beta_.data() + (size_t)rows[i] * nv, nv * sizeof(float));
  }
  {
    WeightRef w = weights().acquire(*L.conv);
    causal_conv1d(seq_in_.data(), m, C, w.f32(), g_.conv_k, rs.conv(l, seq), seq_conv_.data());
  }
  float* x = seq_conv_.data();  // [m, conv_dim]: q (n_k heads), k (n_k heads), v (n_v heads)
  for (int64_t i = 0; i < (int64_t)m * C; ++i) x[i] = silu(x[i]);
  for (int i = 0; i < m; ++i)
    for (int h = 0; h < 2 * g_.n_k; ++h) l2_normalize(x + (size_t)i * C + h * g_.dk, g_.dk, 1e-6f);
  float* S = rs.ssm(l, seq);  // [n_v][dk][dv]
  const float scale = 1.0f / std::sqrt((float)g_.dk);
  const int chunk = stepwise ? 1 : g_chunk_size.load();
  pool().run(nv, [&](int64_t j, int thread) {
    const int kh = g_.k_head_of((int)j);
    DeltaRuleRows r;
    r.q = x + kh * g_.dk;
    r.k = x + g_.key_dim() + kh * g_.dk;
    r.v = x + 2 * g_.key_dim() + j * g_.dv;
    r.q_stride = r.k_stride = r.v_stride = C;
    r.g = seq_g_.data() + j;
    r.g_stride = nv;
    r.n_g = 1;
    r.beta = seq_b_.data() + j;
    r.beta_stride = nv;
    r.o = seq_o_.data() + j * g_.dv;
    r.o_stride = VD;
    delta_rule_chunked(S + (size_t)j * g_.dk * g_.dv, g_.dk, g_.dv, m, r, scale, chunk, dr_scratch_[thread],
                       rs.n_tokens(seq));
  });
  for (int i = 0; i < m; ++i)
    std::memcpy(o_.data() + (size_t)rows[i] * VD, seq_o_.data() + (size_t)i * VD, VD * sizeof(float));
}

void GatedDeltaNetModel::linear_attention_layer(int l, const Batch& batch, KvCache& kv, const float* xn, float* out) {
  const GdnLayerWeights& L = layers_[l];
  const int n = batch.size();
  RecurrentState* rs = kv.recurrent();
  if (!rs) throw Error(config_.arch + ": the KV cache has no recurrent state for the linear-attention layers");
  project_gdn(L, xn, n);
  // The batch's rows of each sequence, in order; they must continue its state.
  std::map<int, std::vector<int>> by_seq;
  for (int t = 0; t < n; ++t) by_seq[batch.seq[t]].push_back(t);
  for (const auto& [seq, rows] : by_seq) {
    rs->ensure(seq);
    const int have = rs->n_tokens(seq);
    for (size_t i = 0; i < rows.size(); ++i)
      if (batch.pos[rows[i]] != have + (int)i)
        throw Error("sequence " + std::to_string(seq) + ": position " + std::to_string(batch.pos[rows[i]]) +
                    " does not continue its recurrent state (" + std::to_string(have) +
                    " tokens folded in); a hybrid model cannot rewind, clear the sequence to recompute");
    run_sequence(l, L, *rs, seq, rows, batch.stepwise(seq));
  }
  // Gated RMSNorm per value head: norm(o) * w * silu(z).
  {
    WeightRef w = weights().acquire(*L.ssm_norm);
    const int64_t n_rows = (int64_t)n * g_.n_v;
    rms_norm(o_.data(), w.f32(), o_.data(), n_rows, g_.dv, config_.rms_eps);
    for (int64_t i = 0; i < n_rows * g_.dv; ++i) o_[i] *= silu(z_[i]);
  }
  linear(*L.ssm_out, o_.data(), out, n);  // [n, n_embd]
}

void GatedDeltaNetModel::advance_states(const Batch& batch, KvCache& kv) {
  RecurrentState* rs = kv.recurrent();
  if (!rs) return;
  std::map<int, int> count;
  for (int t = 0; t < batch.size(); ++t) ++count[batch.seq[t]];
  for (const auto& [seq, k] : count) rs->set_n_tokens(seq, rs->n_tokens(seq) + k);
}

void GatedDeltaNetModel::ffn(int l, const float* xn, float* out, int n) {
  const ModelConfig& c = config_;
  const GdnLayerWeights& L = layers_[l];
  moe_forward(weights(), pool(), c, L.moe, xn, out, n, moe_s_, expert_parallel());  // [n, n_embd] routed experts
  linear_many({L.sh_gate, L.sh_up}, {sh_g_.data(), sh_u_.data()}, xn, n);
  swiglu(sh_g_.data(), sh_u_.data(), (int64_t)n * n_ff_shexp_);
  linear(*L.sh_down, sh_g_.data(), sh_s_.data(), n);  // [n, n_embd] shared expert
  WeightRef gi = weights().acquire(*L.sh_gate_inp);
  for (int t = 0; t < n; ++t) {
    const float* x = xn + (size_t)t * c.n_embd;
    float dot = 0.0f;
    for (int i = 0; i < c.n_embd; ++i) dot += x[i] * gi.f32()[i];
    const float s = sigmoid(dot);
    for (int i = 0; i < c.n_embd; ++i) out[(size_t)t * c.n_embd + i] += s * sh_s_[(size_t)t * c.n_embd + i];
  }
}

}  // namespace spool
