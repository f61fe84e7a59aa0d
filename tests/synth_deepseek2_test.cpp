// spool synth for deepseek2 (DeepSeek-V3 / Kimi-K2): the tiny presets write
// files that load and run (finite logits, generation, both MLA forms agree,
// experts spread over a forward pass, the router bias skews the histogram);
// the Kimi-K2 plans carry exactly the real per-layer shapes and keys; size
// fitting lands near --target-size; random Q4_K blocks have the wanted
// mean and spread. No test writes more than a few MB.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "model/arch_registry.h"
#include "model/config.h"
#include "model/model.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "synth/synth_deepseek2.h"
#include "synth/synth_fill.h"
#include "text/tokenizer.h"
#include "weights/counting_store.h"
#include "test_util.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kVocab = kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf";
const std::string kBin = SPOOL_BIN;

struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (fs::temp_directory_path() / "spool-synth-ds2-XXXXXX").string();
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::string& temp_dir() {
  static ScratchDir dir;
  return dir.path;
}

SynthOptions options(const std::string& preset, const std::string& type, const std::string& name) {
  SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.out = name.empty() ? "" : temp_dir() + "/" + name;
  o.vocab_from = kVocab;
  o.seed = 11;
  o.n_threads = 2;
  return o;
}

// One written tiny file per (preset, type, skew), shared by the tests.
std::string tiny_file(const std::string& preset, const std::string& type, float skew = NAN) {
  static std::map<std::string, std::string> done;
  const std::string key = preset + "-" + type + "-" + (std::isnan(skew) ? "default" : std::to_string(skew));
  auto it = done.find(key);
  if (it != done.end()) return it->second;
  SynthOptions o = options(preset, type, key + ".gguf");
  o.router_skew = skew;
  const SynthResult r = synth_model(o);
  EXPECT_TRUE(r.written);
  EXPECT_EQ(r.bytes, fs::file_size(r.path));
  return done[key] = r.path;
}

std::unique_ptr<Model> load(const std::string& path, MlaForm form = MlaForm::Auto) {
  LoadOptions lo;
  lo.n_threads = 2;
  lo.mla_form = form;
  return load_model(path, lo);
}

std::vector<int32_t> prompt_ids(int n, int n_vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((int32_t)((i * 131 + 7) % n_vocab));
  return ids;
}

// ---- the tiny presets run ---------------------------------------------------------

class TinyDeepseek2 : public ::testing::TestWithParam<const char*> {};

// F32 weights: the two forms are the same sums in another order. (With
// quantized weights they round different activations to Q8 blocks, ~2 % apart
// here; see QuantizedMlaFormsAgreeWithoutRoutingFlips.)
TEST_P(TinyDeepseek2, LoadsRunsAndBothMlaFormsAgree) {
  for (const char* type : {"F32", "Q4_K"}) {
    SCOPED_TRACE(type);
    const std::string path = tiny_file(GetParam(), type);
    std::vector<float> per_form[2];
    for (MlaForm form : {MlaForm::Absorbed, MlaForm::Plain}) {
      auto model = load(path, form);
      const ModelConfig& c = model->config();
      EXPECT_EQ(c.arch, "deepseek2");
      EXPECT_EQ(c.n_vocab, 512);
      EXPECT_EQ(c.mla.kv_lora_rank, 64);
      EXPECT_EQ(c.n_expert, 16);
      EXPECT_FALSE(c.is_moe_layer(0));
      EXPECT_TRUE(c.is_moe_layer(1));
      std::vector<float>& logits = per_form[form == MlaForm::Plain];
      logits = test::all_logits(*model, prompt_ids(12, c.n_vocab));
      ASSERT_EQ(logits.size(), 12u * 512);
      float lo = logits[0], hi = logits[0];
      for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        lo = std::min(lo, x), hi = std::max(hi, x);
      }
      EXPECT_GT(hi - lo, 0.1f) << "logits are all the same";
      const std::vector<int32_t> gen = test::greedy(*model, prompt_ids(4, c.n_vocab), 8);
      ASSERT_EQ(gen.size(), 8u);
      for (int32_t t : gen) EXPECT_TRUE(t >= 0 && t < c.n_vocab);
    }
    const float err = test::rel_error(per_form[1], per_form[0]);
    std::printf("[ %s %s ] absorbed vs plain relative error %.3g\n", GetParam(), type, err);
    if (std::string(type) == "F32") {
      EXPECT_LE(err, 1e-4f);
    } else {
      EXPECT_LE(err, 0.5f);  // a gross mismatch of the forms would still show
    }
  }
}

