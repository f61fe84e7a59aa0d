// spool synth --arch kimi-k3: the tiny preset written by spool has exactly the
// tensor table (names, shapes, types) and kimi-k3.* keys of the llama.cpp-made
// fixture ../shared/fixtures/gguf/kimi-k3-tiny.f32.gguf; a written MXFP4 file
// reads back with its planned shapes and types and runs through spool's
// kimi-k3 loader; the scaled plan keeps K3's
// per-layer shapes and KDA:MLA pattern and fits --target-size; the real preset
// adds up to the published ~2.8T total / ~104B active parameters.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "format/manifest.h"
#include "model/model.h"
#include "synth/synth.h"
#include "synth/synth_kimi_k3.h"
#include "test_util.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kVocab = kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf";
const std::string kFixture = kShared + "/fixtures/gguf/kimi-k3-tiny.f32.gguf";

struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (fs::temp_directory_path() / "spool-synth-k3-XXXXXX").string();
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

SynthOptions options(const std::string& preset, const std::string& type, const std::string& out) {
  SynthOptions o;
  o.arch = "kimi-k3";
  o.preset = preset;
  o.type = type;
  o.out = out;
  o.vocab_from = kVocab;
  o.seed = 5;
  o.n_threads = 2;
  return o;
}

std::map<std::string, std::string> tensor_table(const gguf::File& f) {
  std::map<std::string, std::string> t;
  for (const TensorEntry& e : f.manifest.tensors) t[e.name] = std::string(dtype_name(e.type)) + " " + e.shape_string();
  return t;
}

std::map<std::string, std::string> arch_keys(const gguf::File& f) {
  std::map<std::string, std::string> k;
  for (const auto& [key, v] : f.kv)
    if (key.rfind("kimi-k3.", 0) == 0) k[key] = v.to_string(64);
  return k;
}

const K3Tensor* find(const KimiK3Plan& p, const std::string& name) {
  for (const K3Tensor& t : p.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<int64_t> shape(const KimiK3Plan& p, const std::string& name) {
  const K3Tensor* t = find(p, name);
  return t ? t->shape : std::vector<int64_t>{};
}

}  // namespace

TEST(SynthKimiK3, TinyMatchesTheLlamaCppFixtureLayout) {
  ScratchDir dir;
  const SynthResult r = synth_model(options("kimi-k3-tiny", "F32", dir.path + "/tiny.gguf"));
  ASSERT_TRUE(r.written);
  EXPECT_EQ(r.bytes, fs::file_size(r.path));
  const gguf::File ours = gguf::open(r.path), ref = gguf::open(kFixture);
  EXPECT_EQ(ours.architecture(), "kimi-k3");
  EXPECT_EQ(tensor_table(ours), tensor_table(ref));
  EXPECT_EQ(arch_keys(ours), arch_keys(ref));
}

TEST(SynthKimiK3, WrittenMxfp4FileReadsBackAsPlanned) {
  ScratchDir dir;
  const SynthOptions o = options("kimi-k3-mini", "MXFP4", dir.path + "/mini.gguf");
  const KimiK3Plan plan = plan_kimi_k3(o);
  EXPECT_EQ(plan.n_mla_layers(), 1);  // KDA, KDA, KDA, MLA
  EXPECT_EQ(plan.expert_type, DType::MXFP4);
  // One expert: gate + up [96 x 64] and down [64 x 96] at 17 bytes per 32 values.
  EXPECT_EQ(plan.expert_bytes, 3ull * 96 * 64 / 32 * 17);
  const SynthResult r = write_kimi_k3(plan, o);
  gguf::File f = gguf::open(r.path);
  split_expert_tensors(f.manifest);  // as the model loader does: one entry per expert
  EXPECT_EQ(f.get_int("kimi-k3.expert_count"), 16);
  EXPECT_EQ(f.get_int("kimi-k3.expert_used_count"), 4);
  EXPECT_EQ(f.get_int("kimi-k3.expert_latent_length"), 96);
  EXPECT_EQ(f.get_int("kimi-k3.attention.q_lora_rank"), 64);
  EXPECT_EQ(f.get_int("general.file_type"), 38);  // MOSTLY_MXFP4_MOE
  EXPECT_EQ(f.get_array("kimi-k3.attention.head_count_kv").ints, (std::vector<int64_t>{0, 0, 0, 1}));
  std::map<std::string, const TensorEntry*> by_name;
  uint64_t expert_slices = 0;
  for (const TensorEntry& e : f.manifest.tensors) {
    by_name[e.name] = &e;
    if (e.expert >= 0) ++expert_slices;
  }
  EXPECT_EQ(expert_slices, 3u * 16 * 3);  // 3 MoE layers
  for (const K3Tensor& t : plan.tensors) {
    SCOPED_TRACE(t.name);
    if (t.routed_expert) {
      const TensorEntry* e = by_name[t.name + "#15"];
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->type, DType::MXFP4);
      EXPECT_EQ(e->shape, (std::vector<int64_t>{t.shape[0], t.shape[1]}));
      continue;
    }
    const TensorEntry* e = by_name[t.name];
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->type, t.type);
    EXPECT_EQ(e->shape, t.shape);
    EXPECT_EQ(e->bytes, t.bytes);
  }
  EXPECT_EQ(by_name["blk.0.attn_q.weight"]->type, DType::Q8_0);
  EXPECT_EQ(by_name["blk.0.ssm_conv1d_q.weight"]->type, DType::F32);
  EXPECT_EQ(by_name["blk.3.attn_k_b.weight"]->type, DType::MXFP4);  // 3-D, as llama.cpp's MXFP4_MOE
  EXPECT_EQ(by_name["blk.1.ffn_gate_inp.weight"]->type, DType::F32);
}

