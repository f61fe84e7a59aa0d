// Synthetic Kimi K3 models (GGUF architecture "kimi-k3", llama.cpp's layout):
// Kimi Delta Attention layers with an MLA layer every few layers (and last),
// cross-layer attention-residual scores, a latent MoE (experts run in a
// smaller latent width between ffn_routed_down / ffn_routed_up), shared
// experts and the situ activation keys. Real per-layer shapes with fewer
// layers and routed experts, fitted to a file size if asked; routed experts in
// MXFP4 by default (K3's native format). Planning is separate from writing, so
// `spool plan` can describe the real 2.8T model from the same tensor table.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"
#include "synth/synth_common.h"

namespace spool {

struct KimiK3Preset {
  const char* name;
  int n_embd, n_head;                    // heads: MLA and KDA alike
  int kda_head_dim, conv_kernel;
  float kda_gate_lower_bound;
  int q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head;  // q_lora 0: one attn_q
  int n_ff_dense, n_ff_exp, n_latent;    // dense FFN, one expert, the experts' latent width
  int n_layer, n_expert;                 // 0: fitted to --target-size
  int n_expert_used, n_expert_shared, n_dense_lead;
  int mla_every;                         // layer l is MLA when (l + 1) % mla_every == 0, and the last layer
  int attn_res_block;                    // attn_res.block_size
  float routed_scale, situ_beta, situ_linear_beta, rms_eps;
  int n_ctx;
  int real_layers, real_experts, real_vocab;  // the released model (plan comparisons, --preset kimi-k3)
  float router_skew;                     // default --router-skew
};

const KimiK3Preset* find_kimi_k3_preset(const std::string& name);
std::vector<std::string> kimi_k3_preset_names();

// Whether layer l of an n_layer model with this pattern is MLA (else KDA).
bool kimi_k3_is_mla_layer(const KimiK3Preset& s, int layer);

enum class K3Init { Weight, NearOne, Router, ChoiceBias, Conv, DecayA, DtBias, ResScore };

struct K3Tensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the row length
  K3Init init = K3Init::Weight;
  int layer = -1;
  uint64_t bytes = 0;
  bool routed_expert = false;
};

struct KimiK3Plan {
  KimiK3Preset shape;      // with the final n_layer and n_expert
  std::string preset_name;
  int n_vocab = 0;
  std::string vocab_from;  // empty: no vocabulary file (plan only)
  std::string fit_rule;
  std::string type_rule;   // the dtypes in words
  DType expert_type = DType::MXFP4;
  int file_type = 0;
  std::vector<K3Tensor> tensors;
  std::vector<std::pair<std::string, gguf::Value>> metadata;  // general.* and kimi-k3.* (tokenizer.* copied at write)
  float router_skew = 0;
  std::vector<std::vector<float>> choice_bias;  // [n_moe_layers][n_expert]
  uint64_t file_bytes = 0;       // estimated header + data (exact after writing, within padding)
  uint64_t expert_bytes = 0;     // one routed expert (gate + up + down)
  uint64_t nonexpert_bytes = 0;  // every tensor but the routed experts
  int n_moe_layers() const { return shape.n_layer - shape.n_dense_lead; }
  int n_mla_layers() const;
};

// Resolves the preset, types, overrides and size fitting. Reads only the
// vocabulary file's token count (none when n_vocab_override > 0).
KimiK3Plan plan_kimi_k3(const SynthOptions& options, int n_vocab_override = 0);

// The plan in words: shapes, layer pattern, types, sizes, bytes per token.
std::string describe_kimi_k3_plan(const KimiK3Plan& plan);

// Writes the planned file to options.out.
SynthResult write_kimi_k3(const KimiK3Plan& plan, const SynthOptions& options);

}  // namespace spool