// With every expert used (top-4 of 4) no choice can flip. F16 weights: the
// forms agree to float rounding. Q8_0 and Q4_K weights: the forms round
// different activations to Q8 blocks (absorbed: the queries against k_b;
// plain: the cached latents against v_b) and differ by ~2.3 % for both weight
// types, so the gap comes from activation rounding, not from the weights.
TEST(SynthDeepseek2, QuantizedMlaFormsAgreeWithoutRoutingFlips) {
  for (const char* type : {"F16", "Q8_0", "Q4_K"}) {
    SynthOptions o = options("deepseek2-tiny", type, std::string("all-experts-") + type + ".gguf");
    o.n_expert = 4;
    synth_model(o);
    std::vector<float> per_form[2];
    for (MlaForm form : {MlaForm::Absorbed, MlaForm::Plain})
      per_form[form == MlaForm::Plain] = test::all_logits(*load(o.out, form), prompt_ids(12, 512));
    const float err = test::rel_error(per_form[1], per_form[0]);
    std::printf("[ deepseek2-tiny %s, 4 of 4 experts ] absorbed vs plain relative error %.3g\n", type, err);
    EXPECT_LE(err, std::string(type) == "F16" ? 1e-4f : 5e-2f);
  }
}

// The same weights as F32: every tensor of `src` dequantized into `dst`.
void dequantize_file(const std::string& src, const std::string& dst) {
  const gguf::File f = gguf::open(src);
  gguf::Writer w;
  for (const auto& [k, v] : f.kv) w.set(k, v);
  w.set("general.file_type", gguf::value_u32(0));
  for (const TensorEntry& t : f.manifest.tensors) w.add_tensor(t.name, DType::F32, t.shape);
  w.begin(dst);
  std::ifstream in(src, std::ios::binary);
  for (size_t i = 0; i < f.manifest.tensors.size(); ++i) {
    const TensorEntry& t = f.manifest.tensors[i];
    std::vector<char> raw(t.bytes);
    in.seekg((std::streamoff)t.offset);
    in.read(raw.data(), (std::streamsize)raw.size());
    std::vector<float> x((size_t)t.n_elements());
    dequantize_row(t.type, raw.data(), x.data(), t.n_elements());
    w.write_tensor(i, x.data());
  }
  w.finish();
}

// Each MLA form on the Q4_K file against the same weights in F32 (where the
// forms agree to 1e-6): neither form may be far worse than the other.
TEST(SynthDeepseek2, QuantizedMlaFormsAgainstDequantizedWeights) {
  SynthOptions o = options("deepseek2-tiny", "Q4_K", "deq-src.gguf");
  o.n_expert = 4;  // all experts used: no routing flips
  synth_model(o);
  const std::string f32 = temp_dir() + "/deq-f32.gguf";
  dequantize_file(o.out, f32);
  const std::vector<int32_t> ids = prompt_ids(12, 512);
  const std::vector<float> ref = test::all_logits(*load(f32, MlaForm::Plain), ids);
  const float ref_forms = test::rel_error(test::all_logits(*load(f32, MlaForm::Absorbed), ids), ref);
  float err[2];
  for (MlaForm form : {MlaForm::Absorbed, MlaForm::Plain})
    err[form == MlaForm::Plain] = test::rel_error(test::all_logits(*load(o.out, form), ids), ref);
  std::printf("[ deepseek2-tiny Q4_K vs its F32 dequantization ] absorbed %.3g, plain %.3g (F32 forms %.3g)\n", err[0],
              err[1], ref_forms);
  EXPECT_LE(ref_forms, 1e-4f);
  EXPECT_LE(err[0], 5e-2f);
  EXPECT_LE(err[1], 5e-2f);
}

