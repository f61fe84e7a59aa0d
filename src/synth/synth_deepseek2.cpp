// Synthetic deepseek2 (DeepSeek-V3 / Kimi-K2) GGUF files: presets, the tensor
// plan in the layout llama.cpp's deepseek2 loader accepts (split attn_k_b /
// attn_v_b, stacked experts [n_embd, n_ff_exp, n_expert]), fitting layer and
// expert counts to a file size, the rank-based router bias, and streaming the
// data to disk: routed experts as Q4_K blocks made from random bytes, other
// tensors from pools of pre-quantized blocks, in parallel, in 32 MiB chunks.
#include "synth/synth_deepseek2.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/moe.h"
#include "synth/synth_fill.h"
#include "synth/synth_quant_mix.h"

namespace spool {
namespace {

using synth::fmt;
using synth::mix64;

// The 512-token byte-level BPE of the qwen2 fixture: keeps token_embd/output small.
constexpr const char* kDefaultVocab = "fixtures/gguf/qwen2-tiny.f32.gguf";
constexpr float kWeightStd = 0.02f;  // GPT-2/Llama initialisation: activations stay well in range
constexpr int kDefaultFitLayers = 8; // 1 dense + 7 MoE (Kimi), as the streaming workload uses

// Kimi-K2: moonshotai/Kimi-K2-Instruct config.json (n_group 1, topk_group 1,
// routed_scaling_factor 2.827, yarn factor 32 from 4096, beta_fast/slow 1,
// mscale/mscale_all_dim 1, rope_theta 50000). DeepSeek-V3: deepseek-ai/DeepSeek-V3
// config.json (128 heads, 3 dense layers, n_group 8, topk_group 4, scale 2.5,
// yarn factor 40, beta_fast 32, rope_theta 10000).
#define KIMI_K2(name, layers, experts)                                                                      \
  {name, 7168, 64, 1536, 512, 128, 64, 128, 18432, 2048, layers, experts, 8, 1, 1, 1, 1, 2.827f, 50000.0f, \
   32.0f, 4096, 1.0f, 1.0f, 1.0f, 1.0f, 131072, 1e-6f, 61, 384, kDefaultSkew, 163840}
#define DEEPSEEK_V3(name, layers, experts)                                                                   \
  {name, 7168, 128, 1536, 512, 128, 64, 128, 18432, 2048, layers, experts, 8, 1, 3, 8, 4, 2.5f, 10000.0f, \
   40.0f, 4096, 32.0f, 1.0f, 1.0f, 1.0f, 163840, 1e-6f, 61, 256, kDefaultSkew, 129280}

constexpr float kDefaultSkew = 0.05f;

constexpr Deepseek2Preset kPresets[] = {
    // Same structure as Kimi-K2 with small dims, for tests: 1 dense + 2 MoE layers, 16 experts top-4.
    {"deepseek2-tiny", 256, 4, 128, 64, 32, 16, 32, 512, 256, 3, 16, 4, 1, 1, 1, 1, 2.827f, 50000.0f, 32.0f, 256, 1.0f,
     1.0f, 1.0f, 1.0f, 8192, 1e-6f, 3, 16, kDefaultSkew},
    // The tiny structure with DeepSeek-V3's group stage (4 groups, best 2 kept).
    {"deepseek-v3-tiny", 256, 4, 128, 64, 32, 16, 32, 512, 256, 3, 16, 4, 1, 1, 4, 2, 2.5f, 10000.0f, 40.0f, 256, 32.0f,
     1.0f, 1.0f, 1.0f, 8192, 1e-6f, 3, 16, kDefaultSkew},
    KIMI_K2("kimi-k2-mini", 4, 32),   // ~3 GB at Q4_K
    KIMI_K2("kimi-k2-scaled", 0, 0),  // fitted to --target-size
    KIMI_K2("kimi-k2", 61, 384),      // the real counts (~550 GB at Q4_K): for --dry-run plans
    DEEPSEEK_V3("deepseek-v3-scaled", 0, 0),
    DEEPSEEK_V3("deepseek-v3", 61, 256),
};
#undef KIMI_K2
#undef DEEPSEEK_V3

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ---- tensor types -----------------------------------------------------------------

// --type T: a uniform type or Q4_K_M gives the routed experts T itself (its
// base type) and the other matrices T, except that Q4_K gives them llama.cpp's
// Q4_K_M mix. llama.cpp's other file types (IQ2_XXS, IQ1_M, TQ1_0, ...) and
// the dynamic mixes (UD-IQ1_S, ...) assign every tensor, experts included, by
// their own rules. --tensor-type overrides come first either way.
// Norms, the router and exp_probs_b stay F32 (llama.cpp never quantizes them).
struct TypeRule {
  const QuantRecipe* recipe;      // what --type named
  const QuantRecipe* nonexpert;   // recipe for everything else
  const QuantRecipe* expert;      // the routed experts' own recipe; nullptr: the file's rules
  MixOptions mix;
};

TypeRule type_rule(const SynthOptions& o) {
  const QuantRecipe* r = &synth::require_quant_recipe(o.type);
  const MixOptions mix = synth::mix_options(o);
  if (r->rule == MixRule::Uniform || std::string(r->name) == "Q4_K_M") {
    const QuantRecipe* mixed = r->base == DType::Q4_K ? find_quant_recipe("Q4_K_M") : r;
    return {r, mixed, find_quant_recipe(dtype_name(r->base)), mix};
  }
  return {r, r, nullptr, mix};
}

// ---- the tensor plan --------------------------------------------------------------

class PlanBuilder {
 public:
  PlanBuilder(const Deepseek2Preset& s, int n_vocab, const TypeRule& rule) : s_(s), n_vocab_(n_vocab), rule_(rule) {}

