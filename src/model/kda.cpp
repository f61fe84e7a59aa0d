// Kimi Delta Attention: projections, the per-sequence conv and delta-rule
// state, gates and output (see kda.h).
#include "model/kda.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/delta_rule.h"
#include "model/delta_rule_chunked.h"
#include "model/model.h"
#include "model/ops.h"

namespace spool {
namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

void require_f32(const TensorEntry* t) {
  if (t && t->type != DType::F32) throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
}

// A small F32 tensor of exactly n elements, whatever its (GGUF or HF) shape.
const TensorEntry& expect_vector(const Manifest& m, const std::string& name, int64_t n) {
  const TensorEntry& t = m.require(name);
  if (t.n_elements() != n)
    throw Error("tensor '" + name + "' has shape " + t.shape_string() + ", expected " + std::to_string(n) + " values");
  require_f32(&t);
  return t;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void linear(WeightStore& store, ThreadPool& pool, const TensorEntry& w, const float* x, int n, float* y,
            std::vector<uint8_t>& mm) {
  WeightRef r = store.acquire(w);
  matmul(pool, r.mat(), x, n, y, mm);
}

}  // namespace

KdaLayerWeights load_kda_weights(const Manifest& m, const std::string& p, const ModelConfig& c) {
  const int64_t E = c.n_embd, H = c.kda.n_head, D = c.kda.head_dim, C = H * D, K = c.kda.conv_kernel;
  KdaLayerWeights w;
  w.q = &expect_tensor(m, p + "attn_q.weight", {E, C});
  w.k = &expect_tensor(m, p + "attn_k.weight", {E, C});
  w.v = &expect_tensor(m, p + "attn_v.weight", {E, C});
  w.conv_q = &expect_tensor(m, p + "ssm_conv1d_q.weight", {K, 1, C});
  w.conv_k = &expect_tensor(m, p + "ssm_conv1d_k.weight", {K, 1, C});
  w.conv_v = &expect_tensor(m, p + "ssm_conv1d_v.weight", {K, 1, C});
  w.f_a = &expect_tensor(m, p + "ssm_f_a.weight", {E, D});
  w.f_b = &expect_tensor(m, p + "ssm_f_b.weight", {D, C});
  w.beta = &expect_tensor(m, p + "ssm_beta.weight", {E, H});
  if (m.find(p + "ssm_a")) {
    w.a = &expect_vector(m, p + "ssm_a", H);
  } else {
    w.a = &expect_vector(m, p + "ssm_a_log", H);  // HF checkpoints: A_log, negated and exponentiated here
    w.a_is_log = true;
  }
  w.dt_bias = &expect_vector(m, p + "ssm_dt.bias", C);
  if (c.kda.gate_lower_bound != 0.0f) {
    w.g = &expect_tensor(m, p + "ssm_g.weight", {E, C});
  } else {
    w.g_a = &expect_tensor(m, p + "ssm_g_a.weight", {E, D});
    w.g_b = &expect_tensor(m, p + "ssm_g_b.weight", {D, C});
  }
  w.norm = &expect_vector(m, p + "ssm_norm.weight", D);
  w.wo = &expect_tensor(m, p + "attn_output.weight", {C, E});
  for (const TensorEntry* t : {w.conv_q, w.conv_k, w.conv_v}) require_f32(t);
  return w;
}

std::vector<const TensorEntry*> kda_matmul_weights(const KdaLayerWeights& w) {
  std::vector<const TensorEntry*> out;
  for (const TensorEntry* t : {w.q, w.k, w.v, w.f_a, w.f_b, w.beta, w.g_a, w.g_b, w.g, w.wo})
    if (t) out.push_back(t);
  return out;
}

int64_t kda_conv_floats(const ModelConfig& c) { return 3ll * (c.kda.conv_kernel - 1) * c.kda.d_inner(); }
int64_t kda_ssm_floats(const ModelConfig& c) { return (int64_t)c.kda.n_head * c.kda.head_dim * c.kda.head_dim; }

void kda_forward(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const KdaLayerWeights& w,
                 RecurrentState& state, int layer, const Batch& batch, const float* xn, float* out, KdaScratch& s) {
  const int n = batch.size(), H = c.kda.n_head, D = c.kda.head_dim, C = H * D, K = c.kda.conv_kernel;
  const size_t nc = (size_t)n * C;
  grow(s.q, nc);
  grow(s.k, nc);
  grow(s.v, nc);
  grow(s.f, nc);
  grow(s.gate, nc);
  grow(s.o, nc);
  grow(s.beta, (size_t)n * H);
  grow(s.low, (size_t)n * D);
  // Projections, then each sequence's short causal conv (its history in the state) and SiLU.
  const TensorEntry* proj[3] = {w.q, w.k, w.v};
  const TensorEntry* conv[3] = {w.conv_q, w.conv_k, w.conv_v};
  float* qkv[3] = {s.q.data(), s.k.data(), s.v.data()};  // [n, d_inner] each
  const int64_t hist = (int64_t)(K - 1) * C;               // one stream's conv history
  for (int i = 0; i < 3; ++i) {
    linear(store, pool, *proj[i], xn, n, s.f.data(), s.mm);  // [n, d_inner] before the conv
    WeightRef cw = store.acquire(*conv[i]);
    for (int t = 0; t < n; ++t)
      causal_conv1d(s.f.data() + (size_t)t * C, 1, C, cw.f32(), K, state.conv(layer, batch.seq[t]) + i * hist,
                    qkv[i] + (size_t)t * C);
    for (size_t j = 0; j < nc; ++j) qkv[i][j] = qkv[i][j] * sigmoid(qkv[i][j]);
  }
  // fla's l2norm, as transformers' kimi_linear calls it: x / sqrt(sum x^2 + 1e-6). With rms_eps (1e-5)
  // there the fixture is off by 9.9e-4 instead of 8e-6; llama.cpp's x / max(|x|, rms_eps) is within 1e-5 of this.
  constexpr float kL2Eps = 1e-6f;
  for (int t = 0; t < n * H; ++t) {
    l2_normalize(s.q.data() + (size_t)t * D, D, kL2Eps);
    l2_normalize(s.k.data() + (size_t)t * D, D, kL2Eps);
  }
  // Forget gate per key channel: the log decay g (the delta rule multiplies the state by exp(g)).
  linear(store, pool, *w.f_a, xn, n, s.low.data(), s.mm);        // [n, head_dim]
  linear(store, pool, *w.f_b, s.low.data(), n, s.f.data(), s.mm);  // [n, d_inner]
  {
    WeightRef a = store.acquire(*w.a), dt = store.acquire(*w.dt_bias);
    std::vector<float> neg_a(H);  // -ssm_a = exp(A_log) > 0
    for (int h = 0; h < H; ++h) neg_a[h] = w.a_is_log ? std::exp(a.f32()[h]) : -a.f32()[h];
    const float lb = c.kda.gate_lower_bound;
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < C; ++j) {
        float& f = s.f[(size_t)t * C + j];
        const float x = f + dt.f32()[j];
        const float g = lb != 0.0f ? lb * sigmoid(neg_a[j / D] * x) : -neg_a[j / D] * softplus(x);
        f = g;
      }
  }
  linear(store, pool, *w.beta, xn, n, s.beta.data(), s.mm);  // [n, n_head]
  for (size_t j = 0; j < (size_t)n * H; ++j) s.beta[j] = sigmoid(s.beta[j]);