INSTANTIATE_TEST_SUITE_P(Synth, TinyDeepseek2, ::testing::Values("deepseek2-tiny", "deepseek-v3-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(SynthDeepseek2, F32TinyRunsAndQ4KMixIsAsPlanned) {
  auto model = load(tiny_file("deepseek2-tiny", "F32"));
  const std::vector<float> logits = test::all_logits(*model, prompt_ids(6, 512));
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  // The Q4_K file: experts Q4_K, 32-wide attn_k_b rows Q5_0 (llama.cpp's fallback), output Q6_K, router F32.
  const gguf::File f = gguf::open(tiny_file("deepseek2-tiny", "Q4_K"));
  auto type_of = [&](const std::string& name) {
    const TensorEntry* t = f.manifest.find(name);
    if (!t) t = f.manifest.find(expert_slice_name(name, 0));
    EXPECT_NE(t, nullptr) << name;
    return t ? t->type : DType::F32;
  };
  EXPECT_EQ(type_of("blk.1.ffn_down_exps.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.2.ffn_gate_exps.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.0.attn_k_b.weight"), DType::Q5_0);
  EXPECT_EQ(type_of("output.weight"), DType::Q6_K);
  EXPECT_EQ(type_of("blk.1.ffn_gate_inp.weight"), DType::F32);
  EXPECT_EQ(type_of("blk.1.exp_probs_b.bias"), DType::F32);
  EXPECT_EQ(f.get_int("general.file_type"), 15);  // Q4_K - Medium
}

TEST(SynthDeepseek2, PlannedSizeIsTheWrittenSizeAndThreadsDoNotChangeTheFile) {
  SynthOptions o = options("deepseek2-tiny", "Q4_K", "");
  o.dry_run = true;
  const SynthResult plan = synth_model(o);
  EXPECT_FALSE(plan.written);
  const std::string a = tiny_file("deepseek2-tiny", "Q4_K");
  EXPECT_NEAR((double)plan.bytes, (double)fs::file_size(a), 32.0);
  SynthOptions one = options("deepseek2-tiny", "Q4_K", "one-thread.gguf");
  one.n_threads = 1;
  synth_model(one);
  std::ifstream fa(a, std::ios::binary), fb(one.out, std::ios::binary);
  std::stringstream sa, sb;
  sa << fa.rdbuf();
  sb << fb.rdbuf();
  EXPECT_TRUE(sa.str() == sb.str()) << "1 and 2 threads wrote different files";
}

// ---- routing over a real forward pass ----------------------------------------------


// Picks per expert of every MoE layer over `n_tokens` tokens fed one at a
// time (each step acquires exactly the token's experts): [layer][expert].
std::map<int, std::vector<int>> expert_histogram(const std::string& path, int n_tokens) {
  ModelParts parts;
  parts.file = open_model_file(path);
  parts.tokenizer = load_tokenizer(parts.file);
  auto s = std::make_unique<CountingStore>(parts.file.manifest);
  CountingStore* store = s.get();
  parts.weights = std::move(s);
  parts.pool = std::make_shared<ThreadPool>(2);
  auto model = find_arch(parts.file.architecture())(std::move(parts));
  const ModelConfig& c = model->config();
  Session session(*model, n_tokens + 1);
  std::map<int, std::vector<int>> hist;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.is_moe_layer(l)) hist[l].assign(c.n_expert, 0);
  for (int32_t tok : prompt_ids(n_tokens, c.n_vocab)) {
    store->acquires.clear();
    session.feed({tok});
    for (auto& [l, h] : hist) {
      int picked = 0;
      for (int e = 0; e < c.n_expert; ++e) {
        const auto it = store->acquires.find(expert_slice_name("blk." + std::to_string(l) + ".ffn_up_exps.weight", e));
        if (it != store->acquires.end()) ++h[e], ++picked;
      }
      EXPECT_EQ(picked, c.n_expert_used) << "layer " << l;
    }
  }
  return hist;
}

// Share of a layer's picks that went to the k experts the router bias favours most.
double favoured_share(const std::string& path, int layer, const std::vector<int>& hist, int k) {
  const gguf::File f = gguf::open(path);
  const TensorEntry* t = f.manifest.find("blk." + std::to_string(layer) + ".exp_probs_b.bias");
  EXPECT_NE(t, nullptr);
  std::vector<float> bias(hist.size());
  std::ifstream in(path, std::ios::binary);
  in.seekg((std::streamoff)t->offset);
  in.read(reinterpret_cast<char*>(bias.data()), (std::streamsize)(bias.size() * sizeof(float)));
  std::vector<int> order(hist.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = (int)i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bias[a] > bias[b]; });
  double top = 0, all = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    all += hist[order[r]];
    if ((int)r < k) top += hist[order[r]];
  }
  return top / all;
}

