// Synthetic kimi-k3 GGUF files: presets (the released K3's shapes, a scaled
// one fitted to a file size, and the tiny fixture's), the tensor plan in
// llama.cpp's kimi-k3 layout (tensor names, shapes and keys as in
// ../shared/fixtures/gguf/kimi-k3-tiny.f32.gguf), the dtype rules, and writing:
// routed experts from pools of pre-quantized blocks (MXFP4 by default), other
// tensors likewise or as floats, in parallel, streamed to disk.
#include "synth/synth_kimi_k3.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "synth/synth_fill.h"
#include "synth/synth_quant_mix.h"

namespace spool {
namespace {

using synth::fmt;
using synth::mix64;

constexpr const char* kDefaultVocab = "fixtures/gguf/qwen2-tiny.f32.gguf";  // 512 tokens: small embd/output
constexpr float kWeightStd = 0.02f;
constexpr int kDefaultFitLayers = 8;  // 1 dense + 7 MoE; KDA, KDA, KDA, MLA, KDA, KDA, KDA, MLA
constexpr float kDefaultSkew = 0.05f;

// Kimi K3 as released (moonshotai/Kimi-K3, text_config; docs/PLAN.md lists the
// source of every number and which ones are assumptions): hidden 7168, 96
// heads for KDA (head dim 128, conv 4, gate lower bound -5) and MLA (q_lora
// 1536, kv_lora 512, qk nope 128 + rope 64, v 128), 93 layers with MLA at every
// 4th and the last (69 KDA + 24 MLA), 1 dense layer then 92 latent-MoE layers
// of 896 experts, top-16, expert width 3072 in a 3584-wide latent, 2 shared
// experts, situ beta 4 / linear beta 25, attention-residual blocks of 12
// layers, vocab 163840. Assumed: dense FFN 18432 (K2's), routed scale 2.446
// (the fixture's), rms eps 1e-5, context 262144.
#define KIMI_K3(name, layers, experts)                                                                             \
  {name, 7168, 96, 128, 4, -5.0f, 1536, 512, 128, 64, 128, 18432, 3072, 3584, layers, experts, 16, 2, 1, 4, 12, \
   2.446f, 4.0f, 25.0f, 1e-5f, 262144, 93, 896, 163840, kDefaultSkew}

constexpr KimiK3Preset kPresets[] = {
    // The shapes of ../shared/fixtures/gguf/kimi-k3-tiny.f32.gguf (KDA, KDA, MLA, KDA, MLA).
    {"kimi-k3-tiny", 64, 4, 16, 4, -5.0f, 0, 48, 16, 8, 32, 128, 24, 40, 5, 8, 2, 1, 1, 3, 2, 2.446f, 0.8f, 0.5f,
     1e-5f, 4096, 5, 8, 512, kDefaultSkew},
    // Every row a multiple of 32 so MXFP4 / Q8_0 apply, with q-LoRA: 3 KDA + 1 MLA layer, 16 experts top-4.
    {"kimi-k3-mini", 128, 4, 32, 4, -5.0f, 64, 64, 32, 32, 32, 256, 64, 96, 4, 16, 4, 1, 1, 4, 2, 2.446f, 4.0f,
     25.0f, 1e-5f, 4096, 4, 16, 512, kDefaultSkew},
    KIMI_K3("kimi-k3-scaled", 0, 0),  // fitted to --target-size
    KIMI_K3("kimi-k3", 93, 896),      // the real counts (~1.5 TB): for plans and --dry-run
};
#undef KIMI_K3

// ---- dtypes -------------------------------------------------------------------------

// --type T: routed experts T. MXFP4 follows llama.cpp's MXFP4_MOE rule for
// the rest (3-D tensors MXFP4, other matrices Q8_0); Q4_K / Q4_K_M give the
// other matrices the Q4_K_M mix; any other uniform type is used for every
// matrix. llama.cpp's low-bit file types (IQ2_XXS, TQ1_0, ...) and the dynamic
// mixes (UD-IQ1_S, ...) assign every tensor by their own rules. --tensor-type
// overrides come first. Always F32 (llama.cpp never quantizes them): 1-D
// tensors, the short-conv weights, the router and its selection bias.
struct TypeRule {
  const QuantRecipe* file;     // what --type named
  const QuantRecipe* expert;
  const QuantRecipe* matrix;   // 2-D non-expert matrices
  const QuantRecipe* stacked;  // 3-D non-expert tensors (attn_k_b, attn_v_b)
  std::string words;
  bool per_role = true;        // false: every tensor by the file recipe's own rules
  MixOptions mix;
};

TypeRule type_rule(const SynthOptions& o) {
  const QuantRecipe* r = &synth::require_quant_recipe(o.type);
  const MixOptions mix = synth::mix_options(o);
  std::string extra;
  for (const TypeOverride& t : mix.overrides) extra += std::string("; --tensor-type ") + t.pattern + "=" + dtype_name(t.type);
  if (r->base == DType::MXFP4)
    return {r, r, find_quant_recipe("Q8_0"), r,
            "routed experts MXFP4; attn_k_b / attn_v_b MXFP4 and other matrices Q8_0 (llama.cpp's MXFP4_MOE); "
            "norms, conv, router F32" + extra, true, mix};
  if (r->base == DType::Q4_K && (r->rule == MixRule::Uniform || std::string(r->name) == "Q4_K_M")) {
    const QuantRecipe* km = find_quant_recipe("Q4_K_M");
    return {r, find_quant_recipe("Q4_K"), km, km,
            "routed experts Q4_K; other matrices llama.cpp's Q4_K_M mix; norms, conv, router F32" + extra, true, mix};
  }
  if (r->rule == MixRule::Uniform)
    return {r, r, r, r, std::string("every matrix ") + r->name + "; norms, conv, router F32" + extra, true, mix};
  return {r, r, r, r, std::string(r->words) + "; norms, conv, router F32" + extra, false, mix};
}

bool always_f32(const std::string& name, size_t n_dims) {
  return n_dims == 1 || name.find("ssm_conv1d") != std::string::npos ||
         name.find("ffn_gate_inp") != std::string::npos || name.find("exp_probs_b") != std::string::npos;
}

// ---- the tensor plan ----------------------------------------------------------------

class PlanBuilder {
 public:
  PlanBuilder(const KimiK3Preset& s, int n_vocab, const TypeRule& rule) : s_(s), n_vocab_(n_vocab), rule_(rule) {}

