// GGUF metadata -> ModelConfig, with the same defaults llama.cpp applies.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"

namespace spool {
namespace {

// Some models store per-layer head counts as arrays; spool needs them uniform.
int uniform_int(const gguf::File& f, const std::string& key, int def) {
  const gguf::Value* v = f.find(key);
  if (!v) return def;
  if (!v->is_array()) return (int)f.get_int(key);
  if (v->ints.empty()) throw Error("model metadata '" + key + "' is an empty array");
  for (int64_t x : v->ints)
    if (x != v->ints[0]) throw Error("model metadata '" + key + "' varies by layer, which is not supported");
  return (int)v->ints[0];
}

// head_count_kv, which hybrid files (llama.cpp's kimi-linear / kimi-k3) give
// per layer with 0 marking a linear-attention layer: those layers are flagged
// in `recurrent` and the others must agree.
int read_head_count_kv(const gguf::File& f, const std::string& key, int def, int n_layer,
                       std::vector<uint8_t>& recurrent) {
  const gguf::Value* v = f.find(key);
  if (!v || !v->is_array() || std::find(v->ints.begin(), v->ints.end(), 0) == v->ints.end())
    return uniform_int(f, key, def);
  if ((int)v->ints.size() != n_layer)
    throw Error("model metadata '" + key + "' has " + std::to_string(v->ints.size()) + " entries for " +
                std::to_string(n_layer) + " layers");
  int n = 0;
  recurrent.assign(n_layer, 0);
  for (int l = 0; l < n_layer; ++l) {
    const int x = (int)v->ints[l];
    if (x == 0) { recurrent[l] = 1; continue; }
    if (n != 0 && x != n) throw Error("model metadata '" + key + "' varies by attention layer, which is not supported");
    n = x;
  }
  if (n == 0) throw Error("model metadata '" + key + "' marks every layer linear-attention");
  return n;
}

void check_positive(int v, const std::string& what) {
  if (v <= 0) throw Error("model metadata: " + what + " must be positive, got " + std::to_string(v));
}

// Expert counts and widths (llama.cpp's keys); the dense layers of a
// checkpoint that mixes both come from hf::kDenseFfnLayersKey.
void read_moe_config(const gguf::File& f, const std::string& a, ModelConfig& c) {
  c.n_expert = (int)f.get_int(a + "expert_count", 0);
  if (c.n_expert == 0) return;
  c.n_expert_used = (int)f.get_int(a + "expert_used_count", 0);
  if (c.n_expert < 0 || c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)
    throw Error("model metadata: expert_used_count " + std::to_string(c.n_expert_used) + " must be in 1.." +
                std::to_string(c.n_expert) + " (expert_count)");
  c.n_ff_exp = (int)f.get_int(a + "expert_feed_forward_length", c.n_ff);
  check_positive(c.n_ff_exp, "expert_feed_forward_length");
  c.expert_weights_norm = f.get_bool(a + "expert_weights_norm", true);
  if (const gguf::Value* v = f.find(hf::kDenseFfnLayersKey))
    for (int64_t l : v->ints) c.dense_ffn_layers.push_back((int)l);
  // DeepSeek-style routing (llama.cpp's keys); the defaults are plain softmax top-k.
  const int64_t gating = f.get_int(a + "expert_gating_func", (int64_t)ExpertGating::Softmax);
  if (gating != 1 && gating != 2)
    throw Error("model metadata: expert_gating_func " + std::to_string(gating) + " is not supported (1 softmax, 2 sigmoid)");
  c.expert_gating = (ExpertGating)gating;
  c.expert_weights_scale = (float)f.get_float(a + "expert_weights_scale", 1.0);
  c.n_expert_group = (int)f.get_int(a + "expert_group_count", 0);
  c.n_expert_group_used = (int)f.get_int(a + "expert_group_used_count", 0);
  if (c.n_expert_group > 1) {
    if (c.n_expert % c.n_expert_group != 0 || c.n_expert_group_used < 1 || c.n_expert_group_used > c.n_expert_group)
      throw Error("model metadata: expert_group_count " + std::to_string(c.n_expert_group) + " / expert_group_used_count " +
                  std::to_string(c.n_expert_group_used) + " do not fit expert_count " + std::to_string(c.n_expert));
    if (c.n_expert_group_used * (c.n_expert / c.n_expert_group) < c.n_expert_used)
      throw Error("model metadata: the chosen expert groups hold fewer experts than expert_used_count");
  }
  c.n_expert_shared = (int)f.get_int(a + "expert_shared_count", 0);
  // The first leading_dense_block_count layers keep a dense feed-forward.
  const int n_dense_lead = (int)f.get_int(a + "leading_dense_block_count", 0);
  for (int l = 0; l < n_dense_lead; ++l)
    if (std::find(c.dense_ffn_layers.begin(), c.dense_ffn_layers.end(), l) == c.dense_ffn_layers.end())
      c.dense_ffn_layers.push_back(l);
}

// MLA keys. Newer llama.cpp files describe the cache row in key_length /
// value_length (kv_lora_rank + rope, kv_lora_rank) and the decompressed heads
// in the *_mla keys; older ones only have the decompressed sizes.
void read_mla_config(const gguf::File& f, const std::string& a, ModelConfig& c) {
  MlaConfig& m = c.mla;
  m.kv_lora_rank = (int)f.get_int(a + "attention.kv_lora_rank", 0);
  if (m.kv_lora_rank <= 0) return;
  m.q_lora_rank = (int)f.get_int(a + "attention.q_lora_rank", 0);
  m.head_dim_k = (int)f.get_int(a + "attention.key_length_mla", c.head_dim_k);
  m.head_dim_v = (int)f.get_int(a + "attention.value_length_mla", c.head_dim_v);
  if (m.head_dim_k <= c.rope.n_dims || m.head_dim_v <= 0)
    throw Error("model metadata: MLA head sizes (key " + std::to_string(m.head_dim_k) + ", value " +
                std::to_string(m.head_dim_v) + ") do not fit rope.dimension_count " + std::to_string(c.rope.n_dims));
}

}  // namespace

ModelConfig read_config(const gguf::File& f, int n_vocab, RopeStyle style) {
  ModelConfig c;
  c.arch = f.architecture();
  const std::string a = c.arch + ".";
  c.name = f.get_string("general.name", "");
  c.n_vocab = n_vocab;
  c.n_ctx_train = (int)f.get_int(a + "context_length", 2048);
  c.n_embd = (int)f.get_int(a + "embedding_length");
  c.n_layer = (int)f.get_int(a + "block_count");
  c.n_ff = uniform_int(f, a + "feed_forward_length", 0);
  c.n_head = uniform_int(f, a + "attention.head_count", 0);
  c.n_head_kv = read_head_count_kv(f, a + "attention.head_count_kv", c.n_head, c.n_layer, c.layer_recurrent);
  check_positive(c.n_embd, "embedding_length");
  check_positive(c.n_layer, "block_count");
  check_positive(c.n_head, "attention.head_count");
  check_positive(c.n_head_kv, "attention.head_count_kv");
  check_positive(c.n_ff, "feed_forward_length");
  if (c.n_head % c.n_head_kv != 0)
    throw Error("model metadata: head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                std::to_string(c.n_head_kv));
  c.head_dim_k = (int)f.get_int(a + "attention.key_length", c.n_embd / c.n_head);
  c.head_dim_v = (int)f.get_int(a + "attention.value_length", c.head_dim_k);
  const bool mla = f.get_int(a + "attention.kv_lora_rank", 0) > 0;
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);

  RopeConfig& r = c.rope;
  // HF checkpoints keep Q/K unpermuted, so even llama rotates in NeoX order there.
  r.style = f.get_bool(hf::kRopeNeoxKey, style == RopeStyle::Neox) ? RopeStyle::Neox : RopeStyle::Normal;
  r.n_dims = (int)f.get_int(a + "rope.dimension_count", c.head_dim_k);
  if (r.n_dims <= 0 || (!mla && r.n_dims > c.head_dim_k) || r.n_dims % 2)
    throw Error("model metadata: rope.dimension_count " + std::to_string(r.n_dims) + " is invalid");
  r.freq_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
  // rope.scale_linear is the older spelling of a linear factor.
  float factor = (float)f.get_float(a + "rope.scaling.factor", f.get_float(a + "rope.scale_linear", 1.0));
  std::string type = f.get_string(a + "rope.scaling.type", factor != 1.0f ? "linear" : "none");
  if (factor <= 0) factor = 1.0f;
  if (type == "none") {
    r.scaling = RopeScaling::None;
  } else if (type == "linear") {
    r.scaling = RopeScaling::Linear;
    r.freq_scale = 1.0f / factor;
  } else if (type == "yarn") {
    r.scaling = RopeScaling::Yarn;
    r.freq_scale = 1.0f / factor;
    r.n_ctx_orig = (int)f.get_int(a + "rope.scaling.original_context_length", c.n_ctx_train);
    r.ext_factor = (float)f.get_float(a + "rope.scaling.yarn_ext_factor", -1.0);
    if (r.ext_factor < 0) r.ext_factor = 1.0f;
    r.attn_factor = (float)f.get_float(a + "rope.scaling.attn_factor", 1.0);
    r.beta_fast = (float)f.get_float(a + "rope.scaling.yarn_beta_fast", 32.0);
    r.beta_slow = (float)f.get_float(a + "rope.scaling.yarn_beta_slow", 1.0);
    r.yarn_log_mul = (float)f.get_float(a + "rope.scaling.yarn_log_multiplier", 0.0);
    // DeepSeek YaRN (mscale == mscale_all_dim): the rotation keeps unit magnitude
    // and the whole correction goes into the attention scale (see arch_deepseek2).
    if (r.yarn_log_mul != 0.0f && !f.find(a + "rope.scaling.attn_factor"))
      r.attn_factor = 1.0f / (1.0f + 0.1f * std::log(factor));
  } else {
    throw Error("model metadata: unsupported rope scaling type '" + type + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  read_moe_config(f, a, c);
  read_mla_config(f, a, c);
  return c;
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (n_expert == 0) return false;
  for (int d : dense_ffn_layers)
    if (d == layer) return false;
  return true;
}

int ModelConfig::n_attn_layer() const {
  int n = 0;
  for (int l = 0; l < n_layer; ++l) n += is_recurrent_layer(l) ? 0 : 1;
  return n;
}

int ModelConfig::kv_layer(int layer) const {
  if (is_recurrent_layer(layer)) return -1;
  int n = 0;
  for (int l = 0; l < layer; ++l) n += is_recurrent_layer(l) ? 0 : 1;
  return n;
}

}  // namespace spool