  std::vector<SynthTensor> build() {
    const int64_t E = s_.n_embd, H = s_.n_head, k_mla = s_.qk_nope + s_.qk_rope;
    add("token_embd.weight", {E, n_vocab_}, SynthInit::Weight, -1);
    for (int l = 0; l < s_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {E}, SynthInit::NearOne, l);
      add(p + "attn_q_a.weight", {E, s_.q_lora_rank}, SynthInit::Weight, l);
      add(p + "attn_q_a_norm.weight", {s_.q_lora_rank}, SynthInit::NearOne, l);
      add(p + "attn_q_b.weight", {s_.q_lora_rank, H * k_mla}, SynthInit::Weight, l);
      add(p + "attn_kv_a_mqa.weight", {E, s_.kv_lora_rank + s_.qk_rope}, SynthInit::Weight, l);
      add(p + "attn_kv_a_norm.weight", {s_.kv_lora_rank}, SynthInit::NearOne, l);
      add(p + "attn_k_b.weight", {s_.qk_nope, s_.kv_lora_rank, H}, SynthInit::Weight, l);
      add(p + "attn_v_b.weight", {s_.kv_lora_rank, s_.v_head, H}, SynthInit::Weight, l);
      add(p + "attn_output.weight", {H * s_.v_head, E}, SynthInit::Weight, l);
      add(p + "ffn_norm.weight", {E}, SynthInit::NearOne, l);
      if (l < s_.n_dense_lead) {
        add(p + "ffn_gate.weight", {E, s_.n_ff_dense}, SynthInit::Weight, l);
        add(p + "ffn_up.weight", {E, s_.n_ff_dense}, SynthInit::Weight, l);
        add(p + "ffn_down.weight", {s_.n_ff_dense, E}, SynthInit::Weight, l);
        continue;
      }
      const int64_t F = s_.n_ff_exp, N = s_.n_expert, S = (int64_t)s_.n_ff_exp * s_.n_expert_shared;
      add(p + "ffn_gate_inp.weight", {E, N}, SynthInit::Router, l);
      add(p + "exp_probs_b.bias", {N}, SynthInit::ChoiceBias, l);
      add(p + "ffn_gate_exps.weight", {E, F, N}, SynthInit::Weight, l, true);
      add(p + "ffn_up_exps.weight", {E, F, N}, SynthInit::Weight, l, true);
      add(p + "ffn_down_exps.weight", {F, E, N}, SynthInit::Weight, l, true);
      if (S > 0) {
        add(p + "ffn_gate_shexp.weight", {E, S}, SynthInit::Weight, l);
        add(p + "ffn_up_shexp.weight", {E, S}, SynthInit::Weight, l);
        add(p + "ffn_down_shexp.weight", {S, E}, SynthInit::Weight, l);
      }
    }
    add("output_norm.weight", {E}, SynthInit::NearOne, -1);
    add("output.weight", {E, n_vocab_}, SynthInit::Weight, -1);
    assign_types();
    return std::move(out_);
  }