  std::vector<K3Tensor> build() {
    const int64_t E = s_.n_embd;
    add("token_embd.weight", {E, n_vocab_}, K3Init::Weight, -1);
    for (int l = 0; l < s_.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {E}, K3Init::NearOne, l);
      add(p + "ffn_norm.weight", {E}, K3Init::NearOne, l);
      add(p + "attn_res_score.weight", {E}, K3Init::ResScore, l);
      add(p + "ffn_res_score.weight", {E}, K3Init::ResScore, l);
      if (kimi_k3_is_mla_layer(s_, l)) add_mla(p, l);
      else add_kda(p, l);
      if (l < s_.n_dense_lead) {
        add(p + "ffn_gate.weight", {E, s_.n_ff_dense}, K3Init::Weight, l);
        add(p + "ffn_up.weight", {E, s_.n_ff_dense}, K3Init::Weight, l);
        add(p + "ffn_down.weight", {s_.n_ff_dense, E}, K3Init::Weight, l);
      } else {
        add_moe(p, l);
      }
    }
    add("output_norm.weight", {E}, K3Init::NearOne, -1);
    add("output_res_score.weight", {E}, K3Init::ResScore, -1);
    add("output.weight", {E, n_vocab_}, K3Init::Weight, -1);
    assign_types();
    return std::move(out_);
  }

