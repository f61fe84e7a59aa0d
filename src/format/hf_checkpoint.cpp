// Opening a Hugging Face checkpoint directory: config.json through
// hf_config.cpp, then every safetensors file (validated by safetensors::open)
// into one Manifest with GGUF tensor names and shapes (each MoE expert's
// matrices as their own slice entries). Matrices stay in the files; small
// non-F32 vectors (norm weights, biases) are converted to F32 in memory
// because the compute code reads them as float. Quantized checkpoints
// (hf_quant.h): FP8 matrices stay in the files with their scale grid as a
// companion entry; pack-quantized int4 ones are repacked into in-memory Q4_0.
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/fp16.h"
#include "format/compressed_tensors.h"
#include "format/hf_checkpoint.h"
#include "format/hf_hybrid.h"
#include "format/hf_quant.h"
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

// HF tensor name -> GGUF name; "" for a name that is not part of these models
// (gdn: a Gated DeltaNet hybrid, whose linear_attn / shared_expert tensors map too).
std::string gguf_tensor_name(const std::string& hf, bool gdn) {
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
      // Kimi Linear: Kimi Delta Attention (llama.cpp's names; A_log stays as it is,
      // the model negates and exponentiates it) and the block_sparse_moe spellings
      {"self_attn.q_conv1d.weight", "ssm_conv1d_q.weight"},
      {"self_attn.k_conv1d.weight", "ssm_conv1d_k.weight"},
      {"self_attn.v_conv1d.weight", "ssm_conv1d_v.weight"},
      {"self_attn.f_a_proj.weight", "ssm_f_a.weight"},
      {"self_attn.f_b_proj.weight", "ssm_f_b.weight"},
      {"self_attn.g_a_proj.weight", "ssm_g_a.weight"},
      {"self_attn.g_b_proj.weight", "ssm_g_b.weight"},
      {"self_attn.b_proj.weight", "ssm_beta.weight"},
      {"self_attn.A_log", "ssm_a_log"},
      {"self_attn.dt_bias", "ssm_dt.bias"},
      {"self_attn.o_norm.weight", "ssm_norm.weight"},
      {"block_sparse_moe.gate_proj.weight", "ffn_gate.weight"},
      {"block_sparse_moe.up_proj.weight", "ffn_up.weight"},
      {"block_sparse_moe.down_proj.weight", "ffn_down.weight"},
      {"block_sparse_moe.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"block_sparse_moe.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"block_sparse_moe.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"block_sparse_moe.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
  };
  // Multimodal checkpoints (Qwen3.5 as released) keep the text model under model.language_model.*.
  static const std::string kNested = "model.language_model.";
  if (hf.rfind(kNested, 0) == 0) return gguf_tensor_name("model." + hf.substr(kNested.size()), gdn);
  if (auto it = top.find(hf); it != top.end()) return it->second;
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(hf, m, layer_re)) return "";
  const std::string blk = "blk." + m[1].str() + ".";
  if (auto it = layer.find(m[2].str()); it != layer.end()) return blk + it->second;
  if (gdn)
    if (std::string name = gdn_tensor_name(m[2].str(), blk); !name.empty()) return name;
  return moe_tensor_name(m[2].str(), blk);
}

// Old checkpoints carry these buffers; they are recomputed from the config.
// Qwen3-Next / Qwen3.5 checkpoints carry a multi-token-prediction block ("mtp.*"), which generation does not use,
// and Qwen3.5's a vision encoder ("model.visual.*"): spool runs the text model only.
bool ignored_tensor(const std::string& hf) {
  return hf.find("rotary_emb.inv_freq") != std::string::npos || hf.rfind("mtp.", 0) == 0 ||
         hf.rfind("model.visual.", 0) == 0 || hf.rfind("visual.", 0) == 0;
}

