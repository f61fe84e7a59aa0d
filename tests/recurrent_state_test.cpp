// The recurrent state store and the reference delta-rule / conv operations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/config.h"
#include "model/delta_rule.h"
#include "model/kv_cache.h"
#include "runtime/kv_paged.h"
#include "model/recurrent_state.h"

namespace spool {
namespace {

std::vector<float> randv(std::mt19937& rng, int n, float s = 1.0f) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The delta rule written with explicit matrices in double: S' = D S + k (beta (v - (D S)^T k))^T, o = scale S'^T q.
TEST(DeltaRule, StepMatchesMatrixForm) {
  std::mt19937 rng(7);
  const int dk = 5, dv = 3;
  std::vector<float> S = randv(rng, dk * dv);
  std::vector<double> Sd(S.begin(), S.end());
  for (int t = 0; t < 6; ++t) {
    auto q = randv(rng, dk), k = randv(rng, dk), v = randv(rng, dv), g = randv(rng, dk, 0.3f);
    std::vector<float> decay(dk);
    for (int i = 0; i < dk; ++i) decay[i] = std::exp(-std::fabs(g[i]));
    const float beta = 0.7f, scale = 0.5f;
    std::vector<float> o(dv);
    delta_rule_step(S.data(), dk, dv, q.data(), k.data(), v.data(), decay.data(), beta, scale, o.data());
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) Sd[i * dv + j] *= decay[i];
    std::vector<double> u(dv);
    for (int j = 0; j < dv; ++j) {
      double ks = 0;
      for (int i = 0; i < dk; ++i) ks += Sd[i * dv + j] * k[i];
      u[j] = beta * (v[j] - ks);
    }
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) Sd[i * dv + j] += k[i] * u[j];
    for (int j = 0; j < dv; ++j) {
      double oj = 0;
      for (int i = 0; i < dk; ++i) oj += Sd[i * dv + j] * q[i];
      EXPECT_NEAR(o[j], scale * oj, 1e-5) << "t=" << t << " j=" << j;
    }
    for (int i = 0; i < dk * dv; ++i) EXPECT_NEAR(S[i], Sd[i], 1e-5);
  }
}

// Convolving a sequence in one call, or token by token through the state, gives the same output.
TEST(DeltaRule, CausalConvChunkedEqualsStepwise) {
  std::mt19937 rng(3);
  const int C = 6, K = 4, n = 9;
  auto x = randv(rng, n * C), w = randv(rng, C * K);
  std::vector<float> st1((K - 1) * C, 0.0f), st2((K - 1) * C, 0.0f), o1(n * C), o2(n * C);
  causal_conv1d(x.data(), n, C, w.data(), K, st1.data(), o1.data());
  causal_conv1d(x.data(), 4, C, w.data(), K, st2.data(), o2.data());
  for (int t = 4; t < n; ++t) causal_conv1d(x.data() + t * C, 1, C, w.data(), K, st2.data(), o2.data() + t * C);
  for (int i = 0; i < n * C; ++i) EXPECT_FLOAT_EQ(o1[i], o2[i]);
  // Direct definition at the last token of channel 2.
  const int t = n - 1, c = 2;
  float want = 0;
  for (int j = 0; j < K; ++j) want += w[c * K + j] * x[(t - (K - 1) + j) * C + c];
  EXPECT_NEAR(o1[t * C + c], want, 1e-5);
  for (int i = 0; i < (K - 1) * C; ++i) EXPECT_FLOAT_EQ(st1[i], x[(n - (K - 1)) * C + i]);
}

KvShape hybrid_shape() {
  KvShape s;
  s.n_layer = 1;
  s.n_head_kv = 1;
  s.head_dim_k = 8;
  s.head_dim_v = 8;
  s.recurrent.conv_floats = {12, 0, 12};
  s.recurrent.ssm_floats = {64, 0, 64};
  return s;
}

TEST(RecurrentState, CachesAllocateOnReserveAndFreeOnClear) {
  const KvShape s = hybrid_shape();
  EXPECT_EQ(s.recurrent.bytes_per_seq(), (12 + 64) * 2 * sizeof(float));
  PagedKvCache paged(s, 4, 8, 16, 3);
  auto simple = make_simple_kv_cache(s, 16, 3);
  for (KvCache* kv : {static_cast<KvCache*>(&paged), simple.get()}) {
    ASSERT_NE(kv->recurrent(), nullptr);
    const uint64_t base = kv->bytes_allocated();
    kv->reserve(1, 5);
    EXPECT_EQ(kv->recurrent()->n_active(), 1);
    EXPECT_EQ(kv->recurrent()->bytes_allocated(), s.recurrent.bytes_per_seq());
    float* st = kv->recurrent()->ssm(2, 1);
    EXPECT_EQ(st[63], 0.0f);
    st[63] = 5.0f;
    kv->recurrent()->set_n_tokens(1, 5);
    kv->reserve(1, 6);  // a second reserve keeps the state
    EXPECT_EQ(kv->recurrent()->ssm(2, 1)[63], 5.0f);
    EXPECT_EQ(kv->recurrent()->n_tokens(1), 5);
    kv->recurrent()->copy(2, 1);
    EXPECT_EQ(kv->recurrent()->ssm(2, 2)[63], 5.0f);
    kv->clear(1);
    kv->clear(2);
    EXPECT_EQ(kv->recurrent()->n_active(), 0);
    if (kv == simple.get()) EXPECT_EQ(kv->bytes_allocated(), 0u);
    else EXPECT_EQ(kv->bytes_allocated(), base);
    kv->reserve(1, 2);  // a fresh state is zero again
    EXPECT_EQ(kv->recurrent()->ssm(2, 1)[63], 0.0f);
    EXPECT_EQ(kv->recurrent()->n_tokens(1), 0);
    EXPECT_THROW(kv->recurrent()->ensure(7), std::exception);
  }
  KvShape plain = s;
  plain.recurrent = {};
  EXPECT_EQ(make_simple_kv_cache(plain, 16, 1)->recurrent(), nullptr);
}

TEST(RecurrentState, HybridConfigMapsAttentionLayersToKvLayers) {
  ModelConfig c;
  c.n_layer = 5;
  EXPECT_EQ(c.n_attn_layer(), 5);
  EXPECT_EQ(c.kv_layer(3), 3);
  c.layer_recurrent = {1, 1, 0, 1, 0};
  EXPECT_EQ(c.n_attn_layer(), 2);
  EXPECT_EQ(c.kv_layer(0), -1);
  EXPECT_EQ(c.kv_layer(2), 0);
  EXPECT_EQ(c.kv_layer(4), 1);
  EXPECT_TRUE(c.is_recurrent_layer(3));
  EXPECT_FALSE(c.is_recurrent_layer(4));
}

}  // namespace
}  // namespace spool
