// Synthetic DeepSeek-V3 / Kimi-K2 models (GGUF architecture "deepseek2"): the
// real per-layer shapes (MLA with split attn_k_b/attn_v_b, leading dense FFN
// layers, sigmoid-routed experts with an exp_probs_b selection bias, shared
// experts) with fewer layers and routed experts, fitted to a file size if
// asked. The router bias gives experts a skewed popularity, as real models
// route unevenly. Planning is separate from writing so the plan can be printed
// (--dry-run) and tested without writing gigabytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"
#include "synth/synth_common.h"

namespace spool {

struct Deepseek2Preset {
  const char* name;
  int n_embd, n_head;
  int q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head;
  int n_ff_dense, n_ff_exp;
  int n_layer, n_expert;  // defaults; 0 = fitted to --target-size (required then)
  int n_expert_used, n_expert_shared, n_dense_lead;
  int n_group, n_group_used;  // expert groups (1/1 = no group stage)
  float routed_scale;
  float rope_base, yarn_factor;  // yarn_factor 0: no rope scaling
  int yarn_orig_ctx;
  float yarn_beta_fast, yarn_beta_slow, mscale, mscale_all_dim;
  int n_ctx;
  float rms_eps;
  int real_layers, real_experts;  // the released model's counts (for the plan's comparison line)
  float router_skew;              // default --router-skew
  int real_vocab = 0;             // the released model's vocabulary (spool plan --preset); 0: tiny presets
};

const Deepseek2Preset* find_deepseek2_preset(const std::string& name);
std::vector<std::string> deepseek2_preset_names();

// How a tensor's contents are drawn.
enum class SynthInit { Weight, NearOne, Router, ChoiceBias };

struct SynthTensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the row length
  SynthInit init;
  int layer = -1;
  uint64_t bytes = 0;
  bool routed_expert = false;
};

struct Deepseek2Plan {
  Deepseek2Preset shape;  // with the final n_layer and n_expert
  int n_vocab = 0;
  std::string vocab_from;
  std::string fit_rule;   // how n_layer / n_expert were chosen, for the plan text
  DType expert_type = DType::Q4_K;  // the recipe's base type (experts may mix several: see tensors)
  int file_type = 0;      // general.file_type
  std::string type_name;  // the --type recipe's name
  std::vector<SynthTensor> tensors;
  std::vector<std::pair<std::string, gguf::Value>> metadata;  // general.* and deepseek2.* (tokenizer.* copied at write)
  float router_skew = 0;
  std::vector<std::vector<float>> choice_bias;  // [n_moe_layers][n_expert]: exp_probs_b
  uint64_t data_bytes = 0;       // tensor data, alignment padding included
  uint64_t expert_bytes = 0;     // one routed expert: gate + up + down
  uint64_t nonexpert_bytes = 0;  // every tensor but the routed experts
  uint64_t file_bytes = 0;       // estimated (exact after writing)
  int n_moe_layers() const { return shape.n_layer - shape.n_dense_lead; }
  // Weights one decoded token reads with nothing cached: its routed experts,
  // all non-expert weights except token_embd, and one token_embd row.
  uint64_t expert_bytes_per_token() const { return (uint64_t)shape.n_expert_used * n_moe_layers() * expert_bytes; }
  uint64_t bytes_per_token() const;
};

// Resolves the preset, overrides and size fitting; reads only the vocabulary
// file's token count. Throws spool::Error on bad options.
// n_vocab_override > 0 sizes token_embd / output for that vocabulary without
// reading a vocabulary file (spool plan --preset kimi-k2: the real 163840).
Deepseek2Plan plan_deepseek2(const SynthOptions& options, int n_vocab_override = 0);

// Share of routed picks by popularity rank (0 = most popular), from the
// plan's first MoE layer bias and iid N(0,1) router logits, through the
// engine's own router (route_experts).
std::vector<double> simulate_router_shares(const Deepseek2Plan& plan, int n_tokens, uint64_t seed);

// The plan in words: shapes, types, sizes, bytes per token, routing skew.
std::string describe_plan(const Deepseek2Plan& plan);

// Writes the planned file to options.out.
SynthResult write_deepseek2(const Deepseek2Plan& plan, const SynthOptions& options);

}  // namespace spool
