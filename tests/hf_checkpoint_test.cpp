// Hugging Face checkpoint directories (-m DIR): the tiny llama/qwen2/qwen3
// fixtures against their transformers reference (logits and greedy ids with
// the KV cache), through the library and the CLI; the same checkpoints
// rewritten here as BF16/F16 and as shards; and malformed directories, which
// must fail with an error that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "core/fp16.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "model/model.h"
#include "runtime/session.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

using namespace spool::test;

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const std::string kBin = SPOOL_BIN;
const char* kDense[] = {"llama-tiny", "qwen2-tiny", "qwen3-tiny"};

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("spool_hf_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// Copies a fixture's config and tokenizer files (not the weights) into dir.
void copy_side_files(const std::string& fixture, const fs::path& dir) {
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kFixtures + fixture + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  fs::permissions(dir / "config.json", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, LibraryMatchesTransformers) {
  const std::string dir = kFixtures + GetParam();
  const auto ref = safetensors::open(dir + "/reference.safetensors");
  auto model = load_model(dir, LoadOptions{2});
  const float err = rel_error(all_logits(*model, to_i32(ref.read_i64("input_ids"))), ref.read_f32("logits"));
  EXPECT_LE(err, 1e-3f) << GetParam();
  RecordProperty("relative_error", std::to_string(err));
  std::printf("[ %s ] HF checkpoint relative error %.3g\n", GetParam(), err);
  EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")));
}

TEST_P(HfFixture, ConfigJsonPathWorksToo) {
  auto model = load_model(kFixtures + GetParam() + "/config.json", LoadOptions{1});
  EXPECT_EQ(model->config().n_vocab, 512);
  EXPECT_EQ(model->config().rope.style, RopeStyle::Neox);  // HF llama is not permuted
}

TEST_P(HfFixture, CliLogitsAndGreedyIds) {
  expect_cli_matches_reference(kBin, kFixtures + GetParam(), kFixtures + GetParam() + "/reference.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Dense, HfFixture, ::testing::ValuesIn(kDense), [](const auto& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

// ---- checkpoints written here: other dtypes, shards ---------------------------

// Rewrites a fixture's model.safetensors with every tensor stored as `dtype`
// (F32, F16 or BF16), split over n_shards files with an index when n_shards > 1.
// With bf16_values, F32 storage holds values rounded to BF16 first.
void write_converted(const std::string& fixture, const std::string& dtype, int n_shards, const fs::path& dir,
                     bool bf16_values = false) {
  copy_side_files(fixture, dir);
  const auto src = safetensors::open(kFixtures + fixture + "/model.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, e] : src.tensors) names.push_back(name);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < n_shards; ++s) {
    const std::string file = n_shards == 1 ? "model.safetensors"
                                           : "model-0000" + std::to_string(s + 1) + "-of-0000" +
                                                 std::to_string(n_shards) + ".safetensors";
    std::vector<std::vector<uint8_t>> data;
    std::vector<SafetensorsRaw> raw;
    for (size_t k = s; k < names.size(); k += n_shards) {
      std::vector<float> f = src.read_f32(names[k]);
      if (bf16_values)
        for (float& x : f) x = bf16_to_fp32(fp32_to_bf16(x));
      std::vector<uint8_t> bytes(f.size() * (dtype == "F32" ? 4 : 2));
      for (size_t i = 0; i < f.size(); ++i) {
        if (dtype == "F32") std::memcpy(bytes.data() + 4 * i, &f[i], 4);
        const uint16_t h = dtype == "BF16" ? fp32_to_bf16(f[i]) : fp32_to_fp16(f[i]);
        if (dtype != "F32") std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      data.push_back(std::move(bytes));
      raw.push_back({names[k], dtype, src.require(names[k]).shape, nullptr});
      weight_map[names[k]] = file;
    }
    for (size_t k = 0; k < raw.size(); ++k) raw[k].data = data[k].data();
    write_safetensors((dir / file).string(), raw);
  }
  if (n_shards > 1) std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}};
}

float converted_error(const std::string& fixture, const std::string& dtype, int n_shards) {
  TempDir tmp;
  write_converted(fixture, dtype, n_shards, tmp.path);
  const auto ref = safetensors::open(kFixtures + fixture + "/reference.safetensors");
  auto model = load_model(tmp.str(), LoadOptions{2});
  const float err = rel_error(all_logits(*model, to_i32(ref.read_i64("input_ids"))), ref.read_f32("logits"));
  std::printf("[ %s %s ] relative error %.3g\n", fixture.c_str(), dtype.c_str(), err);
  return err;
}

TEST(HfCheckpoint, Bf16WeightsStayClose) {
  for (const char* f : kDense) EXPECT_LE(converted_error(f, "BF16", 1), 1e-2f) << f;
}

// The BF16 path computes exactly what F32 weights holding the same values give.
TEST(HfCheckpoint, Bf16MatchesItsF32Expansion) {
  for (const char* fixture : kDense) {
    TempDir a, b;
    write_converted(fixture, "BF16", 1, a.path);
    write_converted(fixture, "F32", 1, b.path, /*bf16_values=*/true);
    const auto ref = safetensors::open(kFixtures + fixture + "/reference.safetensors");
    const std::vector<int32_t> ids = to_i32(ref.read_i64("input_ids"));
    auto ma = load_model(a.str(), LoadOptions{2});
    auto mb = load_model(b.str(), LoadOptions{2});
    const float err = rel_error(all_logits(*ma, ids), all_logits(*mb, ids));
    EXPECT_LE(err, 1e-5f) << fixture;
    std::printf("[ %s ] BF16 vs its F32 expansion: relative difference %.3g\n", fixture, err);
  }
}

TEST(HfCheckpoint, F16WeightsStayClose) {
  for (const char* f : kDense) EXPECT_LE(converted_error(f, "F16", 1), 2e-3f) << f;
}

TEST(HfCheckpoint, ShardedF32MatchesReference) {
  for (const char* f : kDense) EXPECT_LE(converted_error(f, "F32", 3), 1e-3f) << f;
}

TEST(HfCheckpoint, Bf16NormWeightsLiveInMemoryAsF32) {
  TempDir tmp;
  write_converted("qwen3-tiny", "BF16", 1, tmp.path);
  const gguf::File f = open_model_file(tmp.str());
  const TensorEntry& norm = f.manifest.require("blk.0.attn_q_norm.weight");
  EXPECT_EQ(norm.type, DType::F32);
  EXPECT_NE(norm.memory, nullptr);
  const TensorEntry& wq = f.manifest.require("blk.0.attn_q.weight");
  EXPECT_EQ(wq.type, DType::BF16);  // matrices stay in the file
  EXPECT_EQ(wq.memory, nullptr);
  EXPECT_EQ(wq.shape, (std::vector<int64_t>{64, 128}));  // GGUF order: [n_embd, n_head * head_dim]
}

// ---- metadata ------------------------------------------------------------------

TEST(HfCheckpoint, MetadataInGgufForm) {
  const gguf::File f = open_model_file(kFixtures + "qwen3-tiny");
  EXPECT_EQ(f.architecture(), "qwen3");
  EXPECT_EQ(f.get_int("qwen3.attention.key_length"), 32);
  EXPECT_EQ(f.get_int("qwen3.attention.head_count_kv"), 2);
  EXPECT_DOUBLE_EQ(f.get_float("qwen3.rope.freq_base"), 1e6);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 511);
  EXPECT_EQ(f.get_string("general.name"), "qwen3-tiny");
  const gguf::File l = open_model_file(kFixtures + "llama-tiny");
  EXPECT_EQ(l.get_string("tokenizer.ggml.pre"), "llama3");
  EXPECT_EQ(l.get_int("tokenizer.ggml.bos_token_id"), 507);
}

// Writes the fixture's config with `edit` applied, weights linked unchanged.
void edited_config(const std::string& fixture, const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  copy_side_files(fixture, dir);
  fs::create_symlink(kFixtures + fixture + "/model.safetensors", dir / "model.safetensors");
  nlohmann::json c = hf::read_json((dir / "config.json").string());
  edit(c);
  std::ofstream(dir / "config.json") << c.dump(1);
}

gguf::File open_with_rope(const nlohmann::json& rope) {
  TempDir tmp;
  edited_config("llama-tiny", tmp.path, [&](nlohmann::json& c) { c["rope_parameters"] = rope; });
  return open_model_file(tmp.str());
}

TEST(HfCheckpoint, RopeScalingVariants) {
  // transformers 5 "rope_parameters" and the older "rope_scaling" spelling.
  gguf::File lin = open_with_rope({{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 5000.0}});
  EXPECT_EQ(lin.get_string("llama.rope.scaling.type"), "linear");
  EXPECT_DOUBLE_EQ(lin.get_float("llama.rope.scaling.factor"), 4.0);
  EXPECT_DOUBLE_EQ(lin.get_float("llama.rope.freq_base"), 5000.0);
  TempDir tmp;
  edited_config("llama-tiny", tmp.path, [](nlohmann::json& c) {
    c.erase("rope_parameters");
    c["rope_theta"] = 20000.0;
    c["rope_scaling"] = {{"type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 64}};
  });
  const gguf::File yarn = open_model_file(tmp.str());
  EXPECT_EQ(yarn.get_string("llama.rope.scaling.type"), "yarn");
  EXPECT_EQ(yarn.get_int("llama.rope.scaling.original_context_length"), 64);
  EXPECT_DOUBLE_EQ(yarn.get_float("llama.rope.freq_base"), 20000.0);

  // llama3: per-dimension divisors, 1 for high frequencies, `factor` for low ones.
  gguf::File l3 = open_with_rope({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64},
                                  {"rope_theta", 10000.0}});
  const TensorEntry& rf = l3.manifest.require("rope_freqs.weight");
  ASSERT_EQ(rf.shape, std::vector<int64_t>{8});
  const float* ff = static_cast<const float*>(rf.memory);
  EXPECT_FLOAT_EQ(ff[0], 1.0f);  // wavelength 2*pi < 64/4
  EXPECT_FLOAT_EQ(ff[7], 8.0f);  // wavelength 2*pi*10000^(14/16) > 64
  for (int i = 1; i < 8; ++i) EXPECT_GE(ff[i], ff[i - 1]);
  EXPECT_THROW(open_with_rope({{"rope_type", "longrope"}, {"factor", 2.0}}), Error);
}

// ---- malformed directories -------------------------------------------------------

void expect_error(const std::string& path, const std::string& needle) {
  try {
    load_model(path, LoadOptions{1});
    ADD_FAILURE() << "no error for " << path << " (expected '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfCheckpoint, MissingConfig) {
  TempDir tmp;
  fs::copy_file(kFixtures + "llama-tiny/tokenizer.json", tmp.path / "tokenizer.json");
  expect_error(tmp.str(), "no config.json");
}

TEST(HfCheckpoint, MissingWeights) {
  TempDir tmp;
  copy_side_files("llama-tiny", tmp.path);
  expect_error(tmp.str(), "neither model.safetensors nor model.safetensors.index.json");
}

TEST(HfCheckpoint, TruncatedSafetensors) {
  TempDir tmp;
  copy_side_files("llama-tiny", tmp.path);
  const std::string src = kFixtures + "llama-tiny/model.safetensors";
  fs::copy_file(src, tmp.path / "model.safetensors");
  fs::permissions(tmp.path / "model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  fs::resize_file(tmp.path / "model.safetensors", fs::file_size(src) - 100);
  expect_error(tmp.str(), "truncated");
}

TEST(HfCheckpoint, ShapeMismatch) {
  TempDir tmp;
  edited_config("llama-tiny", tmp.path, [](nlohmann::json& c) { c["intermediate_size"] = 128; });
  expect_error(tmp.str(), "blk.0.ffn_gate.weight' has shape [64, 160], expected [64, 128]");
}

TEST(HfCheckpoint, UnknownModelType) {
  TempDir tmp;
  edited_config("llama-tiny", tmp.path, [](nlohmann::json& c) { c["model_type"] = "gpt_bigcode"; });
  expect_error(tmp.str(), "unsupported model_type 'gpt_bigcode'");
}

TEST(HfCheckpoint, MissingShard) {
  TempDir tmp;
  write_converted("qwen2-tiny", "F32", 2, tmp.path);
  fs::remove(tmp.path / "model-00002-of-00002.safetensors");
  expect_error(tmp.str(), "model-00002-of-00002.safetensors");
}

TEST(HfCheckpoint, UntiedWithoutLmHead) {
  TempDir tmp;
  edited_config("qwen2-tiny", tmp.path, [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  expect_error(tmp.str(), "lm_head.weight is missing");
}

// A checkpoint whose only tensor is `name` stored as `dtype`.
void expect_single_tensor_error(const std::string& name, const std::string& dtype, const std::string& needle) {
  TempDir tmp;
  copy_side_files("llama-tiny", tmp.path);
  const std::vector<uint8_t> zeros(64 * 4);
  write_safetensors((tmp.path / "model.safetensors").string(), {{name, dtype, {64}, zeros.data()}});
  expect_error(tmp.str(), needle);
}

TEST(HfCheckpoint, UnexpectedTensorOrDtype) {
  expect_single_tensor_error("model.layers.0.mlp.shared_expert.gate_proj.weight", "F32", "unexpected tensor name");
  expect_single_tensor_error("model.norm.weight", "I32", "dtype I32");
}

TEST(HfCheckpoint, CliReportsError) {
  TempDir tmp;
  int status = -1;
  const std::string out = run_stdout(kBin + " run -m " + tmp.str() + " --prompt-ids 1 -n 1 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("no config.json"), std::string::npos) << out;
}

}  // namespace