 private:
  // Kimi Delta Attention: q/k/v projections with their short convolutions,
  // the low-rank decay (f_a, f_b), beta, A, dt bias, the full-rank output gate.
  void add_kda(const std::string& p, int l) {
    const int64_t E = s_.n_embd, H = s_.n_head, dk = s_.kda_head_dim, D = H * dk, K = s_.conv_kernel;
    for (const char* x : {"attn_q", "attn_k", "attn_v"}) add(p + x + ".weight", {E, D}, K3Init::Weight, l);
    for (const char* x : {"q", "k", "v"}) add(p + "ssm_conv1d_" + x + ".weight", {K, 1, D, 1}, K3Init::Conv, l);
    add(p + "ssm_f_a.weight", {E, dk}, K3Init::Weight, l);
    add(p + "ssm_f_b.weight", {dk, D}, K3Init::Weight, l);
    add(p + "ssm_beta.weight", {E, H}, K3Init::Weight, l);
    add(p + "ssm_a", {H}, K3Init::DecayA, l);
    add(p + "ssm_dt.bias", {D}, K3Init::DtBias, l);
    add(p + "ssm_g.weight", {E, D}, K3Init::Weight, l);
    add(p + "ssm_norm.weight", {dk}, K3Init::NearOne, l);
    add(p + "attn_output.weight", {D, E}, K3Init::Weight, l);
  }

  // MLA stored absorbed (attn_k_b / attn_v_b) with the sigmoid output gate.
  void add_mla(const std::string& p, int l) {
    const int64_t E = s_.n_embd, H = s_.n_head, k_mla = s_.qk_nope + s_.qk_rope;
    if (s_.q_lora_rank > 0) {
      add(p + "attn_q_a.weight", {E, s_.q_lora_rank}, K3Init::Weight, l);
      add(p + "attn_q_a_norm.weight", {s_.q_lora_rank}, K3Init::NearOne, l);
      add(p + "attn_q_b.weight", {s_.q_lora_rank, H * k_mla}, K3Init::Weight, l);
    } else {
      add(p + "attn_q.weight", {E, H * k_mla}, K3Init::Weight, l);
    }
    add(p + "attn_kv_a_mqa.weight", {E, s_.kv_lora_rank + s_.qk_rope}, K3Init::Weight, l);
    add(p + "attn_kv_a_norm.weight", {s_.kv_lora_rank}, K3Init::NearOne, l);
    add(p + "attn_k_b.weight", {s_.qk_nope, s_.kv_lora_rank, H}, K3Init::Weight, l);
    add(p + "attn_v_b.weight", {s_.kv_lora_rank, s_.v_head, H}, K3Init::Weight, l);
    add(p + "attn_gate.weight", {E, H * s_.v_head}, K3Init::Weight, l);
    add(p + "attn_output.weight", {H * s_.v_head, E}, K3Init::Weight, l);
  }

  // Latent MoE: the router reads the full width; experts run in n_latent.
  void add_moe(const std::string& p, int l) {
    const int64_t E = s_.n_embd, N = s_.n_expert, F = s_.n_ff_exp, Lt = s_.n_latent;
    const int64_t S = (int64_t)s_.n_ff_exp * s_.n_expert_shared;
    add(p + "ffn_gate_inp.weight", {E, N}, K3Init::Router, l);
    add(p + "exp_probs_b.bias", {N}, K3Init::ChoiceBias, l);
    add(p + "ffn_gate_exps.weight", {Lt, F, N}, K3Init::Weight, l, true);
    add(p + "ffn_up_exps.weight", {Lt, F, N}, K3Init::Weight, l, true);
    add(p + "ffn_down_exps.weight", {F, Lt, N}, K3Init::Weight, l, true);
    add(p + "ffn_routed_down.weight", {E, Lt}, K3Init::Weight, l);
    add(p + "ffn_routed_up.weight", {Lt, E}, K3Init::Weight, l);
    add(p + "ffn_routed_norm.weight", {Lt}, K3Init::NearOne, l);
    if (S > 0) {
      add(p + "ffn_gate_shexp.weight", {E, S}, K3Init::Weight, l);
      add(p + "ffn_up_shexp.weight", {E, S}, K3Init::Weight, l);
      add(p + "ffn_down_shexp.weight", {S, E}, K3Init::Weight, l);
    }
  }

  void add(const std::string& name, std::vector<int64_t> shape, K3Init init, int layer, bool expert = false) {
    K3Tensor t{name, DType::F32, std::move(shape), init, layer};
    t.routed_expert = expert;
    out_.push_back(std::move(t));
  }

