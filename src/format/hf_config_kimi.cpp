// config.json of kimi_linear -> llama.cpp's kimi-linear metadata. Both
// spellings are read: transformers 5 (layer_types, mlp_layer_types,
// linear_num_heads / linear_head_dim / linear_conv_kernel_dim) and the
// released checkpoints (linear_attn_config with 1-based full_attn_layers,
// first_k_dense_replace). head_count_kv is per layer: 0 marks a KDA layer, 1 an
// MLA layer (its cache row is one latent "head", as for deepseek2).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/config_json.h"
#include "format/hf_checkpoint.h"

namespace spool::hf {
namespace {

using nlohmann::json;
using config_json::fail;
using config_json::field;
using config_json::integer;
using gguf::Value;

// The first of several spellings of a size (top level, or in linear_attn_config).
int64_t size_of(const json& c, const json* lin, std::initializer_list<const char*> top, const char* in_lin) {
  for (const char* k : top)
    if (field(c, k)) return integer(c, k);
  if (lin && field(*lin, in_lin)) return integer(*lin, in_lin);
  fail(std::string("missing '") + *top.begin() + "' (or linear_attn_config." + in_lin + ")");
}

// Per layer: true for a Kimi Delta Attention layer.
std::vector<bool> kda_layers(const json& c, const json* lin, int64_t n_layer) {
  std::vector<bool> kda(n_layer, true);
  if (const json* t = field(c, "layer_types")) {
    if (!t->is_array() || (int64_t)t->size() != n_layer) fail("'layer_types' should list num_hidden_layers entries");
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::string s = (*t)[l].is_string() ? (*t)[l].get<std::string>() : "";
      if (s != "linear_attention" && s != "full_attention")
        fail("layer_types entry " + (*t)[l].dump() + " is neither linear_attention nor full_attention");
      kda[l] = s == "linear_attention";
    }
    return kda;
  }
  const json* full = lin ? field(*lin, "full_attn_layers") : nullptr;
  if (!full || !full->is_array()) fail("neither 'layer_types' nor linear_attn_config.full_attn_layers is given");
  for (const json& l : *full) {  // 1-based layer numbers
    if (!l.is_number_integer() || l.get<int64_t>() < 1 || l.get<int64_t>() > n_layer)
      fail("linear_attn_config.full_attn_layers entry " + l.dump() + " is not a layer number (1-based)");
    kda[l.get<int64_t>() - 1] = false;
  }
  return kda;
}

// Layers whose feed-forward is a dense MLP.
std::vector<int64_t> dense_layers(const json& c, int64_t n_layer) {
  std::vector<int64_t> dense;
  if (const json* t = field(c, "mlp_layer_types")) {
    if (!t->is_array() || (int64_t)t->size() != n_layer) fail("'mlp_layer_types' should list num_hidden_layers entries");
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::string s = (*t)[l].is_string() ? (*t)[l].get<std::string>() : "";
      if (s != "dense" && s != "sparse") fail("mlp_layer_types entry " + (*t)[l].dump() + " is neither dense nor sparse");
      if (s == "dense") dense.push_back(l);
    }
    return dense;
  }
  for (int64_t l = 0; l < integer(c, "first_k_dense_replace", 0) && l < n_layer; ++l) dense.push_back(l);
  return dense;
}

}  // namespace

void kimi_linear_to_metadata(const json& c, const std::string& a, gguf::File& out) {
  const json* lin = field(c, "linear_attn_config");
  if (lin && !lin->is_object()) fail("'linear_attn_config' should be an object");
  const int64_t n_layer = integer(c, "num_hidden_layers"), n_head = integer(c, "num_attention_heads");
  const std::vector<bool> kda = kda_layers(c, lin, n_layer);
  std::vector<int64_t> head_count_kv;
  for (bool k : kda) head_count_kv.push_back(k ? 0 : 1);
  out.kv[a + "attention.head_count_kv"] = Value::of_ints(head_count_kv);

  const int64_t kda_heads = size_of(c, lin, {"linear_num_heads"}, "num_heads");
  if (kda_heads != n_head)
    fail("KDA heads (" + std::to_string(kda_heads) + ") differ from num_attention_heads (" + std::to_string(n_head) +
         "), which llama.cpp's kimi-linear layout cannot express");
  out.kv[a + "kda.head_dim"] = Value::of_int(size_of(c, lin, {"linear_head_dim"}, "head_dim"));
  out.kv[a + "ssm.conv_kernel"] = Value::of_int(size_of(c, lin, {"linear_conv_kernel_dim"}, "short_conv_kernel_size"));

  const int64_t kv_lora = integer(c, "kv_lora_rank"), rope = integer(c, "qk_rope_head_dim");
  const int64_t nope = integer(c, "qk_nope_head_dim"), v = integer(c, "v_head_dim");
  if (kv_lora <= 0 || nope <= 0 || v <= 0) fail("kv_lora_rank, qk_nope_head_dim and v_head_dim must be positive");
  out.kv[a + "attention.q_lora_rank"] = Value::of_int(integer(c, "q_lora_rank", 0));
  out.kv[a + "attention.kv_lora_rank"] = Value::of_int(kv_lora);
  out.kv[a + "attention.key_length"] = Value::of_int(kv_lora + rope);
  out.kv[a + "attention.value_length"] = Value::of_int(kv_lora);
  out.kv[a + "attention.key_length_mla"] = Value::of_int(nope + rope);
  out.kv[a + "attention.value_length_mla"] = Value::of_int(v);
  out.kv[a + "rope.dimension_count"] = Value::of_int(rope);

  const int64_t n_expert = integer(c, "num_experts");
  const int64_t n_used = field(c, "num_experts_per_token") ? integer(c, "num_experts_per_token")
                                                           : integer(c, "num_experts_per_tok");
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert)
    fail("num_experts_per_token must be in 1..num_experts (" + std::to_string(n_expert) + ")");
  out.kv[a + "expert_count"] = Value::of_int(n_expert);
  out.kv[a + "expert_used_count"] = Value::of_int(n_used);
  out.kv[a + "expert_feed_forward_length"] = Value::of_int(integer(c, "moe_intermediate_size"));
  out.kv[a + "expert_shared_count"] = Value::of_int(integer(c, "num_shared_experts", 0));
  out.kv[a + "expert_weights_scale"] = Value::of_float(c.value("routed_scaling_factor", 1.0));
  out.kv[a + "expert_weights_norm"] = Value::of_bool(c.value("moe_renormalize", true));
  const std::string act = c.value("moe_router_activation_func", std::string("sigmoid"));
  if (act != "sigmoid" && act != "softmax") fail("moe_router_activation_func '" + act + "' is not supported");
  out.kv[a + "expert_gating_func"] = Value::of_int(act == "sigmoid" ? 2 : 1);
  const int64_t n_group = integer(c, "num_expert_group", 1);
  out.kv[a + "expert_group_count"] = Value::of_int(n_group);
  out.kv[a + "expert_group_used_count"] = Value::of_int(integer(c, "topk_group", n_group));
  out.kv[kDenseFfnLayersKey] = Value::of_ints(dense_layers(c, n_layer));
}

}  // namespace spool::hf