TEST(SynthDeepseek2, ForwardPassSpreadsTokensOverExperts) {
  const auto hist = expert_histogram(tiny_file("deepseek2-tiny", "Q4_K"), 48);
  for (const auto& [l, h] : hist) {
    const int used = (int)std::count_if(h.begin(), h.end(), [](int n) { return n > 0; });
    const int most = *std::max_element(h.begin(), h.end());
    std::printf("[ layer %d ] %d of 16 experts used; most popular picked by %d of 48 tokens\n", l, used, most);
    EXPECT_GE(used, 12) << "layer " << l;  // 48 tokens x top-4 over 16 experts
    EXPECT_LT(most, 48) << "layer " << l << ": one expert takes every token";
  }
}

TEST(SynthDeepseek2, RouterBiasSkewsTheExpertHistogram) {
  const std::string flat = tiny_file("deepseek2-tiny", "Q4_K", 0.0f);
  const std::string skewed = tiny_file("deepseek2-tiny", "Q4_K", 0.3f);
  const auto h_flat = expert_histogram(flat, 48), h_skew = expert_histogram(skewed, 48);
  for (int l : {1, 2}) {
    // The 4 favoured experts of 16 (a quarter) get ~25% of the picks without skew.
    const double f = favoured_share(flat, l, h_flat.at(l), 4), s = favoured_share(skewed, l, h_skew.at(l), 4);
    std::printf("[ layer %d ] share of the 4 favoured experts: %.2f without skew, %.2f with skew 0.3\n", l, f, s);
    EXPECT_LT(f, 0.45) << "layer " << l;
    EXPECT_GT(s, 0.5) << "layer " << l;
    EXPECT_GT(s, f + 0.15) << "layer " << l;
  }
  // The plan's simulation agrees in direction for the Kimi-sized expert count.
  SynthOptions o = options("kimi-k2-mini", "Q4_K", "");
  o.dry_run = true;
  o.router_skew = 0;
  const std::vector<double> uniform = simulate_router_shares(plan_deepseek2(o), 4000, 3);
  o.router_skew = NAN;  // the default
  const std::vector<double> share = simulate_router_shares(plan_deepseek2(o), 4000, 3);
  double top_u = 0, top_s = 0;
  for (int r = 0; r < 4; ++r) top_u += uniform[r], top_s += share[r];
  EXPECT_NEAR(top_u, 4.0 / 32, 0.03);
  EXPECT_GT(top_s, 1.3 * top_u);
}

// ---- the real shapes ------------------------------------------------------------------

gguf::File metadata_only(const Deepseek2Plan& plan) {
  gguf::File f;
  for (const auto& [k, v] : plan.metadata) f.kv[k] = v;
  return f;
}

