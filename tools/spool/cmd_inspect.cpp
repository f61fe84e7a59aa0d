// `spool inspect`: what a GGUF file or HF checkpoint holds, from its headers (no tensor
// data is read): architecture, hyper-parameters, tokenizer summary, bytes by
// dtype, the mix per tensor class (types, bytes, share of the file), the KV
// cache cost per token, and optionally every tensor and key.
#include <cstdio>
#include <map>

#include "cli_common.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/tensor_class.h"
#include "model/config.h"
#include "model/gdn_config.h"
#include "model/model.h"
#include "model/tokenizer_file.h"
#include "synth/synth_quant_mix.h"

namespace spool::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool tensors = false, all_metadata = false;
};

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  return buf;
}

std::string token_label(const gguf::File& f, const char* key) {
  const gguf::Value* id = f.find(key);
  if (!id || !id->is_integer()) return "none";
  std::string out = std::to_string(id->i);
  const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
  if (toks && id->i >= 0 && (size_t)id->i < toks->strings.size()) out += " '" + toks->strings[(size_t)id->i] + "'";
  return out;
}

void print_tokenizer(const gguf::File& f) {
  const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
  if (!toks) {
    std::printf("tokenizer:     none in this file\n");
    return;
  }
  std::printf("tokenizer:     model %s, pre %s, n_vocab %zu, bos %s, eos %s\n",
              f.get_string("tokenizer.ggml.model", "?").c_str(), f.get_string("tokenizer.ggml.pre", "(none)").c_str(),
              toks->array_size(), token_label(f, "tokenizer.ggml.bos_token_id").c_str(),
              token_label(f, "tokenizer.ggml.eos_token_id").c_str());
}

// K and V bytes one token adds to an F32 cache, from the metadata alone.
void print_kv_cost(const gguf::File& f) {
  const TensorEntry* embd = f.manifest.find("token_embd.weight");
  try {
    const int n_vocab = embd && embd->shape.size() == 2 ? (int)embd->shape[1] : 0;
    ModelConfig c = read_config(f, n_vocab, RopeStyle::Normal);
    if (is_gdn_arch(c.arch)) read_gdn_shape(f, c, true);  // hybrids: KV rows for the attention layers only
    const KvShape s = kv_shape_of(c);
    const uint64_t per_token = 4ull * s.n_layer * (s.k_row() + s.v_row());
    std::printf("KV cache:      %llu bytes/token (F32 %s: %d layers x %d KV heads x (%d + %d) x 4 B); %s at %d tokens\n",
                (unsigned long long)per_token, c.mla.enabled() ? "MLA latent + rope key" : "K+V", s.n_layer,
                s.n_head_kv, s.head_dim_k, s.head_dim_v,
                human_bytes(per_token * (uint64_t)c.n_ctx_train).c_str(), c.n_ctx_train);
    if (!s.recurrent.empty())
      std::printf("state:         %s per sequence, whatever the context (%d linear-attention layers: conv history + "
                  "delta-rule matrices, F32)\n",
                  human_bytes(s.recurrent.bytes_per_seq()).c_str(), c.n_layer - c.n_attn_layer());
  } catch (const Error& e) {
    std::printf("KV cache:      unknown (%s)\n", e.what());
  }
}

void print_tensor_summary(const gguf::File& f, bool list) {
  const Manifest& m = f.manifest;
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // dtype -> (count, bytes)
  for (const TensorEntry& t : m.tensors) {
    auto& e = by_type[dtype_name(t.type)];
    e.first++;
    e.second += t.bytes;
  }
  std::printf("tensors:       %zu, %s (%llu bytes)\n", m.tensors.size(), human_bytes(m.total_bytes()).c_str(),
              (unsigned long long)m.total_bytes());
  for (const auto& [type, e] : by_type)
    std::printf("  %-7s %5d tensors %12s (%llu bytes)\n", type.c_str(), e.first, human_bytes(e.second).c_str(),
                (unsigned long long)e.second);
  std::printf("mix by class:\n%s", describe_class_mix(class_mix(m), m.total_bytes()).c_str());
  if (!list) return;
  std::printf("\n%-40s %-7s %-22s %12s\n", "name", "type", "shape", "bytes");
  for (const TensorEntry& t : m.tensors)
    std::printf("%-40s %-7s %-22s %12llu\n", t.name.c_str(), dtype_name(t.type), t.shape_string().c_str(),
                (unsigned long long)t.bytes);
}

