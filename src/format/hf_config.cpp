// config.json -> GGUF-style metadata for the llama-family model types (llama,
// qwen2, qwen3, and the MoE mixtral and qwen3_moe) and deepseek_v3 (GGUF deepseek2), with the rope variants of both spellings: released
// checkpoints write "rope_scaling", transformers 5 writes "rope_parameters".
// llama3 rope becomes a computed rope_freqs.weight tensor, as llama.cpp's
// converter writes it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "format/config_json.h"
#include "format/hf_checkpoint.h"
#include "format/hf_hybrid.h"

namespace spool::hf {
namespace {

using nlohmann::json;
using config_json::fail;
using config_json::field;
using config_json::integer;
using config_json::number;
using gguf::Value;
using gguf::ValueType;

// HF model_type -> GGUF architecture of the same layout.
const char* gguf_arch(const std::string& model_type) {
  if (model_type == "llama") return "llama";
  if (model_type == "qwen2") return "qwen2";
  if (model_type == "qwen3") return "qwen3";
  if (model_type == "mixtral") return "llama";  // llama.cpp stores Mixtral as llama with experts
  if (model_type == "qwen3_moe") return "qwen3moe";
  if (model_type == "deepseek_v3" || model_type == "kimi_k2") return "deepseek2";
  if (model_type == "kimi_linear") return "kimi-linear";
  return gdn_gguf_arch(model_type);  // qwen3_next, qwen3_5_moe: Gated DeltaNet hybrids
}

// Features of these model types that the llama-family code does not implement.
void reject_unsupported(const json& c) {
  const std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu") fail("hidden_act '" + act + "' is not supported (only silu)");
  if (const json* b = field(c, "mlp_bias"); b && b->is_boolean() && b->get<bool>())
    fail("mlp_bias is not supported");
  if (const json* s = field(c, "use_sliding_window"); s && s->is_boolean() && s->get<bool>())
    fail("sliding-window attention (use_sliding_window) is not supported");
}

// rope_parameters (transformers 5) or rope_scaling (earlier); null if neither.
const json* rope_section(const json& c) {
  if (const json* r = field(c, "rope_parameters"); r && r->is_object()) return r;
  if (const json* r = field(c, "rope_scaling"); r && r->is_object()) return r;
  return nullptr;
}

// llama3 rope: per-dimension divisors of the rotation frequency (llama.cpp's
// rope_freqs): high frequencies keep theirs, low ones are divided by `factor`,
// the band between is interpolated smoothly.
std::vector<float> llama3_freq_factors(const json& r, int n_dims, double base) {
  const double factor = number(r, "factor"), lo = number(r, "low_freq_factor", 1.0),
               hi = number(r, "high_freq_factor", 4.0);
  const double ctx = number(r, "original_max_position_embeddings", 8192);
  if (factor <= 0 || hi <= lo) fail("llama3 rope_scaling needs factor > 0 and high_freq_factor > low_freq_factor");
  const double lo_wavelen = ctx / lo, hi_wavelen = ctx / hi;
  std::vector<float> ff(n_dims / 2);
  for (int i = 0; i < n_dims / 2; ++i) {
    const double inv_freq = std::pow(base, -2.0 * i / n_dims);
    const double wavelen = 2 * M_PI / inv_freq;
    if (wavelen < hi_wavelen) {
      ff[i] = 1.0f;
    } else if (wavelen > lo_wavelen) {
      ff[i] = (float)factor;
    } else {
      const double smooth = (ctx / wavelen - lo) / (hi - lo);
      ff[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
    }
  }
  return ff;
}

void add_rope_freqs(const std::vector<float>& ff, gguf::File& out) {
  std::vector<uint8_t> bytes(ff.size() * sizeof(float));
  std::memcpy(bytes.data(), ff.data(), bytes.size());
  TensorEntry e;
  e.name = "rope_freqs.weight";
  e.type = DType::F32;
  e.shape = {(int64_t)ff.size()};
  out.manifest.add_in_memory(std::move(e), std::move(bytes));
}

// Rope base, scaling type and its parameters, as llama.cpp names them.
void rope_to_metadata(const json& c, const std::string& a, int n_dims, int64_t n_ctx, gguf::File& out) {
  const json* r = rope_section(c);
  const double base = r && field(*r, "rope_theta") ? number(*r, "rope_theta") : number(c, "rope_theta", 10000.0);
  out.kv[a + "rope.freq_base"] = Value::of_float(base);
  std::string type = "default";
  if (r) type = field(*r, "rope_type") ? r->at("rope_type").get<std::string>() : r->value("type", "default");
  if (type == "default") return;
  if (type == "linear") {
    out.kv[a + "rope.scaling.type"] = Value::of_string("linear");
    out.kv[a + "rope.scaling.factor"] = Value::of_float(number(*r, "factor"));
  } else if (type == "yarn") {
    const double factor = number(*r, "factor");
    if (factor <= 0) fail("yarn rope factor must be positive");
    out.kv[a + "rope.scaling.type"] = Value::of_string("yarn");
    out.kv[a + "rope.scaling.factor"] = Value::of_float(factor);
    out.kv[a + "rope.scaling.original_context_length"] =
        Value::of_int(integer(*r, "original_max_position_embeddings", n_ctx));
    out.kv[a + "rope.scaling.yarn_beta_fast"] = Value::of_float(number(*r, "beta_fast", 32.0));
    out.kv[a + "rope.scaling.yarn_beta_slow"] = Value::of_float(number(*r, "beta_slow", 1.0));
    // HF's attention_factor is the whole magnitude scale; spool's rope (like
    // llama.cpp's) already multiplies by 1 + 0.1 ln(factor) and takes the rest.
    // transformers: attention_factor, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    // when both are set, else get_mscale(factor) (which spool's rope applies by itself).
    auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    const double mscale = number(*r, "mscale", 0.0), mscale_all = number(*r, "mscale_all_dim", 0.0);
    double attention_factor = 0.0;
    if (field(*r, "attention_factor")) attention_factor = number(*r, "attention_factor");
    else if (mscale != 0.0 && mscale_all != 0.0) attention_factor = get_mscale(mscale) / get_mscale(mscale_all);
    if (attention_factor != 0.0)
      out.kv[a + "rope.scaling.attn_factor"] = Value::of_float(attention_factor / (1.0 + 0.1 * std::log(factor)));
    // DeepSeek's attention scale uses mscale_all_dim (llama.cpp's key: 0.1 * mscale_all_dim).
    if (mscale_all != 0.0) out.kv[a + "rope.scaling.yarn_log_multiplier"] = Value::of_float(0.1 * mscale_all);
  } else if (type == "llama3") {
    add_rope_freqs(llama3_freq_factors(*r, n_dims, base), out);
  } else {
    fail("rope type '" + type + "' is not supported (default, linear, yarn, llama3)");
  }
}

// Expert counts and widths for mixtral / qwen3_moe, and which layers of a
// qwen3_moe keep a dense MLP: those in mlp_only_layers, and all but every
// decoder_sparse_step-th layer.
void moe_to_metadata(const json& c, const std::string& model_type, const std::string& a, gguf::File& out) {
  const bool mixtral = model_type == "mixtral";
  if (!mixtral && model_type != "qwen3_moe" && !gdn_gguf_arch(model_type)) return;
  const int64_t n_expert = field(c, "num_experts") ? integer(c, "num_experts") : integer(c, "num_local_experts");
  const int64_t n_used = integer(c, "num_experts_per_tok");
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert)
    fail("num_experts_per_tok must be in 1..num_experts (" + std::to_string(n_expert) + ")");
  out.kv[a + "expert_count"] = Value::of_int(n_expert);
  out.kv[a + "expert_used_count"] = Value::of_int(n_used);
  // Mixtral's router softmax over the top-k is a softmax over all, renormalized.
  out.kv[a + "expert_weights_norm"] = Value::of_bool(mixtral || c.value("norm_topk_prob", false));
  if (mixtral) return;  // experts are intermediate_size wide, every layer sparse
  out.kv[a + "expert_feed_forward_length"] = Value::of_int(integer(c, "moe_intermediate_size"));
  const int64_t n_layer = integer(c, "num_hidden_layers"), step = integer(c, "decoder_sparse_step", 1);
  std::vector<int64_t> only;
  if (const json* m = field(c, "mlp_only_layers")) {
    if (!m->is_array()) fail("'mlp_only_layers' should be a list of layer indices");
    for (const json& l : *m) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= n_layer)
        fail("'mlp_only_layers' entry " + l.dump() + " is not a layer index");
      only.push_back(l.get<int64_t>());
    }
  }
  std::vector<int64_t> dense;
  for (int64_t l = 0; l < n_layer; ++l)
    if (std::find(only.begin(), only.end(), l) != only.end() || step <= 0 || (l + 1) % step != 0)
      dense.push_back(l);
  out.kv[kDenseFfnLayersKey] = Value::of_ints(dense);
}

