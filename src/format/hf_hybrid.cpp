// Qwen3-Next / Qwen3.5-MoE checkpoints in llama.cpp's qwen3next / qwen35moe
// layout. Qwen3-Next's fused in_proj_qkvz (q, k, v, z interleaved per key
// head) and in_proj_ba keep their checkpoint layout under llama.cpp's legacy
// names ssm_in / ssm_ba; Qwen3.5's separate projections map one to one. Value
// heads stay in the checkpoint's grouped order (kGdnVHeadsGroupedKey).
#include "format/hf_hybrid.h"

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/fp16.h"
#include "storage/local_file.h"

namespace spool::hf {
namespace {

using nlohmann::json;
using gguf::Value;

[[noreturn]] void fail(const std::string& why) { throw Error("config.json: " + why); }

int64_t positive(const json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(std::string("'") + key + "' must be a positive integer");
  return it->get<int64_t>();
}

// The tensor's values as F32 (file or memory; F32, F16 or BF16).
std::vector<float> read_f32(const Manifest& m, const TensorEntry& t) {
  const int64_t n = t.n_elements();
  std::vector<uint8_t> raw(t.bytes);
  if (t.memory)
    std::memcpy(raw.data(), t.memory, t.bytes);
  else
    LocalFile(m.files[t.file]).read(t.offset, t.bytes, raw.data());
  std::vector<float> out(n);
  if (t.type == DType::F32 && t.bytes == (uint64_t)n * 4) {
    std::memcpy(out.data(), raw.data(), t.bytes);
  } else if ((t.type == DType::F16 || t.type == DType::BF16) && t.bytes == (uint64_t)n * 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = t.type == DType::BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
    }
  } else {
    throw Error("tensor '" + t.name + "' has type " + dtype_name(t.type) + ", expected F32, F16 or BF16");
  }
  return out;
}

void replace(Manifest& m, const std::string& name, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  m.replace_in_memory(name, DType::F32, std::move(bytes));
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

const char* gdn_gguf_arch(const std::string& model_type) {
  if (model_type == "qwen3_next") return "qwen3next";
  if (model_type == "qwen3_5_moe_text" || model_type == "qwen3_5_moe") return "qwen35moe";
  return nullptr;
}

void gdn_config_to_metadata(const json& c, const std::string& a, gguf::File& out) {
  const int64_t n_layer = positive(c, "num_hidden_layers");
  const int64_t dk = positive(c, "linear_key_head_dim"), dv = positive(c, "linear_value_head_dim");
  const int64_t nk = positive(c, "linear_num_key_heads"), nv = positive(c, "linear_num_value_heads");
  if (nv % nk != 0) fail("linear_num_value_heads must be a multiple of linear_num_key_heads");
  out.kv[a + "ssm.conv_kernel"] = Value::of_int(positive(c, "linear_conv_kernel_dim"));
  out.kv[a + "ssm.state_size"] = Value::of_int(dk);
  out.kv[a + "ssm.group_count"] = Value::of_int(nk);
  out.kv[a + "ssm.time_step_rank"] = Value::of_int(nv);
  out.kv[a + "ssm.inner_size"] = Value::of_int(dv * nv);
  out.kv[kGdnVHeadsGroupedKey] = Value::of_bool(true);
  // layer_types (transformers 5) or full_attention_interval: which layers are linear attention.
  std::vector<int64_t> recurrent(n_layer, 0);
  if (auto it = c.find("layer_types"); it != c.end() && it->is_array()) {
    if ((int64_t)it->size() != n_layer) fail("'layer_types' must have num_hidden_layers entries");
    for (int64_t l = 0; l < n_layer; ++l) {
      const json& t = (*it)[l];
      if (!t.is_string() || (t != "linear_attention" && t != "full_attention"))
        fail("'layer_types' entry " + t.dump() + " is not linear_attention or full_attention");
      recurrent[l] = t == "linear_attention";
    }
  } else {
    const int64_t every = c.value("full_attention_interval", (int64_t)4);
    if (every <= 0) fail("'full_attention_interval' must be positive");
    for (int64_t l = 0; l < n_layer; ++l) recurrent[l] = (l + 1) % every != 0;
  }
  out.kv[a + "attention.recurrent_layers"] = Value::of_ints(recurrent);
  // Qwen3.5's router always renormalizes the top-k weights (its config has no norm_topk_prob; llama.cpp too).
  if (c.find("norm_topk_prob") == c.end()) out.kv[a + "expert_weights_norm"] = Value::of_bool(true);
  out.kv[a + "expert_shared_feed_forward_length"] = Value::of_int(positive(c, "shared_expert_intermediate_size"));
}

std::string gdn_tensor_name(const std::string& name, const std::string& blk) {
  static const std::map<std::string, std::string> names = {
      {"linear_attn.in_proj_qkvz.weight", "ssm_in.weight"},  // Qwen3-Next: [q k v z] per key head
      {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},    // Qwen3-Next: [b a] per key head
      {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"}, // Qwen3.5
      {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
      {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
      {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
      {"linear_attn.A_log", "ssm_a"},
      {"linear_attn.dt_bias", "ssm_dt.bias"},
      {"linear_attn.norm.weight", "ssm_norm.weight"},
      {"linear_attn.out_proj.weight", "ssm_out.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
  };
  auto it = names.find(name);
  return it == names.end() ? "" : blk + it->second;
}

void gdn_fix_tensors(gguf::File& out) {
  Manifest& m = out.manifest;
  const std::string arch = out.architecture();
  if (arch != "qwen3next" && arch != "qwen35moe") return;
  static const std::regex one_plus(R"((blk\.\d+\.(attn_norm|ffn_norm|attn_q_norm|attn_k_norm)|output_norm)\.weight)");
  std::vector<std::string> names;
  for (const TensorEntry& t : m.tensors) names.push_back(t.name);
  for (const std::string& name : names) {
    const TensorEntry& t = *m.find(name);
    if (ends_with(name, ".ssm_a")) {  // A = -exp(A_log)
      std::vector<float> v = read_f32(m, t);
      for (float& x : v) x = -std::exp(x);
      replace(m, name, v);
    } else if (std::regex_match(name, one_plus)) {  // Qwen3NextRMSNorm scales by (1 + weight)
      std::vector<float> v = read_f32(m, t);
      for (float& x : v) x += 1.0f;
      replace(m, name, v);
    } else if (ends_with(name, ".ssm_conv1d.weight") || ends_with(name, ".ffn_gate_inp_shexp.weight")) {
      // [C, 1, K] -> GGUF {K, C}; [1, n_embd] -> {n_embd}; read as float by the model.
      std::vector<float> v = read_f32(m, t);
      replace(m, name, v);
      for (TensorEntry& e : m.tensors)
        if (e.name == name) {
          std::vector<int64_t> s;
          for (int64_t d : e.shape)
            if (d != 1) s.push_back(d);
          e.shape = s;
        }
    }
  }
}

}  // namespace spool::hf

// ---- Export in llama.cpp's current layout (spool convert) ----
namespace spool::hf {
namespace {

ExportTensor* find_export(std::vector<ExportTensor>& ts, const std::string& name) {
  for (ExportTensor& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

// Rows of t (shape[1..] flattened; shape[0] elements each) reordered: new row i = old row perm[i].
void permute_rows(ExportTensor& t, const std::vector<int>& perm) {
  const size_t row = t.data.size() / perm.size();
  std::vector<uint8_t> out(t.data.size());
  for (size_t i = 0; i < perm.size(); ++i) std::memcpy(out.data() + i * row, t.data.data() + perm[i] * row, row);
  t.data.swap(out);
}

// Columns (elements within each row of shape[0]) reordered: new column i = old column perm[i].
void permute_cols(ExportTensor& t, const std::vector<int>& perm) {
  const size_t n = (size_t)t.shape[0], rows = t.data.size() / (n * 4);
  if (t.type != DType::F32) throw Error("tensor '" + t.name + "': column reordering needs F32");
  std::vector<float> v = t.f32(), out(v.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < n; ++i) out[r * n + i] = v[r * n + perm[i]];
  t.set_f32(out);
}

// Grouped value-head order (key head h's r heads together) -> tiled (head i of every key head together),
// for `per` consecutive rows per head, with `offset` rows before the value part.
std::vector<int> tiled_perm(int n_k, int r, int per, int offset, int total) {
  std::vector<int> perm(total);
  for (int i = 0; i < total; ++i) perm[i] = i;
  for (int i = 0; i < r; ++i)
    for (int h = 0; h < n_k; ++h)
      for (int e = 0; e < per; ++e) perm[offset + ((i * n_k + h) * per + e)] = offset + (h * r + i) * per + e;
  return perm;
}

}  // namespace

void gdn_to_llama_layout(gguf::File& meta, std::vector<ExportTensor>& ts) {
  const std::string arch = meta.architecture(), a = arch + ".";
  if (arch != "qwen3next" && arch != "qwen35moe") return;
  const int dk = (int)meta.get_int(a + "ssm.state_size"), n_k = (int)meta.get_int(a + "ssm.group_count");
  const int n_v = (int)meta.get_int(a + "ssm.time_step_rank"), dv = (int)meta.get_int(a + "ssm.inner_size") / n_v;
  const int r = n_v / n_k, n_layer = (int)meta.get_int(a + "block_count");
  const bool to_tiled = arch == "qwen35moe" && meta.get_bool(kGdnVHeadsGroupedKey, false);
  // Layer pattern: llama.cpp's full_attention_interval.
  if (const gguf::Value* v = meta.find(a + "attention.recurrent_layers")) {
    int every = 0;
    for (int l = 0; l < n_layer && !every; ++l)
      if (!v->ints[l]) every = l + 1;
    for (int l = 0; l < n_layer; ++l)
      if ((v->ints[l] != 0) != (every == 0 || (l + 1) % every != 0))
        throw Error("GGUF export: the linear/full attention pattern is not every n-th layer full attention");
    meta.kv.erase(a + "attention.recurrent_layers");
    meta.kv[a + "full_attention_interval"] = gguf::Value::of_int(every ? every : n_layer + 1);
  }
  // Qwen3.5's interleaved MRoPE sections (llama.cpp requires them): rotary pair i takes the text position from
  // section i % 3 while i < 3 * section[i % 3], so sections of ceil((pairs - k) / 3) cover every pair (11, 11, 10
  // for Qwen3.5's 32 pairs, the converter's default; a tiny fixture's 2 pairs need 1, 1, 0). Text positions are the
  // same on all axes, so this is plain NeoX rotation, as spool computes it.
  if (arch == "qwen35moe") {
    const int64_t pairs = meta.get_int(a + "rope.dimension_count", 0) / 2;
    meta.kv[a + "rope.dimension_sections"] =
        gguf::Value::of_ints({(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0});
  }
  const int kd = n_k * dk, vd = n_v * dv;
  std::vector<ExportTensor> added;
  for (int l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (ExportTensor* t = find_export(ts, p + "ffn_norm.weight")) t->name = p + "post_attention_norm.weight";
    if (ExportTensor* t = find_export(ts, p + "ssm_in.weight")) {  // [q k v z] per key head -> attn_qkv + attn_gate
      const int per = 2 * dk + 2 * r * dv;
      std::vector<int> perm;
      for (int h = 0; h < n_k; ++h) for (int e = 0; e < dk; ++e) perm.push_back(h * per + e);
      for (int h = 0; h < n_k; ++h) for (int e = 0; e < dk; ++e) perm.push_back(h * per + dk + e);
      for (int h = 0; h < n_k; ++h) for (int e = 0; e < r * dv; ++e) perm.push_back(h * per + 2 * dk + e);
      for (int h = 0; h < n_k; ++h) for (int e = 0; e < r * dv; ++e) perm.push_back(h * per + 2 * dk + r * dv + e);
      permute_rows(*t, perm);
      const size_t split = t->data.size() / (2 * kd + 2 * vd) * (2 * kd + vd);
      ExportTensor gate{p + "attn_gate.weight", t->type, {t->shape[0], vd}, {t->data.begin() + split, t->data.end()}};
      t->data.resize(split);
      t->name = p + "attn_qkv.weight";
      t->shape = {t->shape[0], 2 * kd + vd};
      added.push_back(std::move(gate));
    }
    if (!to_tiled || !find_export(ts, p + "ssm_a")) continue;
    // qwen35moe: value heads tiled (head j uses key head j % n_k), as llama.cpp's converter stores them.
    permute_rows(*find_export(ts, p + "attn_qkv.weight"), tiled_perm(n_k, r, dv, 2 * kd, 2 * kd + vd));
    permute_rows(*find_export(ts, p + "attn_gate.weight"), tiled_perm(n_k, r, dv, 0, vd));
    for (const char* name : {"ssm_beta.weight", "ssm_alpha.weight"})
      permute_rows(*find_export(ts, p + name), tiled_perm(n_k, r, 1, 0, n_v));
    for (const char* name : {"ssm_a", "ssm_dt.bias"}) permute_rows(*find_export(ts, p + name), tiled_perm(n_k, r, 1, 0, n_v));
    permute_rows(*find_export(ts, p + "ssm_conv1d.weight"), tiled_perm(n_k, r, dv, 2 * kd, 2 * kd + vd));
    permute_cols(*find_export(ts, p + "ssm_out.weight"), tiled_perm(n_k, r, dv, 0, vd));
  }
  for (ExportTensor& t : added) ts.push_back(std::move(t));
  meta.kv.erase(kGdnVHeadsGroupedKey);
}

}  // namespace spool::hf