std::vector<int64_t> shape_of(const Deepseek2Plan& plan, const std::string& name) {
  for (const SynthTensor& t : plan.tensors)
    if (t.name == name) return t.shape;
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

DType type_of(const Deepseek2Plan& plan, const std::string& name) {
  for (const SynthTensor& t : plan.tensors)
    if (t.name == name) return t.type;
  ADD_FAILURE() << "no tensor " << name;
  return DType::F32;
}

using Shape = std::vector<int64_t>;

TEST(SynthDeepseek2, KimiK2MiniPlanHasTheRealShapes) {
  SynthOptions o = options("kimi-k2-mini", "Q4_K", "");
  o.dry_run = true;
  const Deepseek2Plan plan = plan_deepseek2(o);
  // Per-layer shapes (GGUF order, row length first) of moonshotai/Kimi-K2.
  EXPECT_EQ(shape_of(plan, "blk.0.attn_q_a.weight"), (Shape{7168, 1536}));
  EXPECT_EQ(shape_of(plan, "blk.0.attn_q_b.weight"), (Shape{1536, 64 * (128 + 64)}));
  EXPECT_EQ(shape_of(plan, "blk.0.attn_kv_a_mqa.weight"), (Shape{7168, 512 + 64}));
  EXPECT_EQ(shape_of(plan, "blk.0.attn_k_b.weight"), (Shape{128, 512, 64}));
  EXPECT_EQ(shape_of(plan, "blk.0.attn_v_b.weight"), (Shape{512, 128, 64}));
  EXPECT_EQ(shape_of(plan, "blk.0.attn_output.weight"), (Shape{64 * 128, 7168}));
  EXPECT_EQ(shape_of(plan, "blk.0.ffn_gate.weight"), (Shape{7168, 18432}));
  EXPECT_EQ(shape_of(plan, "blk.0.ffn_down.weight"), (Shape{18432, 7168}));
  const int n_layer = plan.shape.n_layer, N = plan.shape.n_expert;
  for (int l = 1; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(shape_of(plan, p + "ffn_gate_inp.weight"), (Shape{7168, N}));
    EXPECT_EQ(shape_of(plan, p + "exp_probs_b.bias"), (Shape{N}));
    EXPECT_EQ(shape_of(plan, p + "ffn_gate_exps.weight"), (Shape{7168, 2048, N}));
    EXPECT_EQ(shape_of(plan, p + "ffn_up_exps.weight"), (Shape{7168, 2048, N}));
    EXPECT_EQ(shape_of(plan, p + "ffn_down_exps.weight"), (Shape{2048, 7168, N}));
    EXPECT_EQ(shape_of(plan, p + "ffn_gate_shexp.weight"), (Shape{7168, 2048}));
    EXPECT_EQ(shape_of(plan, p + "ffn_down_shexp.weight"), (Shape{2048, 7168}));
    EXPECT_EQ(type_of(plan, p + "ffn_down_exps.weight"), DType::Q4_K);
    EXPECT_EQ(type_of(plan, p + "ffn_gate_inp.weight"), DType::F32);
  }
  EXPECT_EQ(type_of(plan, "blk.0.attn_k_b.weight"), DType::Q5_0);
  EXPECT_EQ(type_of(plan, "output.weight"), DType::Q6_K);
  EXPECT_EQ(shape_of(plan, "token_embd.weight"), (Shape{7168, 512}));
  EXPECT_FALSE(n_layer == 26 || n_layer == 27);
  EXPECT_GE(N, 8);
  EXPECT_EQ(plan.expert_bytes, 3ull * 7168 * 2048 / 256 * 144);
  EXPECT_GT(plan.file_bytes, 2000000000ull);
  EXPECT_LT(plan.file_bytes, 4000000000ull);

  // The metadata, read back through spool's own config reader.
  const ModelConfig c = read_config(metadata_only(plan), 512, RopeStyle::Normal);
  EXPECT_EQ(c.n_embd, 7168);
  EXPECT_EQ(c.n_head, 64);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.head_dim_k, 128 + 64);
  EXPECT_EQ(c.mla.head_dim_v, 128);
  EXPECT_EQ(c.rope.n_dims, 64);
  EXPECT_EQ(c.n_ff, 18432);
  EXPECT_EQ(c.n_ff_exp, 2048);
  EXPECT_EQ(c.n_expert, N);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.n_expert_shared, 1);
  EXPECT_EQ(c.n_expert_group, 1);
  EXPECT_EQ(c.n_expert_group_used, 1);
  EXPECT_EQ(c.expert_gating, ExpertGating::Sigmoid);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.827f);
  EXPECT_EQ(c.dense_ffn_layers, std::vector<int>{0});
  EXPECT_EQ(c.rope.scaling, RopeScaling::Yarn);
  EXPECT_FLOAT_EQ(c.rope.freq_scale, 1.0f / 32);
  EXPECT_EQ(c.rope.n_ctx_orig, 4096);
  EXPECT_FLOAT_EQ(c.rope.beta_fast, 1.0f);
  EXPECT_FLOAT_EQ(c.rope.beta_slow, 1.0f);
  EXPECT_FLOAT_EQ(c.rope.yarn_log_mul, 0.1f);  // 0.1 * mscale_all_dim (1)
  EXPECT_FLOAT_EQ(c.rope.freq_base, 50000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(metadata_only(plan).get_int("deepseek2.attention.key_length_mla"), 192);
  EXPECT_EQ(metadata_only(plan).get_int("deepseek2.attention.value_length_mla"), 128);
}

