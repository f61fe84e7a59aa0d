// The chunked gated delta rule (model/delta_rule_chunked.h) against the scalar
// recurrent reference delta_rule_step: outputs and final state, for decay per
// head (Gated DeltaNet) and per key channel (Kimi Delta Attention), chunks of
// 1, 3, 8, 16 and all tokens, with a non-zero starting state. It goes through
// the dispatched (SIMD) row kernels; scripts/test.sh also runs it under each ISA cap.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/delta_rule.h"
#include "model/delta_rule_chunked.h"

using namespace spool;

namespace {

struct Problem {
  int dk, dv, n, n_g;
  std::vector<float> q, k, v, g, beta, S0;
};

Problem make_problem(int dk, int dv, int n, int n_g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  Problem p{dk, dv, n, n_g, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<float>& x, size_t size) { x.resize(size); for (float& f : x) f = nd(rng); };
  fill(p.q, (size_t)n * dk);
  fill(p.k, (size_t)n * dk);
  fill(p.v, (size_t)n * dv);
  fill(p.S0, (size_t)dk * dv);
  for (int t = 0; t < n; ++t) {  // unit-norm q/k as the models feed them
    l2_normalize(p.q.data() + (size_t)t * dk, dk, 1e-6f);
    l2_normalize(p.k.data() + (size_t)t * dk, dk, 1e-6f);
  }
  p.g.resize((size_t)n * n_g);
  for (float& x : p.g) x = -3.0f * ud(rng);  // log decay in (-3, 0]
  p.beta.resize(n);
  for (float& b : p.beta) b = ud(rng);
  return p;
}

// The reference, token by token: outputs [n][dv] and the final state.
void reference(const Problem& p, float scale, std::vector<float>& o, std::vector<float>& S) {
  S = p.S0;
  o.assign((size_t)p.n * p.dv, 0.0f);
  std::vector<float> decay(p.dk);
  for (int t = 0; t < p.n; ++t) {
    for (int i = 0; i < p.dk; ++i) decay[i] = std::exp(p.g[(size_t)t * p.n_g + (p.n_g == 1 ? 0 : i)]);
    delta_rule_step(S.data(), p.dk, p.dv, p.q.data() + (size_t)t * p.dk, p.k.data() + (size_t)t * p.dk,
                    p.v.data() + (size_t)t * p.dv, decay.data(), p.beta[t], scale, o.data() + (size_t)t * p.dv);
  }
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class DeltaRuleChunked : public ::testing::TestWithParam<int> {};  // n_g: 1 or dk

TEST_P(DeltaRuleChunked, AgreesWithTheRecurrentReference) {
  const int dk = 16, dv = 24, n = 37;
  const Problem p = make_problem(dk, dv, n, GetParam() == 1 ? 1 : dk, 7);
  const float scale = 1.0f / std::sqrt((float)dk);
  std::vector<float> want_o, want_S;
  reference(p, scale, want_o, want_S);
  for (int chunk : {1, 3, 8, 16, n}) {
    std::vector<float> S = p.S0, o((size_t)n * dv, -1.0f);
    DeltaRuleRows r{p.q.data(), p.k.data(), p.v.data(), (size_t)dk, (size_t)dk, (size_t)dv,
                    p.g.data(), (size_t)p.n_g, p.n_g, p.beta.data(), 1, o.data(), (size_t)dv};
    DeltaRuleScratch scratch;
    delta_rule_chunked(S.data(), dk, dv, n, r, scale, chunk, scratch);
    EXPECT_LE(max_abs_diff(o, want_o), 1e-5f) << "chunk " << chunk;
    EXPECT_LE(max_abs_diff(S, want_S), 1e-5f) << "chunk " << chunk;
  }
}

// Splitting the tokens over calls (a prompt in several forward passes, then
// decode) carries the state exactly as one call does.
TEST_P(DeltaRuleChunked, StateCarriesAcrossCalls) {
  const int dk = 8, dv = 8, n = 20;
  const Problem p = make_problem(dk, dv, n, GetParam() == 1 ? 1 : dk, 11);
  std::vector<float> want_o, want_S;
  reference(p, 0.5f, want_o, want_S);
  std::vector<float> S = p.S0, o((size_t)n * dv);
  DeltaRuleScratch scratch;
  for (int t0 = 0; t0 < n;) {
    const int m = std::min(n - t0, t0 < 12 ? 5 : 1);
    DeltaRuleRows r{p.q.data() + (size_t)t0 * dk, p.k.data() + (size_t)t0 * dk, p.v.data() + (size_t)t0 * dv,
                    (size_t)dk, (size_t)dk, (size_t)dv, p.g.data() + (size_t)t0 * p.n_g, (size_t)p.n_g, p.n_g,
                    p.beta.data() + t0, 1, o.data() + (size_t)t0 * dv, (size_t)dv};
    delta_rule_chunked(S.data(), dk, dv, m, r, 0.5f, 4, scratch);
    t0 += m;
  }
  EXPECT_LE(max_abs_diff(o, want_o), 1e-5f);
  EXPECT_LE(max_abs_diff(S, want_S), 1e-5f);
}

// Chunks are aligned to absolute positions (pos0): rows split into calls at
// multiples of the chunk give bit for bit what one call gives, which is what
// lets a sequence continue from a state snapshot or a prefill split over steps.
TEST_P(DeltaRuleChunked, SplitAtChunkMultiplesIsBitwiseOneCall) {
  const int dk = 8, dv = 8, n = 45, chunk = 8;
  const Problem p = make_problem(dk, dv, n, GetParam() == 1 ? 1 : dk, 13);
  auto rows = [&](int t0, std::vector<float>& o) {
    return DeltaRuleRows{p.q.data() + (size_t)t0 * dk, p.k.data() + (size_t)t0 * dk, p.v.data() + (size_t)t0 * dv,
                         (size_t)dk, (size_t)dk, (size_t)dv, p.g.data() + (size_t)t0 * p.n_g, (size_t)p.n_g, p.n_g,
                         p.beta.data() + t0, 1, o.data() + (size_t)t0 * dv, (size_t)dv};
  };
  // One call from position 5 (first chunk 5..7), and the same rows in calls split at 16 and 40.
  const int pos = 5;
  std::vector<float> S1 = p.S0, o1((size_t)n * dv), S2 = p.S0, o2((size_t)n * dv);
  DeltaRuleScratch scratch;
  delta_rule_chunked(S1.data(), dk, dv, n, rows(0, o1), 0.5f, chunk, scratch, pos);
  const int cuts[] = {0, 16 - pos, 40 - pos, n};
  for (int i = 0; i + 1 < 4; ++i)
    delta_rule_chunked(S2.data(), dk, dv, cuts[i + 1] - cuts[i], rows(cuts[i], o2), 0.5f, chunk, scratch,
                       pos + cuts[i]);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(S1, S2);
  // Split elsewhere (not at a multiple of the chunk): the same within rounding, not necessarily bitwise.
  std::vector<float> S3 = p.S0, o3((size_t)n * dv);
  delta_rule_chunked(S3.data(), dk, dv, 10, rows(0, o3), 0.5f, chunk, scratch, pos);
  delta_rule_chunked(S3.data(), dk, dv, n - 10, rows(10, o3), 0.5f, chunk, scratch, pos + 10);
  EXPECT_LE(max_abs_diff(o3, o1), 1e-5f);
  EXPECT_LE(max_abs_diff(S3, S1), 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Decay, DeltaRuleChunked, ::testing::Values(1, 0),
                         [](const auto& info) { return info.param == 1 ? "PerHead" : "PerChannel"; });

}  // namespace