 private:
  void add(const std::string& name, std::vector<int64_t> shape, SynthInit init, int layer, bool expert = false) {
    SynthTensor t{name, DType::F32, std::move(shape), init, layer};
    t.routed_expert = expert;
    out_.push_back(std::move(t));
  }

  // Types over the whole list (llama.cpp's rules keep running counters), then bytes.
  void assign_types() {
    std::vector<MixTensor> mt;
    for (const SynthTensor& t : out_)
      mt.push_back({t.name, t.shape, t.init == SynthInit::Weight, t.routed_expert ? rule_.expert : nullptr});
    MixModel model;
    model.n_layer = s_.n_layer;
    model.n_expert = s_.n_expert;
    model.n_gqa = s_.n_head;  // head_count_kv 1: MQA over the latent
    const std::vector<DType> types = mix_types(*rule_.nonexpert, model, mt, rule_.mix);
    for (size_t i = 0; i < out_.size(); ++i) {
      SynthTensor& t = out_[i];
      t.type = types[i];
      // Experts of the legacy rule must be the requested type itself, with no fallback.
      if (t.routed_expert && rule_.expert && rule_.mix.overrides.empty() && t.type != rule_.expert->base)
        throw Error(std::string("synth: expert rows of ") + std::to_string(t.shape[0]) + " values do not fit " +
                    dtype_name(rule_.expert->base) + " blocks");
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const DTypeTraits& tr = dtype_traits(t.type);
      t.bytes = (uint64_t)(n / tr.block_size) * tr.block_bytes;
    }
  }

