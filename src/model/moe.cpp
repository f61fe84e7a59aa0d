// Mixture-of-experts block: routing, grouping a batch's tokens by expert, and
// one SwiGLU per routed expert over all of its tokens.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "model/ops.h"

namespace spool {

MoeLayerWeights load_moe_weights(const Manifest& m, const std::string& prefix, const ModelConfig& c) {
  MoeLayerWeights w;
  w.router = &expect_tensor(m, prefix + "ffn_gate_inp.weight", {c.n_embd, c.n_expert});
  const int64_t d = c.n_embd_exp > 0 ? c.n_embd_exp : c.n_embd;  // the experts' input and output width
  if (c.n_embd_exp > 0) {
    w.latent_down = &expect_tensor(m, prefix + "ffn_routed_down.weight", {c.n_embd, d});
    w.latent_up = &expect_tensor(m, prefix + "ffn_routed_up.weight", {d, c.n_embd});
    w.latent_norm = &expect_tensor(m, prefix + "ffn_routed_norm.weight", {d});
    if (w.latent_norm->type != DType::F32) throw Error("tensor '" + w.latent_norm->name + "' must be F32");
  }
  for (int e = 0; e < c.n_expert; ++e) {
    ExpertWeights x;
    x.gate = &expect_tensor(m, expert_slice_name(prefix + "ffn_gate_exps.weight", e), {d, c.n_ff_exp});
    x.up = &expect_tensor(m, expert_slice_name(prefix + "ffn_up_exps.weight", e), {d, c.n_ff_exp});
    x.down = &expect_tensor(m, expert_slice_name(prefix + "ffn_down_exps.weight", e), {c.n_ff_exp, d});
    w.experts.push_back(x);
  }
  w.choice_bias = optional_tensor(m, prefix + "exp_probs_b.bias", {c.n_expert});
  if (w.choice_bias && w.choice_bias->type != DType::F32) throw Error("tensor '" + w.choice_bias->name + "' must be F32");
  if (c.n_expert_shared > 0) {
    const int n_ff_sh = c.n_expert_shared * c.n_ff_exp;
    w.shared.gate = &expect_tensor(m, prefix + "ffn_gate_shexp.weight", {c.n_embd, n_ff_sh});
    w.shared.up = &expect_tensor(m, prefix + "ffn_up_shexp.weight", {c.n_embd, n_ff_sh});
    w.shared.down = &expect_tensor(m, prefix + "ffn_down_shexp.weight", {n_ff_sh, c.n_embd});
  }
  // A file with more experts than its metadata says is not the model we think it is.
  if (m.find(expert_slice_name(prefix + "ffn_gate_exps.weight", c.n_expert)))
    throw Error("layer '" + prefix + "' has more than expert_count (" + std::to_string(c.n_expert) + ") experts");
  return w;
}

std::vector<const TensorEntry*> moe_matmul_weights(const MoeLayerWeights& w) {
  std::vector<const TensorEntry*> out = {w.router};
  if (w.latent_down) out.insert(out.end(), {w.latent_down, w.latent_up});
  for (const ExpertWeights& x : w.experts) out.insert(out.end(), {x.gate, x.up, x.down});
  if (w.has_shared()) out.insert(out.end(), {w.shared.gate, w.shared.up, w.shared.down});
  return out;
}

void route_softmax_topk(const float* logits, int n_tokens, int n_expert, int k, bool renormalize, int32_t* ids,
                        float* weights) {
  std::vector<float> p(n_expert);
  std::vector<int32_t> order(n_expert);
  for (int t = 0; t < n_tokens; ++t) {
    const float* l = logits + (size_t)t * n_expert;
    const float mx = *std::max_element(l, l + n_expert);
    float sum = 0;
    for (int e = 0; e < n_expert; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (int e = 0; e < n_expert; ++e) p[e] /= sum;
    for (int e = 0; e < n_expert; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top_sum = 0;
    for (int j = 0; j < k; ++j) top_sum += p[order[j]];
    for (int j = 0; j < k; ++j) {
      ids[(size_t)t * k + j] = order[j];
      weights[(size_t)t * k + j] = renormalize ? p[order[j]] / top_sum : p[order[j]];
    }
  }
}

void ffn_activation(const ModelConfig& c, float* g, const float* u, int64_t n) {
  if (c.situ_beta <= 0.0f) return swiglu(g, u, n);
  const float b = c.situ_beta, lb = c.situ_linear_beta;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = b * std::tanh(x / b) / (1.0f + std::exp(-x)) * (lb * std::tanh(u[i] / lb));
  }
}

namespace {

// Of each token's experts, which may be chosen: all, or those of the best
// n_expert_group_used groups ranked by the sum of their two best biased scores.
void mask_expert_groups(const ModelConfig& c, const float* biased, std::vector<uint8_t>& eligible) {
  eligible.assign(c.n_expert, 1);
  if (c.n_expert_group <= 1) return;
  const int per_group = c.n_expert / c.n_expert_group;
  std::vector<float> group_score(c.n_expert_group);
  for (int g = 0; g < c.n_expert_group; ++g) {
    const float* s = biased + g * per_group;
    float best = -INFINITY, second = -INFINITY;
    for (int i = 0; i < per_group; ++i) {
      if (s[i] > best) second = best, best = s[i];
      else if (s[i] > second) second = s[i];
    }
    group_score[g] = per_group > 1 ? best + second : best;
  }
  std::vector<int> order(c.n_expert_group);
  for (int g = 0; g < c.n_expert_group; ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return group_score[a] > group_score[b]; });
  for (int j = c.n_expert_group_used; j < c.n_expert_group; ++j)
    std::fill(eligible.begin() + order[j] * per_group, eligible.begin() + (order[j] + 1) * per_group, 0);
}

}  // namespace

void route_experts(const ModelConfig& c, const float* logits, const float* choice_bias, int n_tokens, int32_t* ids,
                   float* weights) {
  const int n_expert = c.n_expert, k = c.n_expert_used;
  std::vector<float> p(n_expert), biased(n_expert);
  std::vector<int32_t> order(n_expert);
  std::vector<uint8_t> eligible;
  for (int t = 0; t < n_tokens; ++t) {
    const float* l = logits + (size_t)t * n_expert;
    if (c.expert_gating == ExpertGating::Sigmoid) {
      for (int e = 0; e < n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      const float mx = *std::max_element(l, l + n_expert);
      float sum = 0;
      for (int e = 0; e < n_expert; ++e) sum += p[e] = std::exp(l[e] - mx);
      for (int e = 0; e < n_expert; ++e) p[e] /= sum;
    }
    for (int e = 0; e < n_expert; ++e) biased[e] = p[e] + (choice_bias ? choice_bias[e] : 0.0f);
    mask_expert_groups(c, biased.data(), eligible);
    // Experts of dropped groups score 0, as transformers masks them (not -inf).
    for (int e = 0; e < n_expert; ++e)
      if (!eligible[e]) biased[e] = 0.0f;
    for (int e = 0; e < n_expert; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
    });
    float top_sum = 0;
    for (int j = 0; j < k; ++j) top_sum += p[order[j]];
    const float scale = c.expert_weights_scale / (c.expert_weights_norm ? top_sum + 1e-20f : 1.0f);
    for (int j = 0; j < k; ++j) {
      ids[(size_t)t * k + j] = order[j];
      weights[(size_t)t * k + j] = p[order[j]] * scale;
    }
  }
}

namespace {

// Counting sort of the routed (token, slot) rows by expert: expert e's rows
// are group_row[group_start[e] .. group_start[e + 1]), in token order.
void group_by_expert(const int32_t* ids, int n_rows, int n_expert, MoeScratch& s) {
  s.group_start.assign(n_expert + 1, 0);
  for (int r = 0; r < n_rows; ++r) ++s.group_start[ids[r] + 1];
  for (int e = 0; e < n_expert; ++e) s.group_start[e + 1] += s.group_start[e];
  s.group_row.resize(n_rows);
  std::vector<int32_t> fill(s.group_start.begin(), s.group_start.end() - 1);
  for (int r = 0; r < n_rows; ++r) s.group_row[fill[ids[r]]++] = r;
}

// Expert x over its m routed rows (group_row[first .. first + m)); adds each
// result, times its router weight, to the token's row of out.
void run_expert(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const ExpertWeights& x, int first, int m,
                const float* xn, int d, float* out, MoeScratch& s) {
  const int k = c.n_expert_used;
  for (int i = 0; i < m; ++i) {  // xe: [m, n_embd] the routed tokens' inputs
    const int token = s.group_row[first + i] / k;
    std::memcpy(s.xe.data() + (size_t)i * d, xn + (size_t)token * d, d * sizeof(float));
  }
  {
    WeightRef gate = store.acquire(*x.gate), up = store.acquire(*x.up);
    matmul_pair(pool, gate.mat(), up.mat(), s.xe.data(), m, s.gate.data(), s.up.data(), s.mm);  // [m, n_ff_exp] each
  }
  ffn_activation(c, s.gate.data(), s.up.data(), (int64_t)m * c.n_ff_exp);
  {
    WeightRef down = store.acquire(*x.down);
    matmul(pool, down.mat(), s.gate.data(), m, s.ye.data(), s.mm);  // [m, n_embd]
  }
  for (int i = 0; i < m; ++i) {
    const int row = s.group_row[first + i];
    const float wt = s.weights[row];
    float* o = out + (size_t)(row / k) * d;
    const float* y = s.ye.data() + (size_t)i * d;
    for (int j = 0; j < d; ++j) o[j] += wt * y[j];
  }
}

// The shared experts, one SwiGLU of n_expert_shared * n_ff_exp over every token, added to out.
void add_shared_experts(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const ExpertWeights& x,
                        const float* xn, float* out, int n_tokens, MoeScratch& s) {
  const size_t n_ff = (size_t)c.n_expert_shared * c.n_ff_exp;
  if (s.gate.size() < n_tokens * n_ff) s.gate.resize(n_tokens * n_ff);
  if (s.up.size() < n_tokens * n_ff) s.up.resize(n_tokens * n_ff);
  {
    WeightRef gate = store.acquire(*x.gate), up = store.acquire(*x.up);
    matmul_pair(pool, gate.mat(), up.mat(), xn, n_tokens, s.gate.data(), s.up.data(), s.mm);  // [n_tokens, n_ff_sh] each
  }
  ffn_activation(c, s.gate.data(), s.up.data(), (int64_t)n_tokens * n_ff);
  WeightRef down = store.acquire(*x.down);
  matmul(pool, down.mat(), s.gate.data(), n_tokens, s.ye.data(), s.mm);  // [n_tokens, n_embd]
  add_inplace(out, s.ye.data(), (int64_t)n_tokens * c.n_embd);
}

}  // namespace

void moe_forward(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& w,
                 const float* xn, float* out, int n_tokens, MoeScratch& s) {
  const int n_expert = c.n_expert, k = c.n_expert_used;
  auto grow = [](auto& v, size_t size) { if (v.size() < size) v.resize(size); };
  grow(s.logits, (size_t)n_tokens * n_expert);
  grow(s.ids, (size_t)n_tokens * k);
  grow(s.weights, (size_t)n_tokens * k);
  grow(s.xe, (size_t)n_tokens * c.n_embd);
  grow(s.ye, (size_t)n_tokens * c.n_embd);
  grow(s.gate, (size_t)n_tokens * c.n_ff_exp);
  grow(s.up, (size_t)n_tokens * c.n_ff_exp);

  {
    WeightRef router = store.acquire(*w.router);
    matmul(pool, router.mat(), xn, n_tokens, s.logits.data(), s.mm);  // [n_tokens, n_expert]
  }
  {
    WeightRef bias;
    if (w.choice_bias) bias = store.acquire(*w.choice_bias);
    route_experts(c, s.logits.data(), w.choice_bias ? bias.f32() : nullptr, n_tokens, s.ids.data(), s.weights.data());
  }
  group_by_expert(s.ids.data(), n_tokens * k, n_expert, s);

  // The union of the batch's experts is known now: tell the store before computing.
  std::vector<const TensorEntry*> needed;
  for (int e = 0; e < n_expert; ++e)
    if (s.group_start[e + 1] > s.group_start[e])
      needed.insert(needed.end(), {w.experts[e].gate, w.experts[e].up, w.experts[e].down});
  store.prefetch(needed);

  // Latent MoE: the experts run on n_embd_exp-wide rows xl = routed_down xn.
  const int d = w.latent_down ? c.n_embd_exp : c.n_embd;
  const float* xe = xn;
  float* ye = out;
  if (w.latent_down) {
    grow(s.xl, (size_t)n_tokens * d);
    grow(s.yl, (size_t)n_tokens * d);
    WeightRef down = store.acquire(*w.latent_down);
    matmul(pool, down.mat(), xn, n_tokens, s.xl.data(), s.mm);  // [n_tokens, n_embd_exp]
    xe = s.xl.data();
    ye = s.yl.data();
  }
  std::memset(ye, 0, (size_t)n_tokens * d * sizeof(float));
  for (int e = 0; e < n_expert; ++e) {
    const int first = s.group_start[e], m = s.group_start[e + 1] - first;
    if (m == 0) continue;
    try {
      run_expert(store, pool, c, w.experts[e], first, m, xe, d, ye, s);
    } catch (ReadStalled& stalled) {  // name the tokens that need this expert (the engine sets them aside)
      for (int i = first; i < first + m; ++i) stalled.tokens.push_back(s.group_row[i] / k);
      throw;
    }
  }
  if (w.latent_down) {  // out = routed_up(rmsnorm(yl) * routed_norm)
    {
      WeightRef norm = store.acquire(*w.latent_norm);
      rms_norm(s.yl.data(), norm.f32(), s.yl.data(), n_tokens, d, c.rms_eps);
    }
    WeightRef up = store.acquire(*w.latent_up);
    matmul(pool, up.mat(), s.yl.data(), n_tokens, out, s.mm);  // [n_tokens, n_embd]
  }
  if (w.has_shared()) add_shared_experts(store, pool, c, w.shared, xn, out, n_tokens, s);
}

void guess_next_experts(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& next,
                        const float* xn, int n_tokens, MoeScratch& s) {
  if (!store.wants_expert_guess()) return;
  const int n_expert = c.n_expert, k = c.n_expert_used;
  // A batch routing to more than half the experts (a prompt chunk) reads most
  // of the layer through its own prefetch anyway; guesses would only add
  // wrong reads and evict (measured at 4G with the disk capped: TTFT 11.1 s
  // guessing, 8.7 s not).
  if ((int64_t)n_tokens * k > n_expert / 2) return;
  if (s.logits.size() < (size_t)n_tokens * n_expert) s.logits.resize((size_t)n_tokens * n_expert);
  if (s.ids.size() < (size_t)n_tokens * k) s.ids.resize((size_t)n_tokens * k);
  if (s.weights.size() < (size_t)n_tokens * k) s.weights.resize((size_t)n_tokens * k);
  {
    WeightRef router = store.acquire(*next.router);
    matmul(pool, router.mat(), xn, n_tokens, s.logits.data(), s.mm);
  }
  WeightRef bias;
  if (next.choice_bias) bias = store.acquire(*next.choice_bias);
  route_experts(c, s.logits.data(), next.choice_bias ? bias.f32() : nullptr, n_tokens, s.ids.data(), s.weights.data());
  std::vector<uint8_t> seen(n_expert, 0);
  std::vector<const TensorEntry*> guess;
  for (int r = 0; r < n_tokens * k; ++r) {
    const int e = s.ids[r];
    if (seen[e]++) continue;
    guess.insert(guess.end(), {next.experts[e].gate, next.experts[e].up, next.experts[e].down});
  }
  store.guess_experts(guess);
}

}  // namespace spool