// DeepSeek-V3 / Kimi-K2: multi-head latent attention and routing, under
// llama.cpp's deepseek2 keys (the cache row is one "head" of kv_lora_rank +
// rope dims; the *_mla keys give the decompressed head sizes).
void deepseek_to_metadata(const json& c, const std::string& a, gguf::File& out) {
  const int64_t kv_lora = integer(c, "kv_lora_rank"), rope = integer(c, "qk_rope_head_dim");
  const int64_t nope = integer(c, "qk_nope_head_dim"), v = integer(c, "v_head_dim");
  if (kv_lora <= 0 || rope <= 0 || nope <= 0 || v <= 0 || rope % 2)
    fail("kv_lora_rank, qk_rope_head_dim (even), qk_nope_head_dim and v_head_dim must be positive");
  out.kv[a + "attention.head_count_kv"] = Value::of_int(1);
  out.kv[a + "attention.q_lora_rank"] = Value::of_int(integer(c, "q_lora_rank", 0));
  out.kv[a + "attention.kv_lora_rank"] = Value::of_int(kv_lora);
  out.kv[a + "attention.key_length"] = Value::of_int(kv_lora + rope);
  out.kv[a + "attention.value_length"] = Value::of_int(kv_lora);
  out.kv[a + "attention.key_length_mla"] = Value::of_int(nope + rope);
  out.kv[a + "attention.value_length_mla"] = Value::of_int(v);
  out.kv[a + "rope.dimension_count"] = Value::of_int(rope);
  // rope_interleave (default true): rotate adjacent pairs. transformers de-interleaves
  // q_pe/k_pe and rotates halves, which gives the same dot products.
  out.kv[kRopeNeoxKey] = Value::of_bool(!c.value("rope_interleave", true));
  out.kv[a + "leading_dense_block_count"] = Value::of_int(integer(c, "first_k_dense_replace", 0));
  const int64_t n_expert = integer(c, "n_routed_experts"), n_used = integer(c, "num_experts_per_tok");
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert)
    fail("num_experts_per_tok must be in 1..n_routed_experts (" + std::to_string(n_expert) + ")");
  out.kv[a + "expert_count"] = Value::of_int(n_expert);
  out.kv[a + "expert_used_count"] = Value::of_int(n_used);
  out.kv[a + "expert_feed_forward_length"] = Value::of_int(integer(c, "moe_intermediate_size"));
  out.kv[a + "expert_shared_count"] = Value::of_int(integer(c, "n_shared_experts", 0));
  out.kv[a + "expert_weights_scale"] = Value::of_float(number(c, "routed_scaling_factor", 1.0));
  out.kv[a + "expert_weights_norm"] = Value::of_bool(c.value("norm_topk_prob", false));
  // transformers 5 writes no scoring_func; its DeepSeek-V3 router is sigmoid.
  const std::string scoring = c.value("scoring_func", std::string("sigmoid"));
  if (scoring != "sigmoid" && scoring != "softmax") fail("scoring_func '" + scoring + "' is not supported");
  out.kv[a + "expert_gating_func"] = Value::of_int(scoring == "sigmoid" ? 2 : 1);
  const std::string method = c.value("topk_method", std::string("noaux_tc"));
  const int64_t n_group = integer(c, "n_group", 1), topk_group = integer(c, "topk_group", n_group);
  if (method != "noaux_tc" && !(method == "greedy" && n_group <= 1))
    fail("topk_method '" + method + "' is not supported (noaux_tc, or greedy without groups)");
  out.kv[a + "expert_group_count"] = Value::of_int(n_group);
  out.kv[a + "expert_group_used_count"] = Value::of_int(topk_group);
}

}  // namespace

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const std::exception& e) {
    throw Error("'" + path + "' is not valid JSON: " + e.what());
  }
}