  // Types over the whole list (llama.cpp's rules keep running counters), then bytes.
  void assign_types() {
    std::vector<MixTensor> mt;
    for (const K3Tensor& t : out_) {
      const QuantRecipe* r = !rule_.per_role ? nullptr
                             : t.routed_expert ? rule_.expert
                             : t.shape.size() >= 3 ? rule_.stacked
                                                   : rule_.matrix;
      mt.push_back({t.name, t.shape, !always_f32(t.name, t.shape.size()), r});
    }
    MixModel model;
    model.n_layer = s_.n_layer;
    model.n_expert = s_.n_expert;
    model.n_gqa = s_.n_head;  // MLA: one latent row per token
    const std::vector<DType> types = mix_types(*rule_.file, model, mt, rule_.mix);
    for (size_t i = 0; i < out_.size(); ++i) {
      K3Tensor& t = out_[i];
      t.type = types[i];
      if (t.routed_expert && rule_.per_role && rule_.mix.overrides.empty() && t.type != rule_.expert->base)
        throw Error("synth: expert rows of " + std::to_string(t.shape[0]) + " values do not fit " +
                    dtype_name(rule_.expert->base) + " blocks");
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const DTypeTraits& tr = dtype_traits(t.type);
      t.bytes = (uint64_t)(n / tr.block_size) * tr.block_bytes;
    }
  }

