// Kimi hybrid models (Kimi Delta Attention + NoPE MLA + MoE): the Kimi Linear
// fixture (HF kimi_linear, transformers reference) and the Kimi K3 fixture
// (GGUF kimi-k3, llama.cpp reference) through the library in both MLA forms
// and through the CLI; prefill in several chunk sizes and token-by-token decode
// agree; the recurrent state's bookkeeping (positions must continue it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "runtime/session.h"

using namespace spool;

namespace {

using namespace spool::test;

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const std::string kBin = SPOOL_BIN;

using Case = FixtureCase;
const Case kCases[] = {
    {"hf_kimi_linear_tiny", "kimi-linear-tiny", "kimi-linear-tiny"},
    {"gguf_kimi_k3_tiny", "gguf/kimi-k3-tiny.f32.gguf", "kimi-k3-tiny"},
};

class KimiFixture : public ::testing::TestWithParam<Case> {};

TEST_P(KimiFixture, LogitsAndGreedyIdsMatchReferenceInBothMlaForms) {
  const Case& c = GetParam();
  expect_mla_forms_match_reference(c.name, kFixtures + c.path, kFixtures + c.fixture + "/reference.safetensors",
                                   [](const Model& m) { EXPECT_FALSE(m.config().layer_recurrent.empty()); });
}

// Chunked prefill (the recurrent state carried from chunk to chunk) and one
// token at a time give the logits of one full-sequence pass.
TEST_P(KimiFixture, PrefillChunksAndDecodeAgree) {
  const Case& c = GetParam();
  const auto ref = safetensors::open(kFixtures + c.fixture + "/reference.safetensors");
  const std::vector<int32_t> ids = to_i32(ref.read_i64("input_ids"));
  auto model = load_model(kFixtures + c.path, LoadOptions{2});
  std::vector<float> full;
  {
    Session s(*model, (int)ids.size(), 512);
    full = s.feed(ids, true);
  }
  for (int chunk : {1, 2, 5, 8, 23}) {
    Session s(*model, (int)ids.size(), chunk);
    const std::vector<float> got = s.feed(ids, true);
    const float err = rel_error(got, full);
    std::printf("[ %s chunk %d ] relative difference %.3g\n", c.name, chunk, err);
    EXPECT_LE(err, 1e-5f) << c.name << " chunk " << chunk;
  }
  // Prompt in one pass, then the rest one token per feed (a decode loop).
  Session s(*model, (int)ids.size(), 512);
  std::vector<float> got = s.feed(std::vector<int32_t>(ids.begin(), ids.begin() + 8), true);
  for (size_t i = 8; i < ids.size(); ++i) {
    const std::vector<float>& row = s.feed({ids[i]});
    got.insert(got.end(), row.begin(), row.end());
  }
  EXPECT_LE(rel_error(got, full), 1e-5f) << c.name << " decode";
}

TEST_P(KimiFixture, CliLogitsAndGreedyIds) {
  const Case& c = GetParam();
  expect_cli_matches_reference(kBin, kFixtures + c.path, kFixtures + c.fixture + "/reference.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Kimi, KimiFixture, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(KimiState, PositionsMustContinueTheRecurrentState) {
  auto model = load_model(kFixtures + "kimi-linear-tiny", LoadOptions{1});
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.n_attn_layer(), 1);  // layers 0, 1, 3 are KDA
  EXPECT_EQ(c.kv_layer(2), 0);
  auto kv = make_simple_kv_cache(model->kv_shape(), 16, 1);
  kv->reserve(0, 16);
  ASSERT_NE(kv->recurrent(), nullptr);
  std::vector<float> logits(4 * c.n_vocab);
  Batch b;
  for (int p = 0; p < 3; ++p) b.add(10 + p, p, 0, true);
  model->forward(b, *kv, logits.data());
  EXPECT_EQ(kv->recurrent()->n_tokens(0), 3);
  Batch again;
  again.add(5, 1, 0, true);  // position 1 again: the state already holds 3 tokens
  EXPECT_THROW(model->forward(again, *kv, logits.data()), Error);
  kv->clear(0);
  kv->reserve(0, 16);
  EXPECT_EQ(kv->recurrent()->n_tokens(0), 0);
  Batch fresh;
  fresh.add(5, 0, 0, true);
  EXPECT_NO_THROW(model->forward(fresh, *kv, logits.data()));
}

}  // namespace

// The Kimi Linear fixture written by `spool convert` as a kimi-linear GGUF
// (llama.cpp's layout: stacked experts, split k_b / v_b, ssm_a = -exp(A_log))
// gives the transformers reference too; bench/gguf_llama_check.sh runs
// llama.cpp on the same file.
TEST(KimiLinearGguf, ConvertedFileMatchesReference) {
  ScratchDir dir("spool-kimi-gguf");
  const std::string path = dir.path + "/kimi-linear-tiny.f32.gguf";
  int status = -1;
  run_stdout(kBin + " convert -m " + kFixtures + "kimi-linear-tiny -o " + path + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  const auto ref = safetensors::open(kFixtures + "kimi-linear-tiny/reference.safetensors");
  auto model = load_model(path, LoadOptions{2});
  EXPECT_EQ(model->config().arch, "kimi-linear");
  EXPECT_EQ(model->weights().manifest().find("blk.2.attn_kv_b.weight"), nullptr);  // split into k_b / v_b
  EXPECT_NE(model->weights().manifest().find("blk.0.ssm_a"), nullptr);
  const float err = rel_error(all_logits(*model, to_i32(ref.read_i64("input_ids"))), ref.read_f32("logits"));
  std::printf("[ gguf kimi-linear-tiny ] relative error %.3g\n", err);
  EXPECT_LE(err, 1e-3f);
  EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")));
  expect_cli_matches_reference(kBin, path, kFixtures + "kimi-linear-tiny/reference.safetensors");
}

// A kimi_linear config that cannot be run is refused with an error naming the field.
TEST(KimiLinearConfig, BadLayerKindsAndHeadCountsAreRefusedByName) {
  const auto config = nlohmann::json::parse(slurp(kFixtures + "kimi-linear-tiny/config.json"));
  struct Bad { const char* field; nlohmann::json value; const char* message; };
  const Bad cases[] = {
      {"layer_types", nlohmann::json::array({"linear_attention", "sliding", "full_attention", "linear_attention"}),
       "layer_types"},
      {"layer_types", nlohmann::json::array({"linear_attention"}), "layer_types"},
      {"mlp_layer_types", nlohmann::json::array({"dense", "sparse"}), "mlp_layer_types"},
      {"linear_num_heads", 8, "KDA heads"},
  };
  for (const Bad& b : cases) {
    ScratchDir dir("spool-kimi-config");
    nlohmann::json c = config;
    c[b.field] = b.value;
    std::ofstream(dir.path + "/config.json") << c.dump();
    std::filesystem::copy_file(kFixtures + "kimi-linear-tiny/model.safetensors", dir.path + "/model.safetensors");
    try {
      load_model(dir.path, LoadOptions{1});
      ADD_FAILURE() << b.field << " " << b.value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
  }
}
