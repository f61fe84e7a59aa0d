// GGUF metadata -> ModelConfig, with the same defaults llama.cpp applies.
#include "model/config.h"

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
  c.n_head_kv = uniform_int(f, a + "attention.head_count_kv", c.n_head);
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
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);

  RopeConfig& r = c.rope;
  // HF checkpoints keep Q/K unpermuted, so even llama rotates in NeoX order there.
  r.style = f.get_bool(hf::kRopeNeoxKey, style == RopeStyle::Neox) ? RopeStyle::Neox : RopeStyle::Normal;
  r.n_dims = (int)f.get_int(a + "rope.dimension_count", c.head_dim_k);
  if (r.n_dims <= 0 || r.n_dims > c.head_dim_k || r.n_dims % 2)
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
  } else {
    throw Error("model metadata: unsupported rope scaling type '" + type + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  read_moe_config(f, a, c);
  return c;
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (n_expert == 0) return false;
  for (int d : dense_ffn_layers)
    if (d == layer) return false;
  return true;
}

}  // namespace spool
