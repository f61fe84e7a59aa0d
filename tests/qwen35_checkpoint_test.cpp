// Qwen3.5 as released is a multimodal checkpoint: config.json nests the text
// model's fields in text_config (model_type qwen3_5_moe) beside a
// vision_config, and the weights are model.language_model.* plus a vision
// encoder (model.visual.*). Built here from the qwen35moe-tiny fixture: spool
// loads the text model from it, skips the vision tensors, and gives the same
// logits as from the flat fixture (and the transformers reference).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "model/model.h"
#include "test_util.h"

using namespace spool;
using namespace spool::test;

namespace {

const std::string kFixture = std::string(SPOOL_SHARED_DIR) + "/fixtures/qwen35moe-tiny";

// Writes the fixture as a released Qwen3.5 checkpoint into dir.
void write_multimodal_checkpoint(const std::string& dir) {
  const nlohmann::json text = nlohmann::json::parse(slurp(kFixture + "/config.json"));
  nlohmann::json cfg = {
      {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
      {"model_type", "qwen3_5_moe"},
      {"tie_word_embeddings", false},
      {"image_token_id", 7},
      {"vision_config", {{"model_type", "qwen3_5_moe"}, {"depth", 1}, {"hidden_size", 8}, {"num_heads", 2}}},
      {"text_config", text},
  };
  cfg["text_config"].erase("tie_word_embeddings");  // read from the top level
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(kFixture + "/" + f, dir + "/" + f);

  const safetensors::File st = safetensors::open(kFixture + "/model.safetensors");
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> out;
  data.reserve(st.tensors.size() + 1);
  for (const auto& [name, e] : st.tensors) {
    data.push_back(st.read_f32(name));
    std::string renamed = name;
    if (name.rfind("model.", 0) == 0) renamed = "model.language_model." + name.substr(6);
    out.push_back({renamed, e.shape, data.back().data()});
  }
  data.push_back(std::vector<float>(8 * 24, 0.5f));
  out.push_back({"model.visual.blocks.0.attn.qkv.weight", {24, 8}, data.back().data()});
  write_safetensors_f32(dir + "/model.safetensors", out);
}

TEST(Qwen35Checkpoint, NestedTextConfigAndLanguageModelPrefix) {
  ScratchDir dir("spool-qwen35-mm");
  write_multimodal_checkpoint(dir.path);
  auto flat = load_model(kFixture, LoadOptions{2});
  auto nested = load_model(dir.path, LoadOptions{2});
  EXPECT_EQ(nested->config().arch, "qwen35moe");
  EXPECT_EQ(nested->config().n_layer, flat->config().n_layer);
  EXPECT_EQ(nested->config().n_attn_layer(), 1);
  EXPECT_EQ(nested->kv_shape().recurrent.bytes_per_seq(), flat->kv_shape().recurrent.bytes_per_seq());
  const auto ref = safetensors::open(kFixture + "/reference.safetensors");
  const std::vector<int32_t> ids = to_i32(ref.read_i64("input_ids"));
  const std::vector<float> got = all_logits(*nested, ids);
  EXPECT_EQ(got, all_logits(*flat, ids));  // the same weights, the same numbers
  EXPECT_LE(rel_error(got, ref.read_f32("logits")), 1e-3f);
  EXPECT_EQ(greedy(*nested, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")));
}

}  // namespace
