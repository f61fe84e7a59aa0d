// Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5-MoE): the tiny transformers
// fixtures through the library and the CLI (full-sequence logits within 1e-3
// relative, greedy ids from the recurrent state identical); prefill split
// into forward passes of 1, 3, 8 and all tokens, and delta-rule chunks of 1,
// 3, 8 and all tokens, agree with token-by-token decode within 1e-5; a batch
// that does not continue a sequence's state is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/matmul.h"
#include "model/batch.h"
#include "model/gdn_model.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/session.h"
#include "weights/weight_store.h"
#include "test_util.h"

using namespace spool;
using namespace spool::test;

namespace {

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const std::string kBin = SPOOL_BIN;

struct Case { const char* name; const char* path; const char* fixture; };
const Case kCases[] = {
    {"hf_qwen3next_tiny", "qwen3next-tiny", "qwen3next-tiny"},
    {"hf_qwen35moe_tiny", "qwen35moe-tiny", "qwen35moe-tiny"},
};

class GdnFixture : public ::testing::TestWithParam<Case> {};

TEST_P(GdnFixture, MatchesTransformers) {
  const Case& c = GetParam();
  const auto ref = safetensors::open(kFixtures + c.fixture + "/reference.safetensors");
  auto model = load_model(kFixtures + c.path, LoadOptions{2});
  EXPECT_EQ(model->config().n_attn_layer(), 1);
  EXPECT_GT(model->kv_shape().recurrent.bytes_per_seq(), 0u);
  const std::vector<float> got = all_logits(*model, to_i32(ref.read_i64("input_ids")));
  const float err = rel_error(got, ref.read_f32("logits"));
  std::printf("[ %s ] relative error %.3g\n", c.name, err);
  EXPECT_LE(err, 1e-3f) << c.name;
  EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids"))) << c.name;
}

// Streamed under a weight budget of half the model (experts read as routed): the same logits and ids.
TEST_P(GdnFixture, StreamedMatchesTransformers) {
  const Case& c = GetParam();
  const auto ref = safetensors::open(kFixtures + c.fixture + "/reference.safetensors");
  LoadOptions o{2};
  o.weight_budget = open_model_file(kFixtures + c.path).manifest.total_bytes() / 2;
  auto model = load_model(kFixtures + c.path, o);
  ASSERT_TRUE(model->weights().streaming());
  EXPECT_LE(rel_error(all_logits(*model, to_i32(ref.read_i64("input_ids"))), ref.read_f32("logits")), 1e-3f);
  EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")));
}

TEST_P(GdnFixture, CliLogitsAndGreedyIds) {
  const Case& c = GetParam();
  expect_cli_matches_reference(kBin, kFixtures + c.path, kFixtures + c.fixture + "/reference.safetensors");
}

// Logits of every token, fed in forward passes of `pass` tokens.
std::vector<float> logits_in_passes(Model& model, const std::vector<int32_t>& ids, int pass) {
  Session s(model, (int)ids.size(), pass);
  std::vector<float> out;
  for (size_t i = 0; i < ids.size(); i += pass) {
    std::vector<int32_t> part(ids.begin() + i, ids.begin() + std::min(ids.size(), i + pass));
    const std::vector<float>& l = s.feed(part, true);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

TEST_P(GdnFixture, ChunkedPrefillEqualsTokenByTokenDecode) {
  const Case& c = GetParam();
  const auto ref = safetensors::open(kFixtures + c.fixture + "/reference.safetensors");
  const std::vector<int32_t> ids = to_i32(ref.read_i64("input_ids"));
  auto model = load_model(kFixtures + c.path, LoadOptions{2});
  // Matmul rows as the serving engine computes them (independent of the rows
  // beside them), so what differs between runs is the delta rule's form only.
  set_matmul_batch_invariant(true);
  GatedDeltaNetModel::set_chunk_size(1);
  const std::vector<float> decode = logits_in_passes(*model, ids, 1);  // the recurrent form, one token a pass
  for (int chunk : {1, 3, 8, (int)ids.size()}) {
    GatedDeltaNetModel::set_chunk_size(chunk);
    for (int pass : {3, 8, (int)ids.size()}) {
      const float err = rel_error(logits_in_passes(*model, ids, pass), decode);
      EXPECT_LE(err, 1e-5f) << c.name << " chunk " << chunk << " pass " << pass;
    }
  }
  GatedDeltaNetModel::set_chunk_size(64);
  set_matmul_batch_invariant(false);
}

TEST_P(GdnFixture, RefusesABatchThatSkipsPositions) {
  const Case& c = GetParam();
  auto model = load_model(kFixtures + c.path, LoadOptions{1});
  auto kv = make_simple_kv_cache(model->kv_shape(), 16, 1);
  kv->reserve(0, 8);
  std::vector<float> logits(model->config().n_vocab);
  Batch b;
  b.add(5, 0, 0, true);
  model->forward(b, *kv, logits.data());
  EXPECT_EQ(kv->recurrent()->n_tokens(0), 1);
  Batch skip;
  skip.add(6, 2, 0, true);  // position 1 never came
  EXPECT_THROW(model->forward(skip, *kv, logits.data()), Error);
  kv->clear(0);
  EXPECT_FALSE(kv->recurrent()->has(0));
}

// `spool convert` writes the checkpoint as a GGUF in llama.cpp's layout
// (attn_qkv + attn_gate, post_attention_norm, stacked experts, A = -exp(A_log),
// 1 + w norms; qwen35moe with tiled value heads): spool reads it back within
// the same bound, through the library and the CLI. (bench/gguf_llama_check.sh
// runs llama.cpp on the same files.)
TEST_P(GdnFixture, ConvertedGgufMatchesTransformers) {
  const Case& c = GetParam();
  const std::string gguf_path = (std::filesystem::temp_directory_path() /
                                 (std::string("spool_gdn_") + c.fixture + "_" + std::to_string(getpid()) + ".gguf")).string();
  int status = -1;
  run_stdout(kBin + " convert -m " + kFixtures + c.path + " -o " + gguf_path + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  const gguf::File f = gguf::open(gguf_path);
  const std::string a = f.architecture() + ".";
  EXPECT_TRUE(f.manifest.find("blk.0.attn_qkv.weight") && f.manifest.find("blk.0.attn_gate.weight"));
  EXPECT_TRUE(f.manifest.find("blk.0.post_attention_norm.weight"));
  EXPECT_FALSE(f.manifest.find("blk.0.ssm_in.weight"));
  EXPECT_EQ(f.manifest.require("blk.0.ffn_gate_exps.weight").shape.size(), 3u);
  EXPECT_EQ(f.get_int(a + "full_attention_interval", 0), 4);
  for (const auto& [key, value] : f.kv) EXPECT_NE(key.rfind("spool.", 0), 0u) << key;
  const auto ref = safetensors::open(kFixtures + c.fixture + "/reference.safetensors");
  auto model = load_model(gguf_path, LoadOptions{2});
  const float err = rel_error(all_logits(*model, to_i32(ref.read_i64("input_ids"))), ref.read_f32("logits"));
  std::printf("[ gguf %s ] relative error %.3g\n", c.name, err);
  EXPECT_LE(err, 1e-3f);
  EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")));
  expect_cli_matches_reference(kBin, gguf_path, kFixtures + c.fixture + "/reference.safetensors");
  std::filesystem::remove(gguf_path);
}

INSTANTIATE_TEST_SUITE_P(Gdn, GdnFixture, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
