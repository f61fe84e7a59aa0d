// Model loading: open the file (GGUF, or a Hugging Face directory presented as
// GGUF metadata + manifest), build the manifest-backed weight store and
// tokenizer, then hand the parts to the architecture named in the metadata.
#include "model/model.h"

#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/hf_checkpoint.h"
#include "model/arch_registry.h"
#include "model/hf_tokenizer.h"
#include "storage/storage.h"

namespace spool {

Model::Model(ModelParts parts) : parts_(std::move(parts)) {}
Model::~Model() = default;

KvShape kv_shape_of(const ModelConfig& c) {
  KvShape s;
  s.n_layer = c.n_layer;
  if (c.mla.enabled()) {  // one "head": the latent and the shared rope key; the latent is the value too
    s.n_head_kv = 1;
    s.head_dim_k = c.mla.kv_lora_rank + c.rope.n_dims;
    s.head_dim_v = 0;
    return s;
  }
  s.n_head_kv = c.n_head_kv;
  s.head_dim_k = c.head_dim_k;
  s.head_dim_v = c.head_dim_v;
  return s;
}

KvShape Model::kv_shape() const { return kv_shape_of(config_); }

static std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const TensorEntry* optional_tensor(const Manifest& m, const std::string& name, std::vector<int64_t> shape) {
  const TensorEntry* t = m.find(name);
  if (!t) return nullptr;
  // Trailing dimensions of 1 are insignificant.
  std::vector<int64_t> have = t->shape;
  while (have.size() > shape.size() && have.back() == 1) have.pop_back();
  if (have != shape)
    throw Error("tensor '" + name + "' has shape " + t->shape_string() + ", expected " + shape_str(shape));
  return t;
}

const TensorEntry& expect_tensor(const Manifest& m, const std::string& name, std::vector<int64_t> shape) {
  const TensorEntry* t = optional_tensor(m, name, std::move(shape));
  if (!t) throw Error("model is missing tensor '" + name + "'");
  return *t;
}

gguf::File open_model_file(const std::string& path) {
  // Models over HTTP(S): GGUF files only (split ones too); see storage/http_storage.h.
  if (is_url(path)) {
    const std::string file = path.substr(0, path.find_first_of("?#"));
    if (file.size() < 5 || file.compare(file.size() - 5, 5, ".gguf") != 0)
      throw Error("'" + path + "': only GGUF files can be opened over HTTP (a URL ending in .gguf); " +
                  "Hugging Face checkpoint directories must be local");
    gguf::File f = gguf::open(path);
    split_expert_tensors(f.manifest);
    return f;
  }
  if (!hf::is_checkpoint(path)) {
    gguf::File f = gguf::open(path);
    split_expert_tensors(f.manifest);  // experts are reached one at a time
    return f;
  }
  gguf::File f = hf::open_checkpoint(path);  // its experts are separate tensors already
  // The tokenizer is padded to the embedding's rows, as llama.cpp's converter does.
  const TensorEntry* embd = f.manifest.find("token_embd.weight");
  const int64_t n_vocab =
      embd && embd->shape.size() == 2 ? embd->shape[1] : f.get_int(f.architecture() + ".vocab_size", 0);
  add_hf_tokenizer_metadata(hf::checkpoint_dir(path), n_vocab, f);
  return f;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  ModelParts parts;
  parts.file = open_model_file(path);
  const std::string arch = parts.file.architecture();
  ModelFactory factory = find_arch(arch);
  if (!factory) {
    std::string list;
    for (const auto& a : supported_archs()) list += (list.empty() ? "" : ", ") + a;
    throw Error("'" + path + "': unsupported architecture '" + arch + "' (supported: " + list + ")");
  }
  parts.tokenizer = load_tokenizer(parts.file);
  if (is_url(path))  // models over HTTP(S): nothing to map, every tensor is read into memory at load
    parts.weights = make_loaded_store(parts.file.manifest, StorageOptions{});
  else
    parts.weights = make_resident_store(parts.file.manifest);
  int n_threads = options.n_threads > 0 ? options.n_threads : (int)std::thread::hardware_concurrency();
  parts.pool = std::make_shared<ThreadPool>(std::max(1, n_threads));
  parts.options = options;
  return factory(std::move(parts));
}

}  // namespace spool
