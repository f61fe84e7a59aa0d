// Per-tensor quantization mixes (issue 26): llama.cpp's rules for its low-bit
// file types on a TinyLlama-shaped and a Kimi-K2-shaped model (expected types
// worked out by hand from llama.cpp's quantizer), --tensor-type overrides and
// --pure, the dynamic UD-* mixes, `spool inspect`'s per-class mix of a written
// file, `spool plan --type` bytes against the type table, and the refusal of a
// mixed file holding a type spool cannot read.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/tensor_class.h"
#include "model/model.h"
#include "plan/cost_plan.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "synth/synth_deepseek2.h"
#include "synth/synth_quant_mix.h"
#include "test_util.h"

namespace spool {
namespace {

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

std::string temp_dir() {
  static test::ScratchDir dir("spool-quant-mix-test");
  return dir.path;
}

// TinyLlama 1.1B's tensors in GGUF order: 22 layers, 32 heads over 4 KV heads (n_gqa 8).
std::vector<MixTensor> tinyllama_tensors(bool tied = false) {
  std::vector<MixTensor> t;
  t.push_back({"token_embd.weight", {2048, 32000}});
  for (int l = 0; l < 22; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", {2048}, false});
    t.push_back({p + "attn_q.weight", {2048, 2048}});
    t.push_back({p + "attn_k.weight", {2048, 256}});
    t.push_back({p + "attn_v.weight", {2048, 256}});
    t.push_back({p + "attn_output.weight", {2048, 2048}});
    t.push_back({p + "ffn_norm.weight", {2048}, false});
    t.push_back({p + "ffn_gate.weight", {2048, 5632}});
    t.push_back({p + "ffn_up.weight", {2048, 5632}});
    t.push_back({p + "ffn_down.weight", {5632, 2048}});
  }
  t.push_back({"output_norm.weight", {2048}, false});
  if (!tied) t.push_back({"output.weight", {2048, 32000}});
  return t;
}

// name -> type under a recipe for the TinyLlama shape.
struct Mixed {
  std::vector<MixTensor> tensors;
  std::vector<DType> types;
  DType operator()(const std::string& name) const {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) return types[i];
    ADD_FAILURE() << "no tensor " << name;
    return DType::F32;
  }
};

Mixed tinyllama(const std::string& type, int n_gqa = 8, const MixOptions& mix = {}, bool tied = false) {
  Mixed m;
  m.tensors = tinyllama_tensors(tied);
  MixModel model;
  model.n_layer = 22;
  model.n_gqa = n_gqa;
  const QuantRecipe* r = find_quant_recipe(type);
  EXPECT_NE(r, nullptr) << type;
  m.types = mix_types(*r, model, m.tensors, mix);
  return m;
}

TEST(QuantMix, RecipesCarryLlamaCppFileTypesAndDefaultTypes) {
  struct Row { const char* name; DType base; int file_type; const char* label; };
  for (const Row& r : {Row{"IQ2_XXS", DType::IQ2_XXS, 19, "IQ2_XXS - 2.0625 bpw"},
                       Row{"IQ2_S", DType::IQ2_XS, 28, "IQ2_S - 2.5 bpw"}, Row{"IQ2_M", DType::IQ2_S, 29, "IQ2_M - 2.7 bpw"},
                       Row{"IQ3_XS", DType::IQ3_S, 22, "IQ3_XS - 3.3 bpw"}, Row{"IQ3_M", DType::IQ3_S, 27, "IQ3_S mix - 3.66 bpw"},
                       Row{"IQ1_M", DType::IQ1_M, 31, "IQ1_M - 1.75 bpw"}, Row{"TQ1_0", DType::TQ1_0, 36, "TQ1_0 - 1.69 bpw ternary"},
                       Row{"ud-iq1_s", DType::IQ1_S, 24, "IQ1_S - 1.5625 bpw"}}) {
    const QuantRecipe* q = find_quant_recipe(r.name);
    ASSERT_NE(q, nullptr) << r.name;
    EXPECT_EQ(q->base, r.base) << r.name;
    EXPECT_EQ(q->file_type, r.file_type) << r.name;
    EXPECT_STREQ(file_type_name(q->file_type), r.label) << r.name;
  }
}

TEST(QuantMix, LlamaShapeFollowsLlamaCppLowBitRules) {
  // IQ2_XXS: output Q5_K, token_embd Q2_K, attn_v Q4_K (n_gqa >= 4), the first
  // 22/8 = 2 ffn_down Q2_K, everything else IQ2_XXS.
  Mixed m = tinyllama("IQ2_XXS");
  EXPECT_EQ(m("output.weight"), DType::Q5_K);
  EXPECT_EQ(m("token_embd.weight"), DType::Q2_K);
  EXPECT_EQ(m("blk.5.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.0.ffn_down.weight"), DType::Q2_K);
  EXPECT_EQ(m("blk.1.ffn_down.weight"), DType::Q2_K);
  EXPECT_EQ(m("blk.2.ffn_down.weight"), DType::IQ2_XXS);
  EXPECT_EQ(m("blk.3.attn_output.weight"), DType::IQ2_XXS);
  EXPECT_EQ(m("blk.3.ffn_gate.weight"), DType::IQ2_XXS);
  EXPECT_EQ(m("blk.3.attn_norm.weight"), DType::F32);
  // Without grouped-query attention attn_v drops to Q2_K.
  EXPECT_EQ(tinyllama("IQ2_XXS", 1)("blk.5.attn_v.weight"), DType::Q2_K);
  // Tied embeddings: token_embd takes the output's type.
  EXPECT_EQ(tinyllama("IQ2_XXS", 8, {}, true)("token_embd.weight"), DType::Q5_K);

  m = tinyllama("IQ1_S");
  EXPECT_EQ(m("blk.3.attn_output.weight"), DType::IQ2_XXS);
  EXPECT_EQ(m("blk.3.attn_q.weight"), DType::IQ1_S);
  EXPECT_EQ(m("blk.0.ffn_down.weight"), DType::Q2_K);

  // IQ2_M: mostly IQ2_S, IQ3_S where the 1-2-bit types use Q2_K, attn_output IQ3_S.
  m = tinyllama("IQ2_M");
  EXPECT_EQ(m("blk.4.attn_q.weight"), DType::IQ2_S);
  EXPECT_EQ(m("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(m("blk.1.ffn_down.weight"), DType::IQ3_S);
  EXPECT_EQ(m("blk.4.attn_output.weight"), DType::IQ3_S);
  EXPECT_EQ(tinyllama("IQ2_M", 1)("blk.4.attn_v.weight"), DType::IQ3_S);
  EXPECT_EQ(tinyllama("IQ2_S")("blk.4.attn_q.weight"), DType::IQ2_XS);

  // IQ3_XS: IQ3_S, attn_q/k IQ3_XXS, the middle layers' gate/up IQ3_XXS (layers 2..18 of 22).
  m = tinyllama("IQ3_XS");
  EXPECT_EQ(m("blk.0.attn_q.weight"), DType::IQ3_XXS);
  EXPECT_EQ(m("blk.0.attn_k.weight"), DType::IQ3_XXS);
  EXPECT_EQ(m("blk.1.ffn_gate.weight"), DType::IQ3_S);
  EXPECT_EQ(m("blk.2.ffn_up.weight"), DType::IQ3_XXS);
  EXPECT_EQ(m("blk.18.ffn_gate.weight"), DType::IQ3_XXS);
  EXPECT_EQ(m("blk.19.ffn_up.weight"), DType::IQ3_S);
  EXPECT_EQ(m("blk.5.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(m("output.weight"), DType::Q6_K);

  // IQ3_M: attn_v, attn_output and the first eighth of ffn_down Q4_K.
  m = tinyllama("IQ3_M");
  EXPECT_EQ(m("blk.9.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.9.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.1.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.2.ffn_down.weight"), DType::IQ3_S);

  // IQ3_XXS (with an imatrix): attn_q/k IQ2_S, attn_output IQ3_S, token_embd IQ3_S, output Q5_K.
  m = tinyllama("IQ3_XXS");
  EXPECT_EQ(m("blk.0.attn_q.weight"), DType::IQ2_S);
  EXPECT_EQ(m("blk.0.attn_output.weight"), DType::IQ3_S);
  EXPECT_EQ(m("blk.0.ffn_down.weight"), DType::IQ3_XXS);
  EXPECT_EQ(m("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(m("output.weight"), DType::Q5_K);

  m = tinyllama("IQ4_XS");
  EXPECT_EQ(m("blk.0.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(m("blk.0.ffn_down.weight"), DType::IQ4_XS);
  EXPECT_EQ(m("output.weight"), DType::Q6_K);

  m = tinyllama("TQ1_0");
  EXPECT_EQ(m("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(m("output.weight"), DType::Q6_K);
  EXPECT_EQ(m("blk.0.ffn_up.weight"), DType::TQ1_0);

  // Q4_K_M through the whole-list walk: use_more_bits layers' attn_v / ffn_down Q6_K.
  m = tinyllama("Q4_K_M");
  EXPECT_EQ(m("blk.1.attn_v.weight"), DType::Q6_K);
  EXPECT_EQ(m("blk.2.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.4.ffn_down.weight"), DType::Q6_K);
  EXPECT_EQ(m("blk.5.ffn_down.weight"), DType::Q4_K);
}

// Kimi K2's real counts (61 layers, 384 experts), planned without writing.
Deepseek2Plan kimi_k2(const std::string& type, std::vector<std::string> tensor_types = {}) {
  SynthOptions o;
  o.arch = "deepseek2";
  o.preset = "kimi-k2";
  o.type = type;
  o.tensor_types = std::move(tensor_types);
  o.dry_run = true;
  return plan_deepseek2(o, 163840);
}

DType type_in(const Deepseek2Plan& p, const std::string& name) {
  for (const SynthTensor& t : p.tensors)
    if (t.name == name) return t.type;
  ADD_FAILURE() << "no tensor " << name;
  return DType::F32;
}

TEST(QuantMix, KimiK2ShapeFollowsLlamaCppRulesExpertsIncluded) {
  const Deepseek2Plan p = kimi_k2("IQ2_XXS");
  EXPECT_EQ(p.file_type, 19);
  // llama.cpp's first-eighth rule counts ffn_down tensors in its order (layer,
  // then name): 61 / 8 = 7 of them: blk.0's dense one, then ffn_down_exps and
  // ffn_down_shexp of blocks 1-3.
  EXPECT_EQ(type_in(p, "blk.0.ffn_down.weight"), DType::Q2_K);
  EXPECT_EQ(type_in(p, "blk.3.ffn_down_exps.weight"), DType::Q2_K);
  EXPECT_EQ(type_in(p, "blk.3.ffn_down_shexp.weight"), DType::Q2_K);
  EXPECT_EQ(type_in(p, "blk.4.ffn_down_exps.weight"), DType::IQ2_XXS);
  EXPECT_EQ(type_in(p, "blk.4.ffn_gate_exps.weight"), DType::IQ2_XXS);
  EXPECT_EQ(type_in(p, "blk.4.attn_output.weight"), DType::IQ2_XXS);
  EXPECT_EQ(type_in(p, "blk.4.attn_k_b.weight"), DType::IQ4_NL);  // 128-wide rows: llama.cpp's fallback
  EXPECT_EQ(type_in(p, "blk.4.ffn_gate_inp.weight"), DType::F32);
  EXPECT_EQ(type_in(p, "output.weight"), DType::Q5_K);
  EXPECT_EQ(type_in(p, "token_embd.weight"), DType::Q2_K);

  // IQ1_M: attn_output IQ2_XXS.
  EXPECT_EQ(type_in(kimi_k2("IQ1_M"), "blk.9.attn_output.weight"), DType::IQ2_XXS);
  // The legacy rule stays: Q4_K experts Q4_K, the rest Q4_K_M (shared ffn_down on more-bits layers Q6_K).
  const Deepseek2Plan q = kimi_k2("Q4_K");
  EXPECT_EQ(type_in(q, "blk.60.ffn_down_exps.weight"), DType::Q4_K);
  EXPECT_EQ(type_in(q, "blk.60.ffn_down_shexp.weight"), DType::Q6_K);
}

TEST(QuantMix, DynamicMixTypesByTensorClass) {
  const Deepseek2Plan p = kimi_k2("UD-IQ1_S");
  EXPECT_EQ(p.file_type, 24);
  EXPECT_EQ(type_in(p, "blk.7.ffn_gate_exps.weight"), DType::IQ1_S);
  EXPECT_EQ(type_in(p, "blk.7.ffn_up_exps.weight"), DType::IQ1_S);
  EXPECT_EQ(type_in(p, "blk.7.ffn_down_exps.weight"), DType::IQ2_XXS);
  EXPECT_EQ(type_in(p, "blk.7.ffn_gate_shexp.weight"), DType::Q4_K);
  EXPECT_EQ(type_in(p, "blk.7.ffn_down_shexp.weight"), DType::Q6_K);
  EXPECT_EQ(type_in(p, "blk.0.ffn_up.weight"), DType::Q4_K);
  EXPECT_EQ(type_in(p, "blk.0.ffn_down.weight"), DType::Q6_K);
  EXPECT_EQ(type_in(p, "blk.7.attn_q_b.weight"), DType::Q4_K);
  EXPECT_EQ(type_in(p, "blk.7.attn_k_b.weight"), DType::Q5_0);  // Q4_K's fallback for 128-wide rows
  EXPECT_EQ(type_in(p, "token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(type_in(p, "output.weight"), DType::Q6_K);
  EXPECT_EQ(type_in(p, "blk.7.attn_norm.weight"), DType::F32);
  // The routed experts are ~1.7 bits a weight: (2 x 1.5625 + 2.0625) / 3.
  uint64_t bytes = 0, weights = 0;
  for (const SynthTensor& t : p.tensors)
    if (t.routed_expert) {
      bytes += t.bytes;
      weights += (uint64_t)(t.shape[0] * t.shape[1] * t.shape[2]);
    }
  EXPECT_NEAR(8.0 * (double)bytes / (double)weights, (2 * 1.5625 + 2.0625) / 3, 1e-9);
  EXPECT_EQ(type_in(kimi_k2("UD-IQ2_XXS"), "blk.7.ffn_down_exps.weight"), DType::Q2_K);
}

TEST(QuantMix, TensorTypeOverridesComeFirstAndPureSkipsTheRules) {
  MixOptions mix;
  mix.overrides.push_back(parse_type_override("ATTN_V=Q8_0"));  // lower-cased, as llama-quantize does
  mix.overrides.push_back(parse_type_override("blk\\.1\\.ffn_(gate|up)=Q4_K"));
  mix.overrides.push_back(parse_type_override("ffn_.*=IQ4_XS"));  // first match wins: blk.1 gate/up stay Q4_K
  const Mixed m = tinyllama("IQ2_XXS", 8, mix);
  EXPECT_EQ(m("blk.3.attn_v.weight"), DType::Q8_0);
  EXPECT_EQ(m("blk.1.ffn_gate.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.1.ffn_up.weight"), DType::Q4_K);
  EXPECT_EQ(m("blk.1.ffn_down.weight"), DType::IQ4_XS);
  EXPECT_EQ(m("blk.2.ffn_gate.weight"), DType::IQ4_XS);
  EXPECT_EQ(m("blk.2.attn_q.weight"), DType::IQ2_XXS);
  EXPECT_EQ(m("blk.2.attn_norm.weight"), DType::F32);  // never quantized, whatever matches

  MixOptions pure;
  pure.pure = true;
  const Mixed p = tinyllama("IQ2_M", 8, pure);
  for (const char* name : {"output.weight", "token_embd.weight", "blk.0.ffn_down.weight", "blk.0.attn_v.weight"})
    EXPECT_EQ(p(name), DType::IQ2_S) << name;

  EXPECT_THROW(parse_type_override("attn_v"), Error);
  EXPECT_THROW(parse_type_override("=Q8_0"), Error);
  EXPECT_THROW(parse_type_override("attn_v=Q9_9"), Error);
  EXPECT_THROW(parse_type_override("attn_(v=Q8_0"), Error);

  // Through the writer: a tiny llama with an override.
  SynthOptions o;
  o.preset = "tiny";
  o.type = "IQ2_XXS";
  o.tensor_types = {"attn_q=Q8_0", "output=Q6_K"};
  o.vocab_from = kShared + "/models/llama-2-tiny-random.gguf";
  o.out = temp_dir() + "/override.gguf";
  o.n_threads = 2;
  synth_model(o);
  const gguf::File f = gguf::open(o.out);
  EXPECT_EQ(f.manifest.require("blk.0.attn_q.weight").type, DType::Q8_0);
  EXPECT_EQ(f.manifest.require("output.weight").type, DType::Q6_K);
  EXPECT_EQ(f.manifest.require("blk.0.attn_k.weight").type, DType::IQ2_XXS);
  EXPECT_EQ(f.get_int("general.file_type"), 19);
}

struct CliRun {
  int status;
  std::string out;
};
CliRun run_spool(const std::string& args) {
  const std::string out = temp_dir() + "/stdout";
  const int rc = std::system((kBin + " " + args + " >" + out + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::slurp(out)};
}

TEST(QuantMix, InspectPrintsTheMixOfASynthesizedDynamicFile) {
  SynthOptions o;
  o.arch = "deepseek2";
  o.preset = "deepseek2-tiny";
  o.type = "UD-IQ1_S";
  o.vocab_from = kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf";
  o.out = temp_dir() + "/ud.gguf";
  o.n_threads = 2;
  synth_model(o);
  const gguf::File f = gguf::open(o.out);
  EXPECT_EQ(f.get_int("general.file_type"), 24);

  // The class table adds up to the file's tensor bytes, and each class has the mix's types.
  const std::vector<ClassMix> mix = class_mix(f.manifest);
  uint64_t sum = 0;
  std::map<TensorClass, const ClassMix*> by;
  for (const ClassMix& c : mix) sum += c.bytes, by[c.cls] = &c;
  EXPECT_EQ(sum, f.manifest.total_bytes());
  ASSERT_TRUE(by.count(TensorClass::RoutedExperts));
  const ClassMix& ex = *by[TensorClass::RoutedExperts];
  EXPECT_EQ(ex.n_tensors, 6);  // 2 MoE layers x gate/up/down, however the manifest slices them
  EXPECT_EQ(ex.bytes_by_type.size(), 2u);
  EXPECT_GT(ex.bytes_by_type.at("IQ1_S"), 0u);
  EXPECT_GT(ex.bytes_by_type.at("IQ2_XXS"), 0u);
  EXPECT_EQ(by[TensorClass::Output]->bytes_by_type.begin()->first, "Q6_K");
  EXPECT_EQ(by[TensorClass::SharedExperts]->bytes_by_type.size(), 2u);  // Q4_K gate/up, Q6_K down
  EXPECT_EQ(by[TensorClass::Norms]->bytes_by_type.begin()->first, "F32");

  const CliRun r = run_spool("inspect " + o.out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("file type:     IQ1_S - 1.5625 bpw (general.file_type 24)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mix by class:"), std::string::npos) << r.out;
  const size_t line = r.out.find("  routed experts ");
  ASSERT_NE(line, std::string::npos) << r.out;
  const std::string experts = r.out.substr(line, r.out.find('\n', line) - line);
  EXPECT_NE(experts.find("IQ1_S"), std::string::npos) << experts;
  EXPECT_NE(experts.find("IQ2_XXS"), std::string::npos) << experts;
  char share[32];
  std::snprintf(share, sizeof share, "%.2f%%", 100.0 * (double)ex.bytes / (double)f.manifest.total_bytes());
  EXPECT_NE(experts.find(share), std::string::npos) << experts << " (want " << share << ")";

  // The file runs: a forward pass gives finite logits.
  LoadOptions lo;
  lo.n_threads = 2;
  auto model = load_model(o.out, lo);
  Session session(*model, 16, 16);
  for (float x : session.feed({1, 2, 3, 4}, true)) ASSERT_TRUE(std::isfinite(x));
}

TEST(QuantMix, PlanTypeGivesBytesFromTheTypeTable) {
  PlanTypes q4, iq2, iq2_experts;
  q4.type = "Q4_K";
  iq2.type = "IQ2_XXS";
  iq2_experts.type = "Q4_K";
  iq2_experts.tensor_types = {"_exps=IQ2_XXS"};
  const CostModel a = cost_model_deepseek2("kimi-k2", q4), b = cost_model_deepseek2("kimi-k2", iq2),
                  c = cost_model_deepseek2("kimi-k2", iq2_experts);
  PlanOptions o;
  o.device.name = "test";
  o.device.ram_bytes = 16e9;
  o.device.budget_bytes = 8e9;
  o.device.read_bw = 1e9;
  const CostReport ra = compute_cost(a, o), rb = compute_cost(b, o), rc = compute_cost(c, o);
  // Experts alone retyped: exactly IQ2_XXS's bytes per 256 weights over Q4_K's.
  const double ratio = (double)dtype_traits(DType::IQ2_XXS).block_bytes / (double)dtype_traits(DType::Q4_K).block_bytes;
  EXPECT_DOUBLE_EQ((double)rc.tok_experts / (double)ra.tok_experts, ratio);
  EXPECT_DOUBLE_EQ((double)rc.experts_total / (double)ra.experts_total, ratio);
  EXPECT_EQ(rc.dense_total, ra.dense_total);
  // llama.cpp's IQ2_XXS mix: a few ffn_down stay Q2_K, so a little above the pure ratio.
  const double mixed = (double)rb.tok_experts / (double)ra.tok_experts;
  EXPECT_GT(mixed, ratio);
  EXPECT_LT(mixed, ratio * 1.05);
  EXPECT_LT(rb.read_per_token, ra.read_per_token);
  EXPECT_GT(rb.decode_tok_s, 1.5 * ra.decode_tok_s);
  EXPECT_EQ(a.n_vocab, 163840);
  EXPECT_THROW(cost_model_deepseek2("kimi-k2", PlanTypes{}), Error);  // no native FP8 here

  // A file retyped from its shapes equals the file written in that type.
  SynthOptions so;
  so.arch = "deepseek2";
  so.preset = "deepseek2-tiny";
  so.type = "Q4_K";
  so.vocab_from = kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf";
  so.out = temp_dir() + "/plan-q4k.gguf";
  so.n_threads = 2;
  synth_model(so);
  so.type = "IQ2_XXS";
  so.out = temp_dir() + "/plan-iq2.gguf";
  synth_model(so);
  PlanTypes re;
  re.type = "IQ2_XXS";
  const CostModel retyped = cost_model_from_gguf(gguf::open(temp_dir() + "/plan-q4k.gguf"), "q4k", re);
  const CostModel written = cost_model_from_gguf(gguf::open(so.out), so.out);
  EXPECT_EQ(compute_cost(retyped, o).total, compute_cost(written, o).total);
  EXPECT_EQ(compute_cost(retyped, o).tok_experts, compute_cost(written, o).tok_experts);

  const CliRun r = run_spool("plan --preset kimi-k2 --type UD-IQ1_S --device phone");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("IQ1_S"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode:"), std::string::npos) << r.out;
}

// A file mixing types, one of which spool cannot read, is refused naming that tensor and its type.
TEST(QuantMix, MixedFileWithAnUnreadableTypeIsRefusedByName) {
  const std::string path = temp_dir() + "/mixed.gguf";
  {
    gguf::Writer w;
    w.set("general.architecture", gguf::value_string("llama"));
    const std::vector<std::pair<std::string, DType>> tensors = {
        {"blk.0.ffn_up_exps.weight", DType::IQ1_S}, {"blk.0.ffn_down_exps.weight", DType::IQ2_XXS},
        {"blk.0.attn_q.weight", DType::Q4_K}};
    for (const auto& [name, type] : tensors) w.add_tensor(name, type, {256, 2});
    w.begin(path);
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::vector<uint8_t> zero(row_bytes(tensors[i].second, 256) * 2, 0);
      w.write_tensor(i, zero.data());
    }
    w.finish();
  }
  ASSERT_NO_THROW(gguf::open(path));
  std::string bytes = test::slurp(path);
  // The type id follows the name, its dimension count and two 64-bit dimensions.
  const std::string name = "blk.0.ffn_down_exps.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;
  uint32_t id = 0;
  std::memcpy(&id, &bytes[type_at], 4);
  ASSERT_EQ(id, (uint32_t)DType::IQ2_XXS);
  auto error_with_type = [&](uint32_t new_id) {
    std::string patched = bytes;
    std::memcpy(&patched[type_at], &new_id, 4);
    const std::string p = temp_dir() + "/patched.gguf";
    FILE* fp = std::fopen(p.c_str(), "wb");
    std::fwrite(patched.data(), 1, patched.size(), fp);
    std::fclose(fp);
    try {
      gguf::open(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string e = error_with_type(40);
  EXPECT_NE(e.find("tensor '" + name + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("NVFP4"), std::string::npos) << e;
  e = error_with_type(31);
  EXPECT_NE(e.find("tensor '" + name + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("Q4_0_4_4"), std::string::npos) << e;
  e = error_with_type(77);
  EXPECT_NE(e.find("tensor '" + name + "' has unsupported tensor type id 77"), std::string::npos) << e;
  const CliRun r = run_spool("inspect " + temp_dir() + "/patched.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
}

}  // namespace
}  // namespace spool
