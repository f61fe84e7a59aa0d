// The sampler on its own (runtime/sampler.*): greedy, penalties, seeded
// draws and temperature, top-k / top-p / min-p. Logit bias and the grammar
// mask are tested with the API request parsing in client_compat_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"

using namespace spool;

TEST(Sampler, GreedyPicksArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 5);
  const float logits[5] = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  s.accept(1);
  const float logits[3] = {1.5f, 2.0f, 0.0f};  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_EQ(s.sample(logits), 0);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.2f;
  Sampler s(p, 2);
  s.accept(0);
  s.accept(0);  // logit 0: 2.0 - 2*0.5 - 0.2 = 0.8 < 1.0
  const float logits[2] = {2.0f, 1.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTemperature) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler a(p, 2), b(p, 2);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    const int x = a.sample(logits.data());
    EXPECT_EQ(x, b.sample(logits.data()));
    ones += x;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampler, TopKTopPMinPRestrictCandidates) {
  const std::vector<float> logits = {5.0f, 4.9f, 1.0f, 0.5f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.top_k = 2;
  Sampler k(p, 5);
  for (int i = 0; i < 500; ++i) EXPECT_LT(k.sample(logits.data()), 2);
  p.top_k = 0;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: ids 0 and 1
  Sampler m(p, 5);
  for (int i = 0; i < 500; ++i) EXPECT_LT(m.sample(logits.data()), 2);
  p.min_p = 0.0f;
  p.top_p = 0.3f;  // the top token alone has p ~0.5
  Sampler t(p, 5);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(t.sample(logits.data()), 0);
}
