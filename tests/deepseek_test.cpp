// DeepSeek-V3 / Kimi-K2 (GGUF deepseek2, HF deepseek_v3): the tiny fixtures
// (yarn rope, group routing, shared experts, dense first layer) against their
// transformers reference through the library and the CLI, in both MLA forms
// (plain and absorbed) and from both files; the latent-only KV cache; the
// DeepSeek router (sigmoid, selection bias, groups, scaling).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "model/moe.h"
#include "runtime/session.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

using namespace spool::test;

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const std::string kBin = SPOOL_BIN;

using Case = FixtureCase;
const Case kCases[] = {
    {"hf_deepseek3_tiny", "deepseek3-tiny", "deepseek3-tiny"},
    {"gguf_deepseek3_tiny", "gguf/deepseek3-tiny.f32.gguf", "deepseek3-tiny"},
    {"gguf_deepseek3_fp8_tiny", "gguf/deepseek3-fp8-tiny.f32.gguf", "deepseek3-fp8-tiny"},
    {"hf_deepseek3_fp8_tiny", "deepseek3-fp8-tiny", "deepseek3-fp8-tiny"},  // F8_E4M3 + 128x128 scales
};

class DeepseekFixture : public ::testing::TestWithParam<Case> {};

TEST_P(DeepseekFixture, BothMlaFormsMatchTransformers) {
  const Case& c = GetParam();
  expect_mla_forms_match_reference(c.name, kFixtures + c.path, kFixtures + c.fixture + "/reference.safetensors");
}

TEST_P(DeepseekFixture, CliLogitsAndGreedyIds) {
  const Case& c = GetParam();
  expect_cli_matches_reference(kBin, kFixtures + c.path, kFixtures + c.fixture + "/reference.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Deepseek, DeepseekFixture, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The cache keeps only the latent and the rope key: 3 layers x (32 + 16) floats.
TEST(DeepseekKv, CacheHoldsLatentAndRopeKeyOnly) {
  for (const char* path : {"deepseek3-tiny", "gguf/deepseek3-tiny.f32.gguf"}) {
    auto model = load_model(kFixtures + path, LoadOptions{1});
    const KvShape s = model->kv_shape();
    EXPECT_EQ(s.n_head_kv, 1) << path;
    EXPECT_EQ(s.k_row(), 32 + 16) << path;
    EXPECT_EQ(s.v_row(), 0) << path;
    Session session(*model, 8);
    session.feed({1, 2, 3});
  }
  int status = -1;
  const std::string out = run_stdout(kBin + " inspect -m " + kFixtures + "deepseek3-tiny 2>&1", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("576 bytes/token"), std::string::npos) << out;  // 4 B x 3 x 48
}

// ---- router -------------------------------------------------------------------

ModelConfig router_config() {
  ModelConfig c;
  c.n_expert = 8;
  c.n_expert_used = 2;
  c.expert_gating = ExpertGating::Sigmoid;
  c.expert_weights_norm = true;
  c.expert_weights_scale = 2.5f;
  c.n_expert_group = 2;
  c.n_expert_group_used = 1;
  return c;
}

float logit(float p) { return std::log(p / (1 - p)); }

TEST(DeepseekRouter, GroupsBiasNormalizationAndScale) {
  const ModelConfig c = router_config();
  // Group 0 (experts 0-3) holds the single best score, group 1 the best pair.
  float logits[8];
  const float p[8] = {0.9f, 0.1f, 0.1f, 0.1f, 0.6f, 0.6f, 0.1f, 0.1f};
  for (int e = 0; e < 8; ++e) logits[e] = logit(p[e]);
  int32_t ids[2];
  float w[2];
  route_experts(c, logits, nullptr, 1, ids, w);
  EXPECT_EQ(ids[0], 4);  // group 1 wins on its top-2 sum (1.2 > 1.0); expert 0 is out
  EXPECT_EQ(ids[1], 5);
  EXPECT_NEAR(w[0], 0.5f * 2.5f, 1e-5f);
  EXPECT_NEAR(w[1], 0.5f * 2.5f, 1e-5f);
  // The bias changes the choice but not the weights.
  const float bias[8] = {0, 0.5f, 0, 0, 0, 0, 0, 0};
  route_experts(c, logits, bias, 1, ids, w);
  EXPECT_EQ(ids[0], 0);  // group 0: 0.9 + 0.6 (biased) = 1.5
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(w[0], 0.9f / 1.0f * 2.5f, 1e-5f);
  EXPECT_NEAR(w[1], 0.1f / 1.0f * 2.5f, 1e-5f);
}

TEST(DeepseekRouter, SoftmaxWithoutGroupsIsPlainTopK) {
  ModelConfig c = router_config();
  c.expert_gating = ExpertGating::Softmax;
  c.n_expert_group = 0;
  c.expert_weights_norm = false;
  c.expert_weights_scale = 1.0f;
  const float logits[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  int32_t ids[2];
  float w[2];
  route_experts(c, logits, nullptr, 1, ids, w);
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], 6);
  double sum = 0;
  for (float l : logits) sum += std::exp(l - 7.0);
  EXPECT_NEAR(w[0], 1.0 / sum, 1e-6);
}

}  // namespace
