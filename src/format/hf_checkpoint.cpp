// Opening a Hugging Face checkpoint directory: config.json through
// hf_config.cpp, then every safetensors file (validated by safetensors::open)
// into one Manifest with GGUF tensor names and shapes (each MoE expert's
// matrices as their own slice entries). Matrices stay in the files; small
// non-F32 vectors (norm weights, biases) are converted to F32 in memory
// because the compute code reads them as float.
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/fp16.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors.h"
#include "storage/local_file.h"

namespace spool::hf {
namespace fs = std::filesystem;

namespace {

// Mixture-of-experts tensors of one layer (name after "model.layers.N."):
// Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2} and Qwen3-MoE's
// mlp.{gate, experts.E.gate_proj/up_proj/down_proj}. Each expert's matrix
// becomes its own slice entry "blk.N.ffn_gate_exps.weight#E".
std::string moe_tensor_name(const std::string& name, const std::string& blk) {
  static const std::regex router_re(R"((block_sparse_moe|mlp)\.gate\.weight)");
  static const std::regex expert_re(R"((block_sparse_moe|mlp)\.experts\.(\d+)\.(\w+)\.weight)");
  static const std::map<std::string, std::string> proj = {
      {"w1", "ffn_gate_exps"}, {"w3", "ffn_up_exps"}, {"w2", "ffn_down_exps"},
      {"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"},
  };
  std::smatch m;
  if (std::regex_match(name, m, router_re)) return blk + "ffn_gate_inp.weight";
  if (!std::regex_match(name, m, expert_re)) return "";
  auto it = proj.find(m[3].str());
  if (it == proj.end() || m[2].length() > 6) return "";
  return expert_slice_name(blk + it->second + ".weight", std::stoi(m[2].str()));
}

// HF tensor name -> GGUF name; "" for a name that is not part of these models.
std::string gguf_tensor_name(const std::string& hf) {
  static const std::map<std::string, std::string> top = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      // DeepSeek-V3 multi-head latent attention and MoE extras
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
  };
  if (auto it = top.find(hf); it != top.end()) return it->second;
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(hf, m, layer_re)) return "";
  const std::string blk = "blk." + m[1].str() + ".";
  if (auto it = layer.find(m[2].str()); it != layer.end()) return blk + it->second;
  return moe_tensor_name(m[2].str(), blk);
}

// Old checkpoints carry these buffers; they are recomputed from the config.
bool ignored_tensor(const std::string& hf) { return hf.find("rotary_emb.inv_freq") != std::string::npos; }

DType gguf_dtype(const std::string& st, const std::string& what) {
  if (st == "F32") return DType::F32;
  if (st == "F16") return DType::F16;
  if (st == "BF16") return DType::BF16;
  throw Error(what + " has dtype " + st + ", which is not supported for this model (F32, F16, BF16)");
}

// The safetensors files of the checkpoint and which tensors each holds.
std::map<std::string, std::vector<std::string>> list_shards(const fs::path& dir) {
  std::map<std::string, std::vector<std::string>> shards;  // file -> tensor names (empty: all)
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json(index.string());
    const auto it = j.find("weight_map");
    if (it == j.end() || !it->is_object()) throw Error("'" + index.string() + "' has no weight_map object");
    for (const auto& [name, file] : it->items()) {
      if (!file.is_string()) throw Error("'" + index.string() + "': weight_map entry '" + name + "' is not a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        throw Error("'" + index.string() + "': shard name '" + f + "' must be a plain file name");
      shards[f].push_back(name);
    }
    if (shards.empty()) throw Error("'" + index.string() + "': weight_map is empty");
    return shards;
  }
  if (fs::exists(dir / "model.safetensors")) return {{"model.safetensors", {}}};
  throw Error("'" + dir.string() + "' has neither model.safetensors nor model.safetensors.index.json");
}

std::vector<uint8_t> vector_as_f32(const std::string& path, const safetensors::Entry& e) {
  std::vector<uint8_t> raw(e.bytes);
  LocalFile(path).read(e.offset, e.bytes, raw.data());
  std::vector<uint8_t> out((size_t)e.n_elements() * 4);
  for (int64_t i = 0; i < e.n_elements(); ++i) {
    uint16_t h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    const float f = e.dtype == "BF16" ? bf16_to_fp32(h) : fp16_to_fp32(h);
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

void add_tensor(const std::string& path, int file_index, const std::string& hf_name, const safetensors::Entry& e,
                Manifest& m) {
  const std::string what = "'" + path + "' tensor '" + hf_name + "'";
  TensorEntry t;
  t.name = gguf_tensor_name(hf_name);
  if (t.name.empty()) throw Error(what + " is not part of a supported model (unexpected tensor name)");
  if (const size_t hash = t.name.find('#'); hash != std::string::npos) t.expert = std::stoi(t.name.substr(hash + 1));
  t.type = gguf_dtype(e.dtype, what);
  t.shape.assign(e.shape.rbegin(), e.shape.rend());  // safetensors is row-major, GGUF lists the contiguous dim first
  if (t.shape.empty()) throw Error(what + " is a scalar");
  if (t.shape.size() == 1 && t.type != DType::F32) {
    t.type = DType::F32;
    m.add_in_memory(std::move(t), vector_as_f32(path, e));
    return;
  }
  t.file = file_index;
  t.offset = e.offset;
  t.bytes = e.bytes;
  m.add(std::move(t));
}

void add_shards(const fs::path& dir, Manifest& m) {
  for (const auto& [file, names] : list_shards(dir)) {
    const std::string path = (dir / file).string();
    if (!fs::exists(path)) throw Error("shard '" + path + "' (listed in model.safetensors.index.json) is missing");
    const safetensors::File st = safetensors::open(path);
    const int index = (int)m.files.size();
    m.files.push_back(path);
    m.file_sizes.push_back(fs::file_size(path));
    if (names.empty()) {
      for (const auto& [name, e] : st.tensors)
        if (!ignored_tensor(name)) add_tensor(path, index, name, e, m);
    } else {
      for (const std::string& name : names)
        if (!ignored_tensor(name)) add_tensor(path, index, name, st.require(name), m);
    }
  }
}

}  // namespace

bool is_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  return fs::path(path).filename() == "config.json";
}

std::string checkpoint_dir(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

gguf::File open_checkpoint(const std::string& path) {
  const fs::path dir = checkpoint_dir(path);
  const fs::path config = dir / "config.json";
  if (!fs::exists(config)) throw Error("'" + dir.string() + "' is not a Hugging Face checkpoint: no config.json");
  gguf::File out;
  bool tied = false;
  try {
    const nlohmann::json cfg = read_json(config.string());
    const fs::path abs = fs::absolute(dir).lexically_normal();
    const std::string name = (abs.filename().empty() ? abs.parent_path() : abs).filename().string();
    config_to_metadata(cfg, name, out);
    tied = cfg.value("tie_word_embeddings", false);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + config.string() + "': " + e.what());
  } catch (const Error& e) {
    throw Error("'" + dir.string() + "': " + e.what());
  }
  add_shards(dir, out.manifest);
  // Tied embeddings: no lm_head, the output projection reuses token_embd.
  if (!tied && !out.manifest.find("output.weight") && out.manifest.find("token_embd.weight"))
    throw Error("'" + dir.string() + "': lm_head.weight is missing and config.json does not tie word embeddings");
  return out;
}

}  // namespace spool::hf