  // The delta rule in its chunked form over each run of one sequence's consecutive rows, heads in
  // parallel (each head's state is its own); the per-channel decay is KDA's (n_g = head_dim).
  const float scale = 1.0f / std::sqrt((float)D);
  if (s.dr.size() < (size_t)pool.size()) s.dr.resize(pool.size());
  for (int t0 = 0, t1; t0 < n; t0 = t1) {
    for (t1 = t0 + 1; t1 < n && batch.seq[t1] == batch.seq[t0];) ++t1;
    float* S = state.ssm(layer, batch.seq[t0]);  // [n_head][head_dim][head_dim]
    pool.run(H, [&](int64_t h, int thread) {
      const size_t at = (size_t)t0 * C + (size_t)h * D;
      DeltaRuleRows r;
      r.q = s.q.data() + at;
      r.k = s.k.data() + at;
      r.v = s.v.data() + at;
      r.q_stride = r.k_stride = r.v_stride = C;
      r.g = s.f.data() + at;
      r.g_stride = C;
      r.n_g = D;
      r.beta = s.beta.data() + (size_t)t0 * H + h;
      r.beta_stride = H;
      r.o = s.o.data() + at;
      r.o_stride = C;
      const int chunk = batch.stepwise(batch.seq[t0]) ? 1 : kKdaChunk;  // one-token steps: Batch::stepwise_seqs
      delta_rule_chunked(S + (size_t)h * D * D, D, D, t1 - t0, r, scale, chunk, s.dr[thread], batch.pos[t0]);
    });
  }

  // Output gate: sigmoid of a full-rank (K3) or low-rank (Kimi Linear) projection.
  if (w.g) {
    linear(store, pool, *w.g, xn, n, s.gate.data(), s.mm);  // [n, d_inner]
  } else {
    linear(store, pool, *w.g_a, xn, n, s.low.data(), s.mm);          // [n, head_dim]
    linear(store, pool, *w.g_b, s.low.data(), n, s.gate.data(), s.mm);  // [n, d_inner]
  }
  {
    WeightRef norm = store.acquire(*w.norm);
    rms_norm(s.o.data(), norm.f32(), s.o.data(), (int64_t)n * H, D, c.rms_eps);  // per head
  }
  for (size_t j = 0; j < nc; ++j) s.o[j] *= sigmoid(s.gate[j]);
  linear(store, pool, *w.wo, s.o.data(), n, out, s.mm);  // [n, n_embd]
}

}  // namespace spool