// A multimodal config (Qwen3.5 as released: model_type qwen3_5_moe with the
// text model's fields in text_config, the vision encoder's in vision_config)
// -> the text model's config: text_config, plus top-level fields it lacks
// (tie_word_embeddings, quantization_config; model_type where text_config has
// none: qwen3_5_moe reads as its text model). Other configs are returned as they are.
nlohmann::json text_model_config(const nlohmann::json& cfg) {
  if (!cfg.is_object()) return cfg;
  auto it = cfg.find("text_config");
  if (it == cfg.end() || !it->is_object()) return cfg;
  nlohmann::json text = *it;
  for (auto f = cfg.begin(); f != cfg.end(); ++f)
    if (f.key() != "text_config" && f.key() != "vision_config" && f.key() != "architectures" &&
        !text.contains(f.key()))
      text[f.key()] = f.value();
  return text;
}

DType gguf_dtype(const std::string& st, const std::string& what) {
  if (st == "F32") return DType::F32;
  if (st == "F16") return DType::F16;
  if (st == "BF16") return DType::BF16;
  throw Error(what + " has dtype " + st + ", which is not supported for this model (F32, F16, BF16; F8_E4M3 with "
              "block scales; compressed-tensors int4)");
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

// Every safetensors tensor of the checkpoint by HF name, with its shard.
struct StTensor {
  const safetensors::File* file;
  int file_index;
  safetensors::Entry entry;
};
using StTensors = std::map<std::string, StTensor>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GGUF name of the scale grid of weight `weight` ("blk.0.attn_q_a.weight" ->
// "blk.0.attn_q_a.scale", "blk.1.ffn_up_exps.weight#3" -> "blk.1.ffn_up_exps.scale#3").
std::string scale_name(const std::string& weight) {
  const size_t at = weight.rfind(".weight");
  return weight.substr(0, at) + ".scale" + weight.substr(at + 7);
}

std::string describe(const StTensor& st, const std::string& hf_name) {
  return "'" + st.file->path + "' tensor '" + hf_name + "'";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

TensorEntry new_entry(const std::string& hf_name, const std::string& what, bool gdn) {
  TensorEntry t;
  t.name = gguf_tensor_name(hf_name, gdn);
  if (t.name.empty()) throw Error(what + " is not part of a supported model (unexpected tensor name)");
  if (const size_t hash = t.name.find('#'); hash != std::string::npos) t.expert = std::stoi(t.name.substr(hash + 1));
  return t;
}

// An FP8 block-scaled matrix: the codes stay in the file, the scale grid
// (HF "<weight>_scale_inv", [ceil(rows / br), ceil(cols / bc)]) becomes the
// companion entry the weight store pins with it.
void add_fp8_tensor(const std::string& hf_name, const StTensor& st, TensorEntry t, const StTensors& all,
                    const QuantConfig& q, Manifest& m) {
  const std::string what = describe(st, hf_name);
  const safetensors::Entry& e = st.entry;
  if (q.method != QuantConfig::Method::Fp8Block)
    throw Error(what + " is F8_E4M3 but config.json has no fp8 quantization_config with weight_block_size");
  if (e.shape.size() != 2) throw Error(what + " is F8_E4M3 but not a matrix (shape " + shape_str(e.shape) + ")");
  const std::string sname = hf_name + "_scale_inv";
  auto it = all.find(sname);
  if (it == all.end()) throw Error(what + " is F8_E4M3 but its block scales '" + sname + "' are missing");
  const safetensors::Entry& se = it->second.entry;
  const std::vector<int64_t> want = {(e.shape[0] + q.block_rows - 1) / q.block_rows,
                                     (e.shape[1] + q.block_cols - 1) / q.block_cols};
  if (se.shape != want)
    throw Error(describe(it->second, sname) + " has shape " + shape_str(se.shape) + ", expected " + shape_str(want) +
                " for " + shape_str(e.shape) + " in blocks of " + std::to_string(q.block_rows) + "x" +
                std::to_string(q.block_cols));
  TensorEntry s;
  s.name = scale_name(t.name);
  s.type = DType::F32;
  s.shape = {want[1], want[0]};
  s.expert = t.expert;
  if (se.dtype == "F32") {
    s.file = it->second.file_index;
    s.offset = se.offset;
    s.bytes = se.bytes;
    m.add(std::move(s));
  } else if (se.dtype == "BF16" || se.dtype == "F16") {
    m.add_in_memory(std::move(s), vector_as_f32(it->second.file->path, se));
  } else {
    throw Error(describe(it->second, sname) + " has dtype " + se.dtype + ", expected F32 (or BF16/F16)");
  }
  t.type = DType::F8_E4M3;
  t.companion = scale_name(t.name);
  t.block_rows = q.block_rows;
  t.block_cols = q.block_cols;
  t.file = st.file_index;
  t.offset = e.offset;
  t.bytes = e.bytes;
  m.add(std::move(t));
}

// A compressed-tensors pack-quantized Linear ("<base>.weight_packed" with
// weight_scale and weight_shape) repacked into an in-memory Q4_0 matrix.
void add_packed_tensor(const std::string& base, const StTensor& st, const StTensors& all, const QuantConfig& q,
                       Manifest& m, bool gdn) {
  const std::string hf_name = base + ".weight", what = describe(st, base + ".weight_packed");
  TensorEntry t = new_entry(hf_name, what, gdn);
  if (q.method != QuantConfig::Method::PackQuantized)
    throw Error(what + " is pack-quantized but config.json has no compressed-tensors quantization_config");
  for (const char* unsupported : {".weight_zero_point", ".weight_g_idx"})
    if (all.count(base + unsupported))
      throw Error("'" + base + unsupported + "': zero points and activation reordering are not supported");
  auto find = [&](const char* suffix) -> const StTensor& {
    auto it = all.find(base + suffix);
    if (it == all.end()) throw Error(what + ": '" + base + suffix + "' is missing");
    return it->second;
  };
  const StTensor& shape_st = find(".weight_shape");
  const StTensor& scale_st = find(".weight_scale");
  const std::vector<int64_t> shape = shape_st.file->read_i64(base + ".weight_shape");
  if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0 || shape[1] > (1 << 24) || shape[0] > (1 << 24))
    throw Error(describe(shape_st, base + ".weight_shape") + " must hold two positive sizes (rows, cols)");
  const int64_t rows = shape[0], cols = shape[1];
  if (cols % q.group_size != 0)
    throw Error(what + ": " + std::to_string(cols) + " columns are not a multiple of group_size " +
                std::to_string(q.group_size));
  const safetensors::Entry& pe = st.entry;
  if (pe.dtype != "I32" || pe.shape != std::vector<int64_t>{rows, (cols + 7) / 8})
    throw Error(what + " is " + pe.dtype + " " + shape_str(pe.shape) + ", expected I32 " +
                shape_str({rows, (cols + 7) / 8}) + " for weight_shape " + shape_str(shape));
  const safetensors::Entry& se = scale_st.entry;
  using compressed_tensors::ScaleType;
  const ScaleType stype = se.dtype == "BF16" ? ScaleType::BF16 : se.dtype == "F16" ? ScaleType::F16 : ScaleType::F32;
  if ((se.dtype != "BF16" && se.dtype != "F16" && se.dtype != "F32") ||
      se.shape != std::vector<int64_t>{rows, cols / q.group_size})
    throw Error(describe(scale_st, base + ".weight_scale") + " is " + se.dtype + " " + shape_str(se.shape) +
                ", expected BF16/F16/F32 " + shape_str({rows, cols / q.group_size}));
  std::vector<uint8_t> packed(pe.bytes), scales(se.bytes);
  LocalFile(st.file->path).read(pe.offset, pe.bytes, packed.data());
  LocalFile(scale_st.file->path).read(se.offset, se.bytes, scales.data());
  t.type = DType::Q4_0;
  t.shape = {cols, rows};
  m.add_in_memory(std::move(t), compressed_tensors::repack_to_q4_0(packed.data(), scales.data(), stype, rows, cols,
                                                                     q.group_size, what));
}

void add_tensor(const std::string& hf_name, const StTensor& st, const StTensors& all, const QuantConfig& q,
                Manifest& m, bool gdn) {
  const std::string what = describe(st, hf_name);
  const safetensors::Entry& e = st.entry;
  TensorEntry t = new_entry(hf_name, what, gdn);
  t.shape.assign(e.shape.rbegin(), e.shape.rend());  // safetensors is row-major, GGUF lists the contiguous dim first
  if (t.shape.empty()) throw Error(what + " is a scalar");
  if (e.dtype == "F8_E4M3") return add_fp8_tensor(hf_name, st, std::move(t), all, q, m);
  t.type = gguf_dtype(e.dtype, what);
  if (t.shape.size() == 1 && t.type != DType::F32) {
    t.type = DType::F32;
    m.add_in_memory(std::move(t), vector_as_f32(st.file->path, e));
    return;
  }
  t.file = st.file_index;
  t.offset = e.offset;
  t.bytes = e.bytes;
  m.add(std::move(t));
}

// Opens every shard (files registered in m) and lists their tensors.
StTensors collect_shards(const fs::path& dir, std::vector<safetensors::File>& files, Manifest& m) {
  const auto shards = list_shards(dir);
  files.reserve(shards.size());
  StTensors all;
  for (const auto& [file, names] : shards) {
    const std::string path = (dir / file).string();
    if (!fs::exists(path)) throw Error("shard '" + path + "' (listed in model.safetensors.index.json) is missing");
    files.push_back(safetensors::open(path));
    const safetensors::File& st = files.back();
    const int index = (int)m.files.size();
    m.files.push_back(path);
    m.file_sizes.push_back(fs::file_size(path));
    if (names.empty()) {
      for (const auto& [name, e] : st.tensors) all[name] = StTensor{&st, index, e};
    } else {
      for (const std::string& name : names) all[name] = StTensor{&st, index, st.require(name)};
    }
  }
  return all;
}

void add_shards(const fs::path& dir, const QuantConfig& q, Manifest& m, bool gdn) {
  std::vector<safetensors::File> files;
  const StTensors all = collect_shards(dir, files, m);
  static const char* kPackedParts[] = {".weight_scale", ".weight_shape", ".weight_zero_point", ".weight_g_idx"};
  for (const auto& [name, st] : all) {
    if (ignored_tensor(name)) continue;
    if (ends_with(name, "_scale_inv")) {  // added with its FP8 weight
      auto w = all.find(name.substr(0, name.size() - 10));
      if (w == all.end() || w->second.entry.dtype != "F8_E4M3")
        throw Error(describe(st, name) + " scales no F8_E4M3 weight");
      continue;
    }
    if (ends_with(name, ".weight_packed")) {
      add_packed_tensor(name.substr(0, name.size() - 14), st, all, q, m, gdn);
      continue;
    }
    bool part = false;
    for (const char* suffix : kPackedParts) {
      if (!ends_with(name, suffix)) continue;
      const std::string base = name.substr(0, name.size() - std::strlen(suffix));
      if (!all.count(base + ".weight_packed")) throw Error(describe(st, name) + " belongs to no '" + base + ".weight_packed'");
      part = true;
    }
    if (!part) add_tensor(name, st, all, q, m, gdn);
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
  QuantConfig quant;
  try {
    const nlohmann::json cfg = text_model_config(read_json(config.string()));
    quant = read_quant_config(cfg);
    const fs::path abs = fs::absolute(dir).lexically_normal();
    const std::string name = (abs.filename().empty() ? abs.parent_path() : abs).filename().string();
    config_to_metadata(cfg, name, out);
    tied = cfg.value("tie_word_embeddings", false);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + config.string() + "': " + e.what());
  } catch (const Error& e) {
    throw Error("'" + dir.string() + "': " + e.what());
  }
  const std::string arch = out.architecture();
  add_shards(dir, quant, out.manifest, arch == "qwen3next" || arch == "qwen35moe");
  gdn_fix_tensors(out);  // Gated DeltaNet hybrids: the values llama.cpp's converter would store
  // Tied embeddings: no lm_head, the output projection reuses token_embd.
  if (!tied && !out.manifest.find("output.weight") && out.manifest.find("token_embd.weight"))
    throw Error("'" + dir.string() + "': lm_head.weight is missing and config.json does not tie word embeddings");
  return out;
}

}  // namespace spool::hf