namespace {
std::string config_to_metadata_checked(const json& c, const std::string& name, gguf::File& out);
}

std::string config_to_metadata(const json& c, const std::string& name, gguf::File& out) {
  try {
    return config_to_metadata_checked(c, name, out);
  } catch (const json::exception& e) {  // a field of the wrong JSON type where a default was read with value()
    fail(std::string("unexpected structure: ") + e.what());
  }
}

namespace {
std::string config_to_metadata_checked(const json& c, const std::string& name, gguf::File& out) {
  if (!c.is_object()) fail("not a JSON object");
  const json* mt = field(c, "model_type");
  if (!mt || !mt->is_string()) fail("missing 'model_type'");
  const char* arch = gguf_arch(mt->get<std::string>());
  if (!arch) fail("unsupported model_type '" + mt->get<std::string>() + "' (supported: llama, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3, qwen3_next, qwen3_5_moe_text, kimi_linear)");
  reject_unsupported(c);
  const std::string a = std::string(arch) + ".";
  const int64_t n_embd = integer(c, "hidden_size"), n_head = integer(c, "num_attention_heads");
  if (n_head <= 0) fail("num_attention_heads must be positive");
  const int64_t head_dim = integer(c, "head_dim", n_embd / n_head);
  const int64_t n_ctx = integer(c, "max_position_embeddings", 2048);
  const int n_rot = (int)(head_dim * number(c, "partial_rotary_factor", 1.0));

  out.version = 0;  // not a GGUF file
  out.kv["general.architecture"] = Value::of_string(arch);
  out.kv["general.name"] = Value::of_string(name);
  out.kv[a + "context_length"] = Value::of_int(n_ctx);
  out.kv[a + "embedding_length"] = Value::of_int(n_embd);
  out.kv[a + "block_count"] = Value::of_int(integer(c, "num_hidden_layers"));
  out.kv[a + "feed_forward_length"] = Value::of_int(integer(c, "intermediate_size"));
  out.kv[a + "attention.head_count"] = Value::of_int(n_head);
  out.kv[a + "attention.head_count_kv"] = Value::of_int(integer(c, "num_key_value_heads", n_head));
  out.kv[a + "attention.key_length"] = Value::of_int(head_dim);
  out.kv[a + "attention.value_length"] = Value::of_int(head_dim);
  out.kv[a + "attention.layer_norm_rms_epsilon"] = Value::of_float(number(c, "rms_norm_eps", 1e-6));
  out.kv[a + "rope.dimension_count"] = Value::of_int(n_rot);
  if (field(c, "vocab_size")) out.kv[a + "vocab_size"] = Value::of_int(integer(c, "vocab_size"));
  out.kv[kRopeNeoxKey] = Value::of_bool(true);  // every HF model type here rotates halves
  rope_to_metadata(c, a, n_rot, n_ctx, out);
  moe_to_metadata(c, mt->get<std::string>(), a, out);
  if (std::string(arch) == "deepseek2") deepseek_to_metadata(c, a, out);
  if (std::string(arch) == "kimi-linear") kimi_linear_to_metadata(c, a, out);
  if (gdn_gguf_arch(mt->get<std::string>())) gdn_config_to_metadata(c, a, out);
  return arch;
}

}  // namespace

}  // namespace spool::hf