  const KimiK3Preset& s_;
  int n_vocab_;
  TypeRule rule_;
  std::vector<K3Tensor> out_;
};

void set_metadata(KimiK3Plan& plan, uint64_t seed, bool quantized) {
  using namespace gguf;
  const KimiK3Preset& s = plan.shape;
  auto& m = plan.metadata;
  auto set = [&](const std::string& key, Value v) { m.emplace_back(key, std::move(v)); };
  const std::string a = "kimi-k3.";
  set("general.architecture", value_string("kimi-k3"));
  set("general.name", value_string(plan.preset_name + "-synthetic (" + std::to_string(s.n_layer) + " layers x " +
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
  std::vector<int64_t> kv;  // 0 marks a KDA layer; MLA is MQA over one latent row
  for (int l = 0; l < s.n_layer; ++l) kv.push_back(kimi_k3_is_mla_layer(s, l) ? 1 : 0);
  set(a + "attention.head_count_kv", value_int_array(ValueType::INT32, kv));
  set(a + "attention.layer_norm_rms_epsilon", value_f32(s.rms_eps));
  set(a + "rope.dimension_count", value_u32((uint32_t)s.qk_rope));  // sizes k_pe; K3 never rotates it
  if (s.q_lora_rank > 0) set(a + "attention.q_lora_rank", value_u32((uint32_t)s.q_lora_rank));
  set(a + "attention.kv_lora_rank", value_u32((uint32_t)s.kv_lora_rank));
  set(a + "attention.key_length", value_u32((uint32_t)(s.kv_lora_rank + s.qk_rope)));
  set(a + "attention.value_length", value_u32((uint32_t)s.kv_lora_rank));
  set(a + "attention.key_length_mla", value_u32((uint32_t)(s.qk_nope + s.qk_rope)));
  set(a + "attention.value_length_mla", value_u32((uint32_t)s.v_head));
  set(a + "ssm.conv_kernel", value_u32((uint32_t)s.conv_kernel));
  set(a + "kda.head_dim", value_u32((uint32_t)s.kda_head_dim));
  set(a + "kda.gate_lower_bound", value_f32(s.kda_gate_lower_bound));
  set(a + "expert_count", value_u32((uint32_t)s.n_expert));
  set(a + "expert_used_count", value_u32((uint32_t)s.n_expert_used));
  set(a + "expert_feed_forward_length", value_u32((uint32_t)s.n_ff_exp));
  set(a + "expert_shared_count", value_u32((uint32_t)s.n_expert_shared));
  set(a + "leading_dense_block_count", value_u32((uint32_t)s.n_dense_lead));
  set(a + "expert_weights_scale", value_f32(s.routed_scale));
  set(a + "expert_weights_norm", value_bool(true));
  set(a + "expert_gating_func", value_u32(2));  // sigmoid
  set(a + "expert_latent_length", value_u32((uint32_t)s.n_latent));
  set(a + "activation.situ_beta", value_f32(s.situ_beta));
  set(a + "activation.situ_linear_beta", value_f32(s.situ_linear_beta));
  set(a + "attn_res.block_size", value_u32((uint32_t)s.attn_res_block));
  set(a + "vocab_size", value_u32((uint32_t)plan.n_vocab));
}

// Chooses n_layer / n_expert; returns the rule used.
std::string fit_counts(KimiK3Preset& s, const SynthOptions& o, const std::function<uint64_t()>& size_now) {
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
  auto grow_layers = [&] {
    for (int l = s.n_layer + 1; l <= s.real_layers; ++l) {
      const int keep = s.n_layer;
      s.n_layer = l;
      if (size_now() > target) { s.n_layer = keep; break; }
    }
  };
  if (o.n_expert > 0) {
    s.n_layer = s.n_dense_lead + 1;
    if (size_now() > target) throw Error("synth: even " + std::to_string(s.n_layer) + " layers do not fit " + tgt);
    grow_layers();
    return "layers: the most (up to the real " + std::to_string(s.real_layers) + ") whose file fits " + tgt +
           " with " + std::to_string(s.n_expert) + " experts";
  }
  if (s.n_layer <= 0) s.n_layer = std::min(kDefaultFitLayers, s.real_layers);
  // The file grows with the expert count: bisect for the largest that fits.
  int lo = 0, hi = s.real_experts;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    s.n_expert = mid;
    if (size_now() <= target) lo = mid;
    else hi = mid - 1;
  }
  if (lo < s.n_expert_used)
    throw Error("synth: fewer than top-k = " + std::to_string(s.n_expert_used) + " experts fit " + tgt + " with " +
                std::to_string(s.n_layer) + " layers");
  s.n_expert = lo;
  std::string rule = "experts: the most (up to the real " + std::to_string(s.real_experts) + ") whose file fits " +
                     tgt + " with " + std::to_string(s.n_layer) + " layers";
  if (lo == s.real_experts && o.n_layer <= 0) {
    grow_layers();
    rule += "; the real expert count fits, so layers grew to " + std::to_string(s.n_layer);
  }
  return rule;
}

}  // namespace

const KimiK3Preset* find_kimi_k3_preset(const std::string& name) {
  for (const KimiK3Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

std::vector<std::string> kimi_k3_preset_names() {
  std::vector<std::string> out;
  for (const KimiK3Preset& p : kPresets) out.push_back(p.name);
  return out;
}

bool kimi_k3_is_mla_layer(const KimiK3Preset& s, int layer) {
  return (layer + 1) % s.mla_every == 0 || layer == s.n_layer - 1;
}

int KimiK3Plan::n_mla_layers() const {
  int n = 0;
  for (int l = 0; l < shape.n_layer; ++l) n += kimi_k3_is_mla_layer(shape, l) ? 1 : 0;
  return n;
}

KimiK3Plan plan_kimi_k3(const SynthOptions& o, int n_vocab_override) {
  const std::string preset_name = o.preset == "tiny" ? "kimi-k3-tiny" : o.preset;
  const KimiK3Preset* preset = find_kimi_k3_preset(preset_name);
  if (!preset) {
    std::string list;
    for (const auto& n : kimi_k3_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("synth: --arch kimi-k3 needs a kimi-k3 preset, not '" + o.preset + "' (presets: " + list + ")");
  }
  if (!o.arch.empty() && o.arch != "kimi-k3")
    throw Error("preset '" + preset_name + "' is a kimi-k3 model; --arch " + o.arch + " does not match");
  if (o.n_layer < 0 || o.n_expert < 0) throw Error("synth: --n-layer and --n-expert must be positive");
  const TypeRule rule = type_rule(o);

  KimiK3Plan plan;
  plan.shape = *preset;
  plan.preset_name = preset_name;
  synth::VocabKeys vocab;
  if (n_vocab_override > 0) {
    vocab.n_vocab = n_vocab_override;
  } else {
    plan.vocab_from = o.vocab_from.empty() ? resolve_shared_file(kDefaultVocab) : o.vocab_from;
    vocab = synth::measure_vocab(plan.vocab_from);
  }
  plan.n_vocab = vocab.n_vocab;
  plan.expert_type = rule.expert->base;
  plan.file_type = rule.file->file_type;
  plan.type_rule = rule.words;
  plan.router_skew = std::isnan(o.router_skew) ? preset->router_skew : o.router_skew;
  if (!(plan.router_skew >= 0) || plan.router_skew > 10) throw Error("synth: --router-skew must be in 0..10");
  const bool quantized = dtype_traits(rule.expert->base).quantized;

  auto rebuild = [&] {
    plan.tensors = PlanBuilder(plan.shape, plan.n_vocab, rule).build();
    plan.metadata.clear();
    set_metadata(plan, o.seed, quantized);
    return synth::planned_file_bytes(plan.metadata, synth::tensor_headers(plan.tensors), vocab.header_bytes);
  };
  plan.fit_rule = fit_counts(plan.shape, o, rebuild);
  const KimiK3Preset& s = plan.shape;
  if (s.n_layer <= s.n_dense_lead)
    throw Error("synth: " + std::to_string(s.n_layer) + " layers leave no MoE layer after the " +
                std::to_string(s.n_dense_lead) + " dense one(s)");
  if (s.n_expert < s.n_expert_used)
    throw Error("synth: " + std::to_string(s.n_expert) + " routed experts are fewer than top-" +
                std::to_string(s.n_expert_used));
  plan.file_bytes = rebuild();
  for (const K3Tensor& t : plan.tensors) {
    if (t.routed_expert) plan.expert_bytes += t.bytes / (uint64_t)s.n_expert;
    else plan.nonexpert_bytes += t.bytes;
  }
  plan.expert_bytes /= (uint64_t)plan.n_moe_layers();
  for (int l = 0; l < plan.n_moe_layers(); ++l)
    plan.choice_bias.push_back(synth::choice_bias(s.n_expert, plan.router_skew, mix64(o.seed * 0x9E3779B97F4A7C15ull + 2000 + l)));
  return plan;
}

std::string describe_kimi_k3_plan(const KimiK3Plan& plan) {
  const KimiK3Preset& s = plan.shape;
  const double GB = 1e9, MiB = 1048576.0;
  std::string out;
  out += fmt("kimi-k3 %s: n_embd %d, heads %d; KDA head dim %d, conv %d; MLA q_lora %d, kv_lora %d, qk_nope %d, "
             "qk_rope %d (not rotated), v_head %d; dense ffn %d; expert ffn %d in a %d-wide latent\n",
             plan.preset_name.c_str(), s.n_embd, s.n_head, s.kda_head_dim, s.conv_kernel, s.q_lora_rank,
             s.kv_lora_rank, s.qk_nope, s.qk_rope, s.v_head, s.n_ff_dense, s.n_ff_exp, s.n_latent);
  std::string pattern;
  for (int l = 0; l < s.n_layer && l < 48; ++l) pattern += kimi_k3_is_mla_layer(s, l) ? 'M' : 'K';
  if (s.n_layer > 48) pattern += "...";
  out += fmt("layers %d (%d KDA + %d MLA: %s; %d dense + %d MoE), routed experts %d (top-%d, sigmoid + exp_probs_b, "
             "scale %.3f), shared %d, situ %g / %g, attn_res block %d, vocab %d%s%s\n",
             s.n_layer, s.n_layer - plan.n_mla_layers(), plan.n_mla_layers(), pattern.c_str(), s.n_dense_lead,
             plan.n_moe_layers(), s.n_expert, s.n_expert_used, s.routed_scale, s.n_expert_shared, s.situ_beta,
             s.situ_linear_beta, s.attn_res_block, plan.n_vocab, plan.vocab_from.empty() ? "" : " from ",
             plan.vocab_from.c_str());
  out += "counts: " + plan.fit_rule + "\n";
  out += "types: " + plan.type_rule + "\n";
  uint64_t exp_total = 0;
  for (const K3Tensor& t : plan.tensors)
    if (t.routed_expert) exp_total += t.bytes;
  out += fmt("one expert (gate+up+down): %llu bytes = %.2f MiB\n", (unsigned long long)plan.expert_bytes,
             plan.expert_bytes / MiB);
  out += fmt("file: %.3f GB = %.3f GiB (%zu tensors): routed experts %.3f GB, everything else %.3f GB\n",
             plan.file_bytes / GB, plan.file_bytes / 1073741824.0, plan.tensors.size(), exp_total / GB,
             plan.nonexpert_bytes / GB);
  out += fmt("routed experts per token, nothing cached: %d x %d x %.2f MiB = %.3f GB (spool plan FILE gives the "
             "whole per-token and per-device picture)\n",
             s.n_expert_used, plan.n_moe_layers(), plan.expert_bytes / MiB,
             (double)s.n_expert_used * plan.n_moe_layers() * plan.expert_bytes / GB);
  return out;
}

// ---- writing ------------------------------------------------------------------------

namespace {

class TensorFiller {
 public:
  TensorFiller(const KimiK3Plan& plan, uint64_t seed) : plan_(plan), seed_(seed), weights_(seed, kWeightStd, true) {
    for (const K3Tensor& t : plan.tensors)
      if (t.init == K3Init::Weight) weights_.prepare(t.type);
  }

  void fill(size_t ti, int64_t row0, int64_t n_rows, uint8_t* dst) const {
    const K3Tensor& t = plan_.tensors[ti];
    const uint64_t tensor_stream = synth::tensor_stream(seed_, ti);
    const int64_t n = t.shape[0];
    const size_t rb = row_bytes(t.type, n);
    thread_local std::vector<float> row;
    row.resize((size_t)n);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint64_t stream = synth::row_stream(tensor_stream, row0 + r);
      uint8_t* out = dst + (size_t)r * rb;
      if (t.init == K3Init::Weight && weights_.fill_row(t.type, out, n, stream)) continue;
      fill_floats(t, row.data(), n, stream);
      quantize_row(t.type, row.data(), out, n);
    }
  }

 private:
  void fill_floats(const K3Tensor& t, float* x, int64_t n, uint64_t stream) const {
    switch (t.init) {
      case K3Init::Weight: synth::fill_normal(x, n, stream, 0.0f, kWeightStd); break;
      case K3Init::NearOne: synth::fill_normal(x, n, stream, 1.0f, kWeightStd); break;
      case K3Init::Router: synth::fill_normal(x, n, stream, 0.0f, 1.0f / std::sqrt((float)n)); break;
      case K3Init::Conv: synth::fill_normal(x, n, stream, 0.0f, 0.3f); break;
      case K3Init::DtBias: synth::fill_normal(x, n, stream, -1.0f, 0.5f); break;
      case K3Init::ResScore: synth::fill_normal(x, n, stream, 0.0f, 0.15f); break;
      case K3Init::DecayA:  // -exp(A_log) folded: -U(1, 16), decays spread over ~0.1..1
        for (int64_t i = 0; i < n; ++i)
          x[i] = -(1.0f + 15.0f * (float)((mix64(stream + (uint64_t)i) >> 11) * 0x1.0p-53));
        break;
      case K3Init::ChoiceBias: {
        const auto& bias = plan_.choice_bias.at((size_t)(t.layer - plan_.shape.n_dense_lead));
        std::copy(bias.begin(), bias.end(), x);
        break;
      }
    }
  }

  const KimiK3Plan& plan_;
  uint64_t seed_;
  synth::WeightRows weights_;
};

}  // namespace

SynthResult write_kimi_k3(const KimiK3Plan& plan, const SynthOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.out.empty()) throw Error("synth needs an output file (--out FILE.gguf)");
  if (plan.vocab_from.empty()) throw Error("synth: this kimi-k3 plan has no vocabulary file to copy");
  const TensorFiller filler(plan, o.seed);
  synth::write_gguf(o, plan.metadata, plan.vocab_from, plan.n_vocab, synth::tensor_headers(plan.tensors),
                    [&](size_t ti, int64_t row0, int64_t n_rows, uint8_t* dst) { filler.fill(ti, row0, n_rows, dst); });
  SynthResult r = synth::plan_result("kimi-k3", o, plan.vocab_from, (int)plan.tensors.size(), plan.n_vocab, 0,
                                     describe_kimi_k3_plan(plan));
  r.path = o.out;
  return synth::written_result(std::move(r), t0);
}

}  // namespace spool