// spool's own kimi-k3 loader runs the written file: finite, varied logits and greedy ids in range.
TEST(SynthKimiK3, MiniFileLoadsAndRuns) {
  ScratchDir dir;
  const SynthResult r = synth_model(options("kimi-k3-mini", "MXFP4", dir.path + "/mini.gguf"));
  LoadOptions lo;
  lo.n_threads = 2;
  auto model = load_model(r.path, lo);
  EXPECT_EQ(model->config().arch, "kimi-k3");
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back((int32_t)((i * 131 + 7) % 512));
  const std::vector<float> logits = test::all_logits(*model, ids);
  ASSERT_EQ(logits.size(), 10u * 512);
  float lo_v = logits[0], hi_v = logits[0];
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    lo_v = std::min(lo_v, x), hi_v = std::max(hi_v, x);
  }
  EXPECT_GT(hi_v - lo_v, 1e-3f) << "logits are all the same";
  for (int32_t t : test::greedy(*model, {1, 2, 3}, 4)) EXPECT_TRUE(t >= 0 && t < 512);
}

TEST(SynthKimiK3, ScaledPlanKeepsRealShapesAndFitsTheTarget) {
  SynthOptions o = options("kimi-k3-scaled", "MXFP4", "");
  o.dry_run = true;
  o.target_size = 12ull << 30;
  const KimiK3Plan p = plan_kimi_k3(o);
  EXPECT_LE(p.file_bytes, o.target_size);
  EXPECT_EQ(p.shape.n_layer, 8);
  EXPECT_EQ(p.n_mla_layers(), 2);  // KDA x3, MLA, KDA x3, MLA: K3's 3:1
  EXPECT_GE(p.shape.n_expert, 16);
  EXPECT_LT(p.shape.n_expert, 896);
  // One more expert per layer would not fit.
  SynthOptions more = o;
  more.n_layer = 8;
  more.n_expert = p.shape.n_expert + 1;
  more.target_size = 0;
  EXPECT_GT(plan_kimi_k3(more).file_bytes, o.target_size);
  // Per-layer shapes of the released model.
  EXPECT_EQ(shape(p, "blk.0.attn_q.weight"), (std::vector<int64_t>{7168, 12288}));
  EXPECT_EQ(shape(p, "blk.0.ssm_conv1d_k.weight"), (std::vector<int64_t>{4, 1, 12288, 1}));
  EXPECT_EQ(shape(p, "blk.0.ssm_f_b.weight"), (std::vector<int64_t>{128, 12288}));
  EXPECT_EQ(shape(p, "blk.0.ssm_a"), (std::vector<int64_t>{96}));
  EXPECT_EQ(shape(p, "blk.3.attn_q_b.weight"), (std::vector<int64_t>{1536, 96 * 192}));
  EXPECT_EQ(shape(p, "blk.3.attn_kv_a_mqa.weight"), (std::vector<int64_t>{7168, 576}));
  EXPECT_EQ(shape(p, "blk.3.attn_k_b.weight"), (std::vector<int64_t>{128, 512, 96}));
  EXPECT_EQ(shape(p, "blk.3.attn_gate.weight"), (std::vector<int64_t>{7168, 12288}));
  EXPECT_EQ(shape(p, "blk.1.ffn_gate_exps.weight"), (std::vector<int64_t>{3584, 3072, p.shape.n_expert}));
  EXPECT_EQ(shape(p, "blk.1.ffn_down_exps.weight"), (std::vector<int64_t>{3072, 3584, p.shape.n_expert}));
  EXPECT_EQ(shape(p, "blk.1.ffn_routed_down.weight"), (std::vector<int64_t>{7168, 3584}));
  EXPECT_EQ(shape(p, "blk.1.ffn_gate_shexp.weight"), (std::vector<int64_t>{7168, 6144}));
  EXPECT_EQ(shape(p, "blk.0.ffn_gate.weight"), (std::vector<int64_t>{7168, 18432}));
  EXPECT_EQ(find(p, "blk.3.attn_q.weight"), nullptr);
  EXPECT_EQ(find(p, "blk.3.ssm_a"), nullptr);
}