TEST(SynthDeepseek2, DeepseekV3PresetHasGroupsAndThreeDenseLayers) {
  SynthOptions o = options("deepseek-v3-scaled", "Q4_K", "");
  o.dry_run = true;
  o.n_layer = 6;
  o.n_expert = 64;
  const Deepseek2Plan plan = plan_deepseek2(o);
  const ModelConfig c = read_config(metadata_only(plan), 512, RopeStyle::Normal);
  EXPECT_EQ(c.n_head, 128);
  EXPECT_EQ(c.n_expert_group, 8);
  EXPECT_EQ(c.n_expert_group_used, 4);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.5f);
  EXPECT_EQ(c.dense_ffn_layers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shape_of(plan, "blk.2.ffn_gate.weight"), (Shape{7168, 18432}));
  EXPECT_EQ(shape_of(plan, "blk.3.ffn_gate_exps.weight"), (Shape{7168, 2048, 64}));
  o.n_expert = 60;  // not a multiple of the 8 groups
  EXPECT_THROW(plan_deepseek2(o), Error);
}

// ---- fitting to a size ------------------------------------------------------------------

TEST(SynthDeepseek2, TargetSizeFittingLandsJustUnderTheTarget) {
  for (const char* preset : {"kimi-k2-scaled", "deepseek-v3-scaled"}) {
    for (const char* size : {"12G", "24G", "100G"}) {
      SynthOptions o = options(preset, "Q4_K", "");
      o.dry_run = true;
      o.target_size = parse_byte_size(size);
      const Deepseek2Plan plan = plan_deepseek2(o);
      const double ratio = (double)plan.file_bytes / (double)o.target_size;
      std::printf("[ %s %s ] %d layers x %d experts: %.4f of the target\n", preset, size, plan.shape.n_layer,
                  plan.shape.n_expert, ratio);
      EXPECT_LE(ratio, 1.0) << preset << " " << size;
      // One expert more per MoE layer is the step (8 experts with DeepSeek-V3's 8 groups).
      EXPECT_GE(ratio, std::string(preset) == "kimi-k2-scaled" ? 0.98 : 0.95) << preset << " " << size;
      if (std::string(size) != "100G") {
        EXPECT_EQ(plan.shape.n_layer, 8);
      } else {  // the real expert count fits in 8 layers: layers grow instead
        EXPECT_EQ(plan.shape.n_expert, plan.shape.real_experts);
        EXPECT_GT(plan.shape.n_layer, 8);
      }
    }
  }
  // Fixed expert count: layers are fitted instead.
  SynthOptions o = options("kimi-k2-scaled", "Q4_K", "");
  o.dry_run = true;
  o.target_size = parse_byte_size("24G");
  o.n_expert = 64;
  const Deepseek2Plan by_layers = plan_deepseek2(o);
  EXPECT_EQ(by_layers.shape.n_expert, 64);
  EXPECT_LE(by_layers.file_bytes, o.target_size);
  EXPECT_GE((double)by_layers.file_bytes, 0.9 * (double)o.target_size);  // one layer is ~1.6 GB here
  EXPECT_FALSE(by_layers.shape.n_layer == 26 || by_layers.shape.n_layer == 27);
  // Both counts given: the target is ignored.
  o.n_layer = 5;
  EXPECT_EQ(plan_deepseek2(o).shape.n_layer, 5);
  EXPECT_EQ(plan_deepseek2(o).shape.n_expert, 64);
}

