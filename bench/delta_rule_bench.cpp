// Decode cost of the gated delta rule at Qwen3-Next-80B's shapes (32 value
// heads of 128 x 128 state per linear-attention layer, 16 key heads): one
// token through every head with the scalar reference (delta_rule_step) and
// with the form the models run (delta_rule_chunked, one-token chunks through
// the SIMD row kernels), alternated, medians. Also prefill: 512 tokens in
// chunks of 64 vs token by token. Prints per-token microseconds per layer.
// usage: spool_delta_rule_bench [rounds]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "model/delta_rule.h"
#include "model/delta_rule_chunked.h"

using namespace spool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const int n_v = 32, dk = 128, dv = 128, n_pre = 512;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> S((size_t)n_v * dk * dv), q((size_t)n_pre * dk), k((size_t)n_pre * dk), v((size_t)n_pre * dv),
      o((size_t)n_pre * dv), g(n_pre), beta(n_pre), decay(dk);
  for (auto* x : {&S, &q, &k, &v}) for (float& f : *x) f = nd(rng) * 0.1f;
  for (int t = 0; t < n_pre; ++t) {
    l2_normalize(q.data() + (size_t)t * dk, dk, 1e-6f);
    l2_normalize(k.data() + (size_t)t * dk, dk, 1e-6f);
    g[t] = -0.05f, beta[t] = 0.5f;
  }
  const float scale = 1.0f / std::sqrt((float)dk);
  DeltaRuleScratch scratch;
  auto rows = [&](int t0) {
    return DeltaRuleRows{q.data() + (size_t)t0 * dk, k.data() + (size_t)t0 * dk, v.data() + (size_t)t0 * dv,
                         (size_t)dk, (size_t)dk, (size_t)dv, g.data() + t0, 1, 1, beta.data() + t0, 1,
                         o.data() + (size_t)t0 * dv, (size_t)dv};
  };
  auto reference_token = [&] {
    std::fill(decay.begin(), decay.end(), std::exp(g[0]));
    for (int h = 0; h < n_v; ++h)
      delta_rule_step(S.data() + (size_t)h * dk * dv, dk, dv, q.data(), k.data(), v.data(), decay.data(), beta[0], scale, o.data());
  };
  auto fast_token = [&] {
    for (int h = 0; h < n_v; ++h) delta_rule_chunked(S.data() + (size_t)h * dk * dv, dk, dv, 1, rows(0), scale, 1, scratch);
  };
  auto prefill = [&](int chunk) {
    for (int h = 0; h < n_v; ++h) delta_rule_chunked(S.data() + (size_t)h * dk * dv, dk, dv, n_pre, rows(0), scale, chunk, scratch);
  };
  auto time_us = [](auto&& fn, int reps) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
  };
  std::vector<double> ref, fast, pre64, pre1;
  for (int r = 0; r < rounds; ++r) {  // alternate A B A B
    ref.push_back(time_us(reference_token, 20));
    fast.push_back(time_us(fast_token, 20));
    pre64.push_back(time_us([&] { prefill(64); }, 1) / n_pre);
    pre1.push_back(time_us([&] { prefill(1); }, 1) / n_pre);
  }
  auto median = [](std::vector<double> x) { std::sort(x.begin(), x.end()); return x[x.size() / 2]; };
  std::printf("isa %d, one layer (32 heads of 128x128), one thread, median of %d rounds:\n", (int)kernels().isa, rounds);
  std::printf("decode  reference delta_rule_step    %8.1f us/token\n", median(ref));
  std::printf("decode  delta_rule_chunked (chunk 1) %8.1f us/token  (%.2fx)\n", median(fast), median(ref) / median(fast));
  std::printf("prefill chunk 1                      %8.1f us/token\n", median(pre1));
  std::printf("prefill chunk 64                     %8.1f us/token  (%.2fx)\n", median(pre64), median(pre1) / median(pre64));
  return 0;
}