  const Deepseek2Preset& s_;
  int n_vocab_;
  TypeRule rule_;
  std::vector<SynthTensor> out_;
};

void set_metadata(Deepseek2Plan& plan, const std::string& preset_name, uint64_t seed, bool quantized) {
  using namespace gguf;
  const Deepseek2Preset& s = plan.shape;
  auto& m = plan.metadata;
  auto set = [&](const std::string& key, Value v) { m.emplace_back(key, std::move(v)); };
  const std::string a = "deepseek2.";
  set("general.architecture", value_string("deepseek2"));
  set("general.name", value_string(preset_name + "-synthetic (" + std::to_string(s.n_layer) + " layers x " +
                                   std::to_string(s.n_expert) + " experts, random weights)"));
  set("general.description", value_string("random weights from spool synth, seed " + std::to_string(seed) +
                                           "; output is gibberish by design"));
  set("general.file_type", value_u32((uint32_t)plan.file_type));
  if (quantized) set("general.quantization_version", value_u32(2));
  set(a + "block_count", value_u32((uint32_t)s.n_layer));
  set(a + "context_length", value_u32((uint32_t)s.n_ctx));
  set(a + "embedding_length", value_u32((uint32_t)s.n_embd));
  set(a + "feed_forward_length", value_u32((uint32_t)s.n_ff_dense));
  set(a + "attention.head_count", value_u32((uint32_t)s.n_head));
  set(a + "attention.head_count_kv", value_u32(1));  // MLA caches one latent row: MQA over it
  set(a + "attention.layer_norm_rms_epsilon", value_f32(s.rms_eps));
  set(a + "rope.freq_base", value_f32(s.rope_base));
  set(a + "rope.dimension_count", value_u32((uint32_t)s.qk_rope));
  if (s.yarn_factor > 0) {
    set(a + "rope.scaling.type", value_string("yarn"));
    set(a + "rope.scaling.factor", value_f32(s.yarn_factor));
    set(a + "rope.scaling.original_context_length", value_u32((uint32_t)s.yarn_orig_ctx));
    set(a + "rope.scaling.yarn_beta_fast", value_f32(s.yarn_beta_fast));
    set(a + "rope.scaling.yarn_beta_slow", value_f32(s.yarn_beta_slow));
    // llama.cpp's converter writes 0.1 * mscale_all_dim (its loader divides by 0.1 again).
    set(a + "rope.scaling.yarn_log_multiplier", value_f32(0.1f * s.mscale_all_dim));
  }
  set(a + "expert_count", value_u32((uint32_t)s.n_expert));
  set(a + "expert_used_count", value_u32((uint32_t)s.n_expert_used));
  set(a + "expert_group_count", value_u32((uint32_t)s.n_group));
  set(a + "expert_group_used_count", value_u32((uint32_t)s.n_group_used));
  set(a + "expert_gating_func", value_u32(2));  // sigmoid
  set(a + "attention.key_length", value_u32((uint32_t)(s.kv_lora_rank + s.qk_rope)));
  set(a + "attention.value_length", value_u32((uint32_t)s.kv_lora_rank));
  set(a + "attention.key_length_mla", value_u32((uint32_t)(s.qk_nope + s.qk_rope)));
  set(a + "attention.value_length_mla", value_u32((uint32_t)s.v_head));
  set(a + "leading_dense_block_count", value_u32((uint32_t)s.n_dense_lead));
  set(a + "vocab_size", value_u32((uint32_t)plan.n_vocab));
  set(a + "attention.q_lora_rank", value_u32((uint32_t)s.q_lora_rank));
  set(a + "attention.kv_lora_rank", value_u32((uint32_t)s.kv_lora_rank));
  set(a + "expert_feed_forward_length", value_u32((uint32_t)s.n_ff_exp));
  set(a + "expert_shared_count", value_u32((uint32_t)s.n_expert_shared));
  set(a + "expert_weights_scale", value_f32(s.routed_scale));
  set(a + "expert_weights_norm", value_bool(true));
}

bool valid_expert_count(const Deepseek2Preset& s, int n) {
  if (n < s.n_expert_used || n < 1) return false;
  if (s.n_group > 1)
    return n % s.n_group == 0 && (int64_t)s.n_group_used * (n / s.n_group) >= s.n_expert_used;
  return true;
}

bool lite_layer_count(int n_layer) { return n_layer == 26 || n_layer == 27; }

// Chooses n_layer / n_expert. Returns the rule used, for the plan text.
std::string fit_counts(Deepseek2Preset& s, const SynthOptions& o, const std::function<uint64_t()>& size_now) {
  const uint64_t target = o.target_size;
  if (o.n_layer > 0) s.n_layer = o.n_layer;
  if (o.n_expert > 0) s.n_expert = o.n_expert;
  if (target == 0 || (o.n_layer > 0 && o.n_expert > 0)) {
    if (s.n_layer <= 0 || s.n_expert <= 0)
      throw Error(std::string("synth: preset '") + s.name +
                  "' is fitted to a file size: give --target-size (or both --n-layer and --n-expert)");
    return target ? "--n-layer and --n-expert given: --target-size ignored" : "the preset's counts";
  }
  const std::string tgt = fmt("%.3f GiB", target / 1073741824.0);
  if (o.n_expert > 0) {  // fit layers
    s.n_layer = s.n_dense_lead + 1;
    const uint64_t smallest = size_now();
    if (smallest > target) throw Error("synth: even " + std::to_string(s.n_layer) + " layers do not fit " + tgt);
    for (int l = s.n_layer + 1; l <= s.real_layers; ++l) {
      if (lite_layer_count(l)) continue;
      const int keep = s.n_layer;
      s.n_layer = l;
      if (size_now() > target) { s.n_layer = keep; break; }
    }
    return "layers: the most (up to the real " + std::to_string(s.real_layers) + ", never 26/27) whose file fits " +
           tgt + " with " + std::to_string(s.n_expert) + " experts";
  }
  // Fit experts with the layer count fixed; if the real expert count fits, grow layers instead.
  if (s.n_layer <= 0) s.n_layer = std::min(kDefaultFitLayers, s.real_layers);
  int best = 0;
  for (int n = s.real_experts; n >= 1; --n) {
    if (!valid_expert_count(s, n)) continue;
    s.n_expert = n;
    if (size_now() <= target) { best = n; break; }
  }
  if (best == 0) throw Error("synth: no routed-expert count fits " + tgt + " with " + std::to_string(s.n_layer) + " layers");
  s.n_expert = best;
  std::string rule = "experts: the most (a multiple of the " + std::to_string(s.n_group) + " groups, up to the real " +
                     std::to_string(s.real_experts) + ") whose file fits " + tgt + " with " +
                     std::to_string(s.n_layer) + " layers";
  if (best == s.real_experts && o.n_layer <= 0) {
    for (int l = s.n_layer + 1; l <= s.real_layers; ++l) {
      if (lite_layer_count(l)) continue;
      const int keep = s.n_layer;
      s.n_layer = l;
      if (size_now() > target) { s.n_layer = keep; break; }
    }
    rule += "; the real expert count fits, so layers grew to " + std::to_string(s.n_layer);
  }
  return rule;
}

}  // namespace