TEST(SynthKimiK3, RealPresetHasThePublishedParameterCounts) {
  SynthOptions o = options("kimi-k3", "BF16", "");
  o.dry_run = true;
  const KimiK3Plan p = plan_kimi_k3(o, 163840);
  EXPECT_EQ(p.shape.n_layer, 93);
  EXPECT_EQ(p.n_mla_layers(), 24);
  double total = 0, experts = 0;
  for (const K3Tensor& t : p.tensors) {
    double n = 1;
    for (int64_t d : t.shape) n *= (double)d;
    total += n;
    if (t.routed_expert) experts += n;
  }
  const double active = total - experts + experts * 16 / 896 - 7168.0 * 163840;  // one embedding row
  std::printf("[ kimi-k3 ] total %.3fT, routed %.3fT, active %.1fB parameters\n", total / 1e12, experts / 1e12,
              active / 1e9);
  EXPECT_NEAR(experts / 1e12, 2.72, 0.01);  // 92 x 896 x 33.0M
  EXPECT_NEAR(total / 1e12, 2.8, 0.05);
  EXPECT_NEAR(active / 1e9, 104, 8);
}

TEST(SynthKimiK3, BadOptionsAreClearErrors) {
  SynthOptions o = options("kimi-k3-scaled", "MXFP4", "");
  o.dry_run = true;
  EXPECT_THROW(plan_kimi_k3(o), Error);  // needs --target-size
  o.target_size = 1ull << 30;            // 1 GiB: 8 K3 layers alone are larger
  EXPECT_THROW(plan_kimi_k3(o), Error);
  SynthOptions t = options("kimi-k3-tiny", "MXFP4", "");
  EXPECT_THROW(plan_kimi_k3(t), Error);  // 40-wide expert rows are not MXFP4 blocks
  SynthOptions a = options("kimi-k3-tiny", "F32", "");
  a.arch = "deepseek2";
  EXPECT_THROW(plan_kimi_k3(a), Error);
}