// A tokenizer.json (or a directory with only that): the tokenizer and its chat template.
void inspect_tokenizer_json(const std::string& path, bool all_metadata) {
  const gguf::File f = open_tokenizer_file(path);
  std::printf("file:          %s (Hugging Face tokenizer.json, no model)\n", path.c_str());
  print_tokenizer(f);
  const std::string tmpl = f.get_string("tokenizer.chat_template", "");
  std::printf("chat template: %s\n", tmpl.empty() ? "none" : (std::to_string(tmpl.size()) + " bytes").c_str());
  if (all_metadata) {
    std::printf("\nmetadata (%zu keys):\n", f.kv.size());
    for (const auto& [key, v] : f.kv)
      std::printf("  %-44s %-4s %s\n", key.c_str(), gguf::value_type_name(v.type), v.to_string().c_str());
  }
}

void inspect(const InspectOptions& o) {
  const std::string path = resolve_model_path(o.model);
  if (is_tokenizer_json_path(path)) return inspect_tokenizer_json(path, o.all_metadata);
  const gguf::File f = open_model_file(path);
  const std::string arch = f.architecture();
  const std::string format = f.version ? "GGUF v" + std::to_string(f.version) : std::string("Hugging Face safetensors");
  std::printf("file:          %s (%s, %zu file%s, %llu bytes, alignment %llu)\n", path.c_str(), format.c_str(),
              f.manifest.files.size(), f.manifest.files.size() == 1 ? "" : "s",
              (unsigned long long)[&] { uint64_t s = 0; for (uint64_t b : f.manifest.file_sizes) s += b; return s; }(),
              (unsigned long long)f.alignment);
  std::printf("architecture:  %s\n", arch.empty() ? "(missing)" : arch.c_str());
  std::printf("name:          %s\n", f.get_string("general.name", "(none)").c_str());
  if (const gguf::Value* ft = f.find("general.file_type"); ft && ft->is_integer())
    std::printf("file type:     %s (general.file_type %lld)\n", file_type_name((int)ft->i), (long long)ft->i);
  std::printf("hyper-parameters:\n");
  for (const auto& [key, v] : f.kv)
    if (!arch.empty() && key.rfind(arch + ".", 0) == 0) std::printf("  %-44s %s\n", key.c_str(), v.to_string().c_str());
  print_tokenizer(f);
  if (f.manifest.tensors.empty()) {
    // llama.cpp's vocab-only files: `spool tokenize` works on them, run does not.
    std::printf("tensors:       none (a vocab-only file: the tokenizer alone)\n");
  } else {
    print_kv_cost(f);
    print_tensor_summary(f, o.tensors);
  }
  if (o.all_metadata) {
    std::printf("\nmetadata (%zu keys):\n", f.kv.size());
    for (const auto& [key, v] : f.kv)
      std::printf("  %-44s %-4s %s\n", key.c_str(), gguf::value_type_name(v.type), v.to_string().c_str());
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model (GGUF or HF directory) or a tokenizer alone (vocab-only GGUF, tokenizer.json): metadata, tokenizer, tensors, the type mix per tensor class, KV cost");
  cmd->add_option("model,-m,--model", o->model, "Model: GGUF file or Hugging Face directory, or tokenizer.json");
  cmd->add_flag("--tensors", o->tensors, "List every tensor (name, type, shape, bytes)");
  cmd->add_flag("--metadata", o->all_metadata, "Print every metadata key");
  cmd->callback([o] { inspect(*o); });
}

}  // namespace spool::cli
