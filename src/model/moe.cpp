// Mixture-of-experts block: routing, grouping a batch's tokens by expert, and
// one SwiGLU per routed expert over all of its tokens.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "model/ops.h"

namespace spool {

MoeLayerWeights load_moe_weights(const Manifest& m, const std::string& prefix, const ModelConfig& c) {
  MoeLayerWeights w;
  if (prefix.starts_with("blk.")) w.layer = std::atoi(prefix.c_str() + 4);
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

// Expert x's SwiGLU over m contiguous input rows ([m, d]) into y ([m, d]).
void expert_swiglu(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const ExpertWeights& x,
                   const float* in, int m, float* y, MoeScratch& s) {
  {
    WeightRef gate = store.acquire(*x.gate), up = store.acquire(*x.up);
    matmul_pair(pool, gate.mat(), up.mat(), in, m, s.gate.data(), s.up.data(), s.mm);  // [m, n_ff_exp] each
  }
  ffn_activation(c, s.gate.data(), s.up.data(), (int64_t)m * c.n_ff_exp);
  WeightRef down = store.acquire(*x.down);
  matmul(pool, down.mat(), s.gate.data(), m, y, s.mm);  // [m, d]
}

// The inputs of group rows first .. first + m (their tokens' rows of xn) into to ([m, d]).
void gather_rows(const MoeScratch& s, int k, int first, int m, const float* xn, int d, float* to) {
  for (int i = 0; i < m; ++i) {
    const int token = s.group_row[first + i] / k;
    std::memcpy(to + (size_t)i * d, xn + (size_t)token * d, d * sizeof(float));
  }
}

// Adds the outputs y ([m, d]) of group rows first .. first + m, times their
// router weights, to their tokens' rows of out.
void add_weighted(const MoeScratch& s, int k, int first, int m, const float* y, int d, float* out) {
  for (int i = 0; i < m; ++i) {
    const int row = s.group_row[first + i];
    const float wt = s.weights[row];
    float* o = out + (size_t)(row / k) * d;
    const float* yi = y + (size_t)i * d;
    for (int j = 0; j < d; ++j) o[j] += wt * yi[j];
  }
}

// Expert x over its m routed rows (group_row[first .. first + m)); adds each
// result, times its router weight, to the token's row of out.
void run_expert(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const ExpertWeights& x, int first, int m,
                const float* xn, int d, float* out, MoeScratch& s) {
  gather_rows(s, c.n_expert_used, first, m, xn, d, s.xe.data());  // xe: [m, d] the routed tokens' inputs
  expert_swiglu(store, pool, c, x, s.xe.data(), m, s.ye.data(), s);
  add_weighted(s, c.n_expert_used, first, m, s.ye.data(), d, out);
}

// The routed experts with some of them in other processes: their rows go out
// first, the local experts run meanwhile, and every output is then summed in
// expert order (as run_expert does one expert at a time).
void run_experts_parallel(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& w,
                          ExpertParallel& ep, const float* xn, int d, float* out, MoeScratch& s) {
  const int n_expert = c.n_expert, k = c.n_expert_used;
  std::vector<ExpertJob> remote;
  s.out_at.assign(n_expert, 0);
  size_t n_remote = 0, n_local = 0;
  for (const ExpertJob& j : s.jobs) {
    if (s.here[j.expert]) {
      s.out_at[j.expert] = (int32_t)n_local;
      n_local += j.rows;
    } else {
      s.out_at[j.expert] = (int32_t)n_remote;
      n_remote += j.rows;
      remote.push_back(j);
    }
  }
  if (s.remote_in.size() < n_remote * d) s.remote_in.resize(n_remote * d);
  if (s.local_out.size() < n_local * d) s.local_out.resize(n_local * d);
  for (const ExpertJob& j : remote)
    gather_rows(s, k, s.group_start[j.expert], j.rows, xn, d, s.remote_in.data() + (size_t)s.out_at[j.expert] * d);
  if (!remote.empty()) ep.submit(w.layer, d, remote, s.remote_in.data());
  for (const ExpertJob& j : s.jobs) {
    if (!s.here[j.expert]) continue;
    const int first = s.group_start[j.expert], m = j.rows;
    try {
      gather_rows(s, k, first, m, xn, d, s.xe.data());
      expert_swiglu(store, pool, c, w.experts[j.expert], s.xe.data(), m,
                    s.local_out.data() + (size_t)s.out_at[j.expert] * d, s);
    } catch (ReadStalled& stalled) {
      if (!remote.empty()) ep.collect(s.remote_out);  // the other processes' answers are read either way
      for (int i = first; i < first + m; ++i) stalled.tokens.push_back(s.group_row[i] / k);
      throw;
    }
  }
  if (!remote.empty()) {
    ep.collect(s.remote_out);
    if (s.remote_out.size() < n_remote * d) throw Error("expert parallelism: fewer output rows than were sent");
  }
  for (const ExpertJob& j : s.jobs) {  // expert-id order, wherever each ran
    const float* y = (s.here[j.expert] ? s.local_out.data() : s.remote_out.data()) + (size_t)s.out_at[j.expert] * d;
    add_weighted(s, k, s.group_start[j.expert], j.rows, y, d, out);
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
                 const float* xn, float* out, int n_tokens, MoeScratch& s, ExpertParallel* ep) {
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

  // With expert parallelism, which of the selected experts run in this process.
  if (ep) {
    s.jobs.clear();
    for (int e = 0; e < n_expert; ++e)
      if (s.group_start[e + 1] > s.group_start[e]) s.jobs.push_back({e, s.group_start[e + 1] - s.group_start[e]});
    ep->place(w.layer, s.jobs, s.job_here);
    if (s.job_here.size() != s.jobs.size()) throw Error("expert parallelism: a placement of the wrong size");
    s.here.assign(n_expert, 0);
    for (size_t i = 0; i < s.jobs.size(); ++i) s.here[s.jobs[i].expert] = s.job_here[i];
  }

  // The union of the batch's experts is known now: tell the store before computing.
  std::vector<const TensorEntry*> needed;
  for (int e = 0; e < n_expert; ++e)
    if (s.group_start[e + 1] > s.group_start[e] && (!ep || s.here[e]))
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
  if (ep) {
    run_experts_parallel(store, pool, c, w, *ep, xe, d, ye, s);
  } else {
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

void run_routed_experts(WeightStore& store, ThreadPool& pool, const ModelConfig& c, const MoeLayerWeights& w,
                        const std::vector<ExpertJob>& jobs, const float* input, int width, float* output,
                        MoeScratch& s) {
  int most = 0;
  std::vector<const TensorEntry*> needed;
  for (const ExpertJob& j : jobs) {
    if (j.expert < 0 || j.expert >= c.n_expert || j.rows <= 0)
      throw Error("expert parallelism: no expert " + std::to_string(j.expert) + " with " + std::to_string(j.rows) +
                  " rows in layer " + std::to_string(w.layer));
    most = std::max(most, j.rows);
    needed.insert(needed.end(), {w.experts[j.expert].gate, w.experts[j.expert].up, w.experts[j.expert].down});
  }
  if (s.gate.size() < (size_t)most * c.n_ff_exp) s.gate.resize((size_t)most * c.n_ff_exp);
  if (s.up.size() < (size_t)most * c.n_ff_exp) s.up.resize((size_t)most * c.n_ff_exp);
  store.will_use_experts_of(w.layer);
  store.prefetch(needed);
  size_t at = 0;
  for (const ExpertJob& j : jobs) {
    expert_swiglu(store, pool, c, w.experts[j.expert], input + at * width, j.rows, output + at * width, s);
    at += j.rows;
  }
}

}  // namespace spool