const Deepseek2Preset* find_deepseek2_preset(const std::string& name) {
  for (const Deepseek2Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

std::vector<std::string> deepseek2_preset_names() {
  std::vector<std::string> out;
  for (const Deepseek2Preset& p : kPresets) out.push_back(p.name);
  return out;
}

uint64_t Deepseek2Plan::bytes_per_token() const {
  uint64_t embd_row = 0;
  for (const SynthTensor& t : tensors)
    if (t.name == "token_embd.weight") embd_row = t.bytes / (uint64_t)t.shape[1];
  uint64_t embd = 0;
  for (const SynthTensor& t : tensors)
    if (t.name == "token_embd.weight") embd = t.bytes;
  return expert_bytes_per_token() + nonexpert_bytes - embd + embd_row;
}

Deepseek2Plan plan_deepseek2(const SynthOptions& o, int n_vocab_override) {
  const std::string preset_name = o.preset == "tiny" && o.arch == "deepseek2" ? "deepseek2-tiny" : o.preset;
  const Deepseek2Preset* preset = find_deepseek2_preset(preset_name);
  if (!preset) {
    std::string list;
    for (const auto& n : deepseek2_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("synth: --arch deepseek2 needs a deepseek2 preset, not '" + o.preset + "' (presets: " + list + ")");
  }
  if (!o.arch.empty() && o.arch != "deepseek2")
    throw Error("preset '" + preset_name + "' is a deepseek2 model; --arch " + o.arch + " does not match");
  if (o.out.empty() && !o.dry_run) throw Error("synth needs an output file (--out FILE.gguf)");
  if (o.n_layer < 0 || o.n_expert < 0) throw Error("synth: --n-layer and --n-expert must be positive");
  const TypeRule rule = type_rule(o);

  Deepseek2Plan plan;
  plan.shape = *preset;
  synth::VocabKeys vocab;
  if (n_vocab_override > 0) {
    vocab.n_vocab = n_vocab_override;
  } else {
    plan.vocab_from = o.vocab_from.empty() ? resolve_shared_file(kDefaultVocab) : o.vocab_from;
    vocab = synth::measure_vocab(plan.vocab_from);
  }
  plan.n_vocab = vocab.n_vocab;
  plan.expert_type = rule.recipe->base;
  plan.file_type = rule.nonexpert->file_type;
  plan.type_name = rule.recipe->name;
  plan.router_skew = std::isnan(o.router_skew) ? preset->router_skew : o.router_skew;
  if (!(plan.router_skew >= 0) || plan.router_skew > 10) throw Error("synth: --router-skew must be in 0..10");
  const bool quantized = dtype_traits(rule.recipe->base).quantized;

  auto rebuild = [&] {
    plan.tensors = PlanBuilder(plan.shape, plan.n_vocab, rule).build();
    plan.metadata.clear();
    set_metadata(plan, preset_name, o.seed, quantized);
    return synth::planned_file_bytes(plan.metadata, synth::tensor_headers(plan.tensors), vocab.header_bytes);
  };
  plan.fit_rule = fit_counts(plan.shape, o, rebuild);
  const Deepseek2Preset& s = plan.shape;
  if (s.n_layer <= s.n_dense_lead)
    throw Error("synth: " + std::to_string(s.n_layer) + " layers leave no MoE layer after the " +
                std::to_string(s.n_dense_lead) + " dense one(s)");
  if (lite_layer_count(s.n_layer))
    throw Error("synth: llama.cpp treats 26- and 27-layer deepseek2 files as 'lite' (no q_lora); pick another --n-layer");
  if (!valid_expert_count(s, s.n_expert))
    throw Error("synth: " + std::to_string(s.n_expert) + " routed experts do not fit top-" +
                std::to_string(s.n_expert_used) + " routing with " + std::to_string(s.n_group) + " groups (" +
                std::to_string(s.n_group_used) + " used)");
  plan.file_bytes = rebuild();

  for (const SynthTensor& t : plan.tensors) {
    plan.data_bytes = align_up(plan.data_bytes + t.bytes, 32);
    if (t.routed_expert) plan.expert_bytes += t.bytes / (uint64_t)s.n_expert;
    else plan.nonexpert_bytes += t.bytes;
  }
  plan.expert_bytes /= (uint64_t)plan.n_moe_layers();
  for (int l = 0; l < plan.n_moe_layers(); ++l)
    plan.choice_bias.push_back(synth::choice_bias(s.n_expert, plan.router_skew, mix64(o.seed * 0x9E3779B97F4A7C15ull + 1000 + l)));
  return plan;
}

std::vector<double> simulate_router_shares(const Deepseek2Plan& plan, int n_tokens, uint64_t seed) {
  const Deepseek2Preset& s = plan.shape;
  ModelConfig c;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.expert_gating = ExpertGating::Sigmoid;
  c.expert_weights_norm = true;
  c.expert_weights_scale = s.routed_scale;
  c.n_expert_group = s.n_group;
  c.n_expert_group_used = s.n_group_used;
  const std::vector<float>& bias = plan.choice_bias.at(0);
  std::vector<float> logits((size_t)n_tokens * s.n_expert);
  synth::fill_normal(logits.data(), (int64_t)logits.size(), mix64(seed), 0.0f, 1.0f);
  std::vector<int32_t> ids((size_t)n_tokens * s.n_expert_used);
  std::vector<float> weights(ids.size());
  route_experts(c, logits.data(), bias.data(), n_tokens, ids.data(), weights.data());
  std::vector<double> count(s.n_expert, 0.0);
  for (int32_t e : ids) count[e] += 1;
  // Order by the bias: the most popular expert has the largest (least negative) bias.
  std::vector<int> order(s.n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bias[a] > bias[b]; });
  std::vector<double> share(s.n_expert);
  for (int r = 0; r < s.n_expert; ++r) share[r] = count[order[r]] / (double)ids.size();
  return share;
}

std::string describe_plan(const Deepseek2Plan& plan) {
  const Deepseek2Preset& s = plan.shape;
  const double GB = 1e9, MiB = 1048576.0;
  std::string out;
  out += fmt("deepseek2 %s: n_embd %d, heads %d, q_lora %d, kv_lora %d, qk_nope %d, qk_rope %d, v_head %d, "
             "dense ffn %d, expert ffn %d\n",
             s.name, s.n_embd, s.n_head, s.q_lora_rank, s.kv_lora_rank, s.qk_nope, s.qk_rope, s.v_head, s.n_ff_dense,
             s.n_ff_exp);
  out += fmt("layers %d (%d dense + %d MoE), routed experts %d (top-%d, groups %d/%d, sigmoid + exp_probs_b, scale "
             "%.3f), shared %d, vocab %d (from %s)\n",
             s.n_layer, s.n_dense_lead, plan.n_moe_layers(), s.n_expert, s.n_expert_used, s.n_group, s.n_group_used,
             s.routed_scale, s.n_expert_shared, plan.n_vocab, plan.vocab_from.c_str());
  out += "counts: " + plan.fit_rule + "\n";
  out += fmt("rope: theta %g, yarn factor %g from %d, beta_fast %g, beta_slow %g, mscale %g / %g; context %d; rms eps %g\n",
             s.rope_base, s.yarn_factor, s.yarn_orig_ctx, s.yarn_beta_fast, s.yarn_beta_slow, s.mscale, s.mscale_all_dim,
             s.n_ctx, s.rms_eps);
  // Types: routed experts, then the rest by type.
  std::map<std::string, std::pair<int, uint64_t>> by_type, expert_types;
  uint64_t exp_total = 0;
  for (const SynthTensor& t : plan.tensors) {
    if (t.routed_expert) exp_total += t.bytes;
    auto& [n, b] = (t.routed_expert ? expert_types : by_type)[dtype_name(t.type)];
    ++n;
    b += t.bytes;
  }
  out += fmt("types (--type %s): routed experts", plan.type_name.c_str());
  for (const auto& [name, nb] : expert_types) out += fmt(" %s %d (%.3f GB)", name.c_str(), nb.first, nb.second / GB);
  out += "; other tensors:";
  for (const auto& [name, nb] : by_type) out += fmt(" %s %d (%.3f GB)", name.c_str(), nb.first, nb.second / GB);
  out += "\n";
  out += fmt("one expert (gate+up+down): %llu bytes = %.2f MiB\n", (unsigned long long)plan.expert_bytes,
             plan.expert_bytes / MiB);
  out += fmt("file: %.3f GB = %.3f GiB (%zu tensors): routed experts %.3f GB, everything else %.3f GB\n",
             plan.file_bytes / GB, plan.file_bytes / 1073741824.0, plan.tensors.size(), exp_total / GB,
             plan.nonexpert_bytes / GB);
  out += fmt("per token, nothing cached: routed experts %d x %d x %.2f MiB = %.3f GB; with every other weight "
             "(one token_embd row) %.3f GB\n",
             s.n_expert_used, plan.n_moe_layers(), plan.expert_bytes / MiB, plan.expert_bytes_per_token() / GB,
             plan.bytes_per_token() / GB);
  out += fmt("KV cache: %d layers x (%d + %d) values per token = %d values (%.1f KB in F32)\n", s.n_layer,
             s.kv_lora_rank, s.qk_rope, s.n_layer * (s.kv_lora_rank + s.qk_rope),
             s.n_layer * (s.kv_lora_rank + s.qk_rope) * 4 / 1e3);
  const double real_exp = (double)s.n_expert_used * (s.real_layers - s.n_dense_lead) * plan.expert_bytes;
  out += fmt("(the real model: %d layers x %d experts: %.2f GB of routed experts per token)\n", s.real_layers,
             s.real_experts, real_exp / GB);
  const std::vector<double> share = simulate_router_shares(plan, 20000, 12345);
  const int n = s.n_expert, top10 = std::max(1, n / 10), quarter = std::max(1, n / 4);
  double c10 = 0, c25 = 0, acc = 0;
  int n50 = 0, n90 = 0;
  for (int r = 0; r < n; ++r) {
    acc += share[r];
    if (r < top10) c10 = acc;
    if (r < quarter) c25 = acc;
    if (!n50 && acc >= 0.5) n50 = r + 1;
    if (!n90 && acc >= 0.9) n90 = r + 1;
  }
  out += fmt("router skew %.3g (exp_probs_b = -skew * ln(1 + rank)), simulated on iid N(0,1) logits: top %d experts "
             "take %.0f%% of picks, top %d take %.0f%%; 50%% of picks in %d experts, 90%% in %d; most popular picked "
             "by %.0f%% of tokens, least by %.1f%%\n",
             plan.router_skew, top10, 100 * c10, quarter, 100 * c25, n50, n90, 100 * share[0] * s.n_expert_used,
             100 * share[n - 1] * s.n_expert_used);
  return out;
}

// ---- writing ------------------------------------------------------------------------

namespace {

// Produces any planned tensor's rows; shared by the fill threads.
class TensorFiller {
 public:
  TensorFiller(const Deepseek2Plan& plan, uint64_t seed) : plan_(plan), seed_(seed), weights_(seed, kWeightStd, true) {
    for (const SynthTensor& t : plan.tensors)
      if (t.init == SynthInit::Weight) weights_.prepare(t.type);
  }

  void fill(size_t ti, int64_t row0, int64_t n_rows, uint8_t* dst) const {
    const SynthTensor& t = plan_.tensors[ti];
    const uint64_t tensor_stream = synth::tensor_stream(seed_, ti);
    const int64_t n = t.shape[0];
    const size_t rb = row_bytes(t.type, n);
    thread_local std::vector<float> row;
    row.resize((size_t)n);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint64_t stream = synth::row_stream(tensor_stream, row0 + r);
      uint8_t* out = dst + (size_t)r * rb;
      if (t.init == SynthInit::Weight && weights_.fill_row(t.type, out, n, stream)) continue;
      switch (t.init) {
        case SynthInit::Weight: synth::fill_normal(row.data(), n, stream, 0.0f, kWeightStd); break;
        case SynthInit::NearOne: synth::fill_normal(row.data(), n, stream, 1.0f, kWeightStd); break;
        // Router rows N(0, 1/n_embd): a normalised hidden state gives logits of std ~1.
        case SynthInit::Router: synth::fill_normal(row.data(), n, stream, 0.0f, 1.0f / std::sqrt((float)n)); break;
        case SynthInit::ChoiceBias: {
          const int moe = t.layer - plan_.shape.n_dense_lead;
          std::copy(plan_.choice_bias.at(moe).begin(), plan_.choice_bias.at(moe).end(), row.begin());
          break;
        }
      }
      quantize_row(t.type, row.data(), out, n);
    }
  }

 private:
  const Deepseek2Plan& plan_;
  uint64_t seed_;
  synth::WeightRows weights_;
};

}  // namespace

SynthResult write_deepseek2(const Deepseek2Plan& plan, const SynthOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.out.empty()) throw Error("synth needs an output file (--out FILE.gguf)");
  const TensorFiller filler(plan, o.seed);
  synth::write_gguf(o, plan.metadata, plan.vocab_from, plan.n_vocab, synth::tensor_headers(plan.tensors),
                    [&](size_t ti, int64_t row0, int64_t n_rows, uint8_t* dst) { filler.fill(ti, row0, n_rows, dst); });
  SynthResult r = synth::plan_result("deepseek2", o, plan.vocab_from, (int)plan.tensors.size(), plan.n_vocab, 0,
                                     describe_plan(plan));
  r.path = o.out;
  return synth::written_result(std::move(r), t0);
}

}  // namespace spool