TEST(SynthDeepseek2, RefusesBadOptionsAndDryRunWritesNothing) {
  SynthOptions o = options("kimi-k2-scaled", "Q4_K", "never.gguf");
  EXPECT_THROW(synth_model(o), Error);  // needs --target-size
  o.target_size = 1000000;             // far too small for even one expert
  EXPECT_THROW(synth_model(o), Error);
  o = options("kimi-k2-mini", "Q4_K", "never.gguf");
  o.n_layer = 27;  // llama.cpp would take it for DeepSeek-V2-Lite
  EXPECT_THROW(synth_model(o), Error);
  o.n_layer = 1;  // no MoE layer
  EXPECT_THROW(synth_model(o), Error);
  o.n_layer = 0;
  o.n_expert = 4;  // fewer than top-8
  EXPECT_THROW(synth_model(o), Error);
  o.n_expert = 0;
  o.arch = "llama";
  EXPECT_THROW(synth_model(o), Error);
  o.arch = "deepseek2";
  o.preset = "tinyllama-1.1b";
  EXPECT_THROW(synth_model(o), Error);
  o.preset = "kimi-k2-mini";
  o.dry_run = true;
  const SynthResult r = synth_model(o);
  EXPECT_FALSE(r.written);
  EXPECT_NE(r.plan.find("routed experts 32"), std::string::npos) << r.plan;
  EXPECT_FALSE(fs::exists(o.out));
  EXPECT_THROW(parse_byte_size("12X"), Error);
  EXPECT_EQ(parse_byte_size("24G"), 24ull << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3ull << 29);

  int status = -1;
  const std::string out = test::run_stdout(kBin + " synth --preset kimi-k2-scaled --target-size 24G --dry-run -o " +
                                               temp_dir() + "/cli.gguf --vocab-from " + kVocab + " 2>&1",
                                           &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("layers 8 (1 dense + 7 MoE)"), std::string::npos) << out;
  EXPECT_NE(out.find("per token"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(temp_dir() + "/cli.gguf"));
}

TEST(SynthDeepseek2, CliWritesVerifiesAndReportsRouting) {
  int status = -1;
  const std::string path = temp_dir() + "/cli-tiny.gguf";
  const std::string out = test::run_stdout(kBin + " synth --preset deepseek2-tiny --type Q4_K -t 2 --verify -o " + path +
                                               " --vocab-from " + kVocab + " 2>&1",
                                           &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("layers 3 (1 dense + 2 MoE)"), std::string::npos) << out;  // the plan comes first
  EXPECT_NE(out.find("gives finite logits"), std::string::npos) << out;
  EXPECT_NE(out.find("layer 1: 32 tokens used"), std::string::npos) << out;
  EXPECT_NE(out.find("layer 2: 32 tokens used"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(path));
}

// The O_DIRECT path of the GGUF writer (aligned staging, unaligned tail)
// writes the same bytes as the buffered one.
TEST(SynthDeepseek2, DirectIoWriterWritesTheSameBytes) {
  std::string files[2];
  for (int direct = 0; direct < 2; ++direct) {
    gguf::Writer w;
    w.set_direct_io(direct == 1);
    w.set("general.architecture", gguf::value_string("test"));
    w.add_tensor("a", DType::F32, {1000, 3});
    w.add_tensor("b", DType::Q8_0, {64, 70001});  // ~4.7 MB, not a multiple of 4 KiB
    w.add_tensor("c", DType::F32, {7});
    files[direct] = temp_dir() + (direct ? "/direct.gguf" : "/buffered.gguf");
    w.begin(files[direct]);
    ThreadPool pool(2);
    for (size_t i = 0; i < 3; ++i)
      w.write_tensor_rows(i, [&](int64_t row0, int64_t n_rows, void* dst) {
        auto* p = static_cast<uint8_t*>(dst);
        const size_t n = (size_t)n_rows * row_bytes(i == 1 ? DType::Q8_0 : DType::F32, i == 0 ? 1000 : i == 1 ? 64 : 7);
        for (size_t k = 0; k < n; ++k) p[k] = (uint8_t)(k * 31 + row0 * 7 + i);
      }, &pool);
    w.finish();
  }
  std::ifstream a(files[0], std::ios::binary), b(files[1], std::ios::binary);
  std::stringstream sa, sb;
  sa << a.rdbuf();
  sb << b.rdbuf();
  EXPECT_GT(sa.str().size(), 4000000u);
  EXPECT_TRUE(sa.str() == sb.str());
}

// ---- random Q4_K blocks ------------------------------------------------------------------

TEST(SynthDeepseek2, RandomQ4KBlocksHaveZeroMeanAndTheWantedSpread) {
  const float want = 0.02f;
  synth::RandomQ4K gen(want);
  const int64_t n_blocks = 4096;
  std::vector<uint8_t> q((size_t)n_blocks * dtype_traits(DType::Q4_K).block_bytes);
  gen.fill_row(q.data(), n_blocks, 99);
  std::vector<float> x((size_t)n_blocks * 256);
  dequantize_row(DType::Q4_K, q.data(), x.data(), (int64_t)x.size());
  double sum = 0, sum2 = 0;
  for (float v : x) sum += v, sum2 += (double)v * v;
  const double mean = sum / x.size(), sd = std::sqrt(sum2 / x.size() - mean * mean);
  EXPECT_LT(std::fabs(mean), 0.05 * want);
  EXPECT_NEAR(sd, want, 0.03 * want);
}

}  // namespace
