// Model loading: open the file (GGUF, or a Hugging Face directory presented as
// GGUF metadata + manifest), build the manifest-backed weight store and
// tokenizer, then hand the parts to the architecture named in the metadata.
#include "model/model.h"

#include <unistd.h>
#if defined(SPOOL_SANITIZED)
#include <sanitizer/allocator_interface.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/hf_checkpoint.h"
#include "model/gdn_config.h"
#include "model/arch_registry.h"
#include "storage/storage.h"
#include "text/hf_tokenizer.h"
#include "weights/convert.h"
#include "weights/streaming_store.h"

namespace spool {

Model::Model(ModelParts parts) : parts_(std::move(parts)) {}
Model::~Model() = default;

KvShape kv_shape_of(const ModelConfig& c, DType kv_type) {
  if (kv_type != DType::F32 && kv_type != DType::F16)
    throw Error(std::string("KV cache type must be f32 or f16, not ") + dtype_name(kv_type));
  KvShape s;
  s.n_layer = c.n_attn_layer();  // hybrid models: attention layers only
  s.recurrent = c.recurrent;
  if (c.mla.enabled()) {  // one "head": the latent and the shared rope key; the latent is the value too
    s.n_head_kv = 1;
    s.head_dim_k = c.mla.kv_lora_rank + c.rope.n_dims;
    s.head_dim_v = 0;
    return s;
  }
  s.n_head_kv = c.n_head_kv;
  s.head_dim_k = c.head_dim_k;
  s.head_dim_v = c.head_dim_v;
  s.type = kv_type;
  return s;
}

KvShape Model::kv_shape() const { return kv_shape_of(config_, parts_.options.kv_type); }

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

// This process's resident memory now (VmRSS), 0 when unknown. In a sanitizer
// build (tests only) the bytes the program has allocated: VmRSS there is
// mostly the sanitizer's own (shadow memory, freed blocks in quarantine), which
// would make every budget check of the instrumented suite stricter than the
// real one.
static uint64_t process_rss() {
#if defined(SPOOL_SANITIZED)
  return __sanitizer_get_current_allocated_bytes();
#else
  std::ifstream st("/proc/self/status");
  std::string line;
  while (std::getline(st, line))
    if (line.starts_with("VmRSS:")) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
#endif
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
  if (options.kv_type != DType::F32 && options.kv_type != DType::F16)
    throw Error(std::string("KV cache type must be f32 or f16, not ") + dtype_name(options.kv_type));
  parts.tokenizer = load_tokenizer(parts.file);
  int n_threads = options.n_threads > 0 ? options.n_threads : (int)std::thread::hardware_concurrency();
  parts.pool = options.pool ? options.pool : std::make_shared<ThreadPool>(std::max(1, n_threads));
  // --convert: matmul weights become in-memory tensors of the new type (both stores keep those resident).
  if (options.convert) convert_matmul_weights(parts.file.manifest, *options.convert, parts.pool.get());
  // Auto: resident when the whole file (plus a rough KV/scratch allowance)
  // fits what this process may use; the budget is then what is available.
  const uint64_t file_bytes = parts.file.manifest.total_bytes();
  WeightMode mode = options.weight_budget > 0 ? WeightMode::Streaming : options.weight_mode;
  uint64_t budget = options.mem_budget;
  if (mode == WeightMode::Auto) {
    const uint64_t avail = memory_available();
    if (budget > 0) {
      mode = WeightMode::Streaming;
    } else if (avail == 0 || file_bytes + file_bytes / 8 + (256u << 20) <= avail) {
      mode = WeightMode::Resident;
    } else {
      mode = WeightMode::Streaming;
      budget = avail / 10 * 9;
    }
    std::fprintf(stderr, "spool: weights %s: model %.2f GiB, %s %.2f GiB\n",
                 mode == WeightMode::Resident ? "resident" : "streaming", file_bytes / 1073741824.0,
                 options.mem_budget ? "budget" : "memory available", (options.mem_budget ? budget : avail) / 1073741824.0);
  }
  if (mode == WeightMode::Streaming && budget == 0) budget = memory_available() / 10 * 9;
  const char* log = std::getenv("SPOOL_LOG");
  StreamingOptions so;
  so.policy = options.cache_policy;
  so.speculate = options.speculate;
  so.storage.http_retries = options.http_retries;
  so.adapt_speculation = options.adapt_speculation;
  so.pack_resident = options.pack_streaming;
  so.experts_only = options.experts_only;
  so.verbose = options.verbose || (log && std::string(log) == "debug");
  if (mode == WeightMode::Streaming)
    parts.weights = make_streaming_store(parts.file.manifest, so);
  else if (is_url(path))  // over HTTP(S) nothing is mapped: every tensor is read into memory at load
    parts.weights = make_loaded_store(parts.file.manifest, StorageOptions{.http_retries = options.http_retries});
  else
    parts.weights = make_resident_store(parts.file.manifest);
  parts.options = options;
  std::unique_ptr<Model> model = factory(std::move(parts));
  const int min_slots = model->config().n_expert_used > 0 ? model->config().n_expert_used + 1 : 0;
  if (options.weight_budget > 0) {
    static_cast<StreamingStore&>(model->weights()).set_min_expert_slots(min_slots);
    static_cast<StreamingStore&>(model->weights()).start(options.weight_budget, &model->pool());
  } else if (mode == WeightMode::Streaming) {
    const ModelConfig& c = model->config();
    const int n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
    auto& store = static_cast<StreamingStore&>(model->weights());
    store.set_min_expert_slots(min_slots);
    const uint64_t kv = kv_bytes_estimate(c, n_ctx, options.kv_type) * (uint64_t)std::max(1, options.n_seq);
    // The fixed allowance covers the process as measured on the Kimi-shaped file (~16 MiB resident before the
    // weights, ~13 MiB more that the cgroup charges for page cache and the kernel); a process already larger
    // (a big tokenizer, weights read while building the model) reserves what it holds now.
    const uint64_t held = process_rss() + (16ull << 20);
    const uint64_t held_extra = held > kScratchFixedBytes ? held - kScratchFixedBytes : 0;
    if (options.n_batch <= 0) {
      // The most tokens per pass whose scratch takes at most 1/16 of the budget
      // and still leaves the weights' minimum.
      // Gated DeltaNet hybrids: plus their linear-attention buffers (gdn_config.h).
      auto estimate = [&](int n) {
        return scratch_bytes_estimate(c, n_ctx, n, options.mla_form, options.n_logits) +
               gdn_scratch_bytes(model->file(), c, std::min(n, n_ctx));
      };
      const uint64_t base = estimate(1),
                     need = kv + base + held_extra + store.minimum_budget();
      const uint64_t room = std::min(budget / 16, budget > need ? budget - need : 0);
      int n = 1;
      while (n < std::min(n_ctx, 512) && estimate(n + 1) - base <= room) ++n;
      model->parts_.options.n_batch = n;
    }
    const uint64_t scratch = scratch_bytes_estimate(c, n_ctx, model->n_batch(), options.mla_form, options.n_logits) +
                             gdn_scratch_bytes(model->file(), c, std::min(model->n_batch(), n_ctx)) + held_extra;
    if (kv + scratch >= budget)
      throw Error("memory budget " + std::to_string(budget >> 20) + " MiB cannot hold the KV cache (" +
                  std::to_string(kv >> 20) + " MiB at " + std::to_string(n_ctx) + " positions) and scratch (" +
                  std::to_string(scratch >> 20) + " MiB) plus the weights' minimum " +
                  std::to_string(store.minimum_budget() >> 20) + " MiB: give at least " +
                  std::to_string((kv + scratch + store.minimum_budget()) / 1048576 + 1) +
                  " MiB, or a smaller -c / -b");
    std::fprintf(stderr, "spool: budget %.1f MiB = KV %.1f MiB (%d positions x %d sequences) + scratch %.1f MiB (%d tokens per pass) + weights %.1f MiB\n",
                 budget / 1048576.0, kv / 1048576.0, n_ctx, std::max(1, options.n_seq), scratch / 1048576.0, model->n_batch(),
                 (budget - kv - scratch) / 1048576.0);
    try {
      store.start(budget - kv - scratch, &model->pool());
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + "; with KV " + std::to_string(kv >> 20) + " MiB and scratch " +
                  std::to_string(scratch >> 20) + " MiB the budget must be at least " +
                  std::to_string((kv + scratch + store.minimum_budget()) / 1048576 + 1) + " MiB");
    }
  }
  if (model->parts_.options.n_batch <= 0) model->parts_.options.n_batch = 512;
  if (so.verbose && mode == WeightMode::Streaming) {
    std::ifstream st("/proc/self/status");
    std::string line;
    while (std::getline(st, line))
      if (line.starts_with("VmRSS:") || line.starts_with("VmHWM:") || line.starts_with("RssAnon:") || line.starts_with("RssFile:"))
        std::fprintf(stderr, "spool: debug: after load %s\n", line.c_str());
  }
  return model;
}

uint64_t kv_bytes_estimate(const ModelConfig& c, int n_ctx, DType kv_type) {
  const KvShape s = kv_shape_of(c, kv_type);
  // Hybrid models: plus one sequence's recurrent state (it does not grow with n_ctx).
  return (uint64_t)(s.k_row() + s.v_row()) * s.n_layer * (uint64_t)n_ctx * s.elem_bytes() + s.recurrent.bytes_per_seq();
}

// Activations of one forward pass of n = min(n_batch, n_ctx) tokens, buffer by
// buffer as the forward code grows them (one set per model, shared by its
// layers): the residual stream, its normed copy and the block output; a logits
// row per batch token (or the n_logits rows the caller keeps); attention (llama family: q, k, v, output; MLA: q, q-LoRA latent, cache
// row, rope part, output per token, the absorbed form's latent queries and
// outputs for kMlaTokenChunk tokens, the plain form's decompressed keys and
// values over the context); the dense FFN's gate/up (MLA models: for
// kFfnTokenChunk tokens); the MoE router and expert buffers; matmul activation
// conversions (at most 2 bytes an element, one buffer per block kind); Kimi
// Delta Attention's buffers and chunk scratch (Gated DeltaNet's come from
// gdn_scratch_bytes: ModelConfig does not carry their head shapes). Plus
// kScratchFixedBytes for the process itself (code, libraries, thread stacks,
// tokenizer: ~8 MiB measured) and per-thread attention scores.
uint64_t scratch_bytes_estimate(const ModelConfig& c, int n_ctx, int n_batch, MlaForm form, int n_logits) {
  const uint64_t n = (uint64_t)std::max(1, std::min(n_batch, n_ctx)), E = c.n_embd, H = c.n_head;
  uint64_t per_token = 3 * E;                 // floats: x, xn, out
  uint64_t fixed = (uint64_t)n_logits * c.n_vocab;  // floats that do not grow past a chunk: the logits kept
  if (n_logits <= 0) per_token += c.n_vocab;        // or a row per batch token
  uint64_t mm = 2 * std::max<uint64_t>(E, c.n_ff);  // bytes per token: the model's own matmul conversions
  if (c.mla.enabled()) {
    const uint64_t L = c.mla.kv_lora_rank, r = c.rope.n_dims, dk = c.mla.head_dim_k, dv = c.mla.head_dim_v,
                   nope = dk - r, P = (uint64_t)std::max(1, n_ctx);
    per_token += H * dk + c.mla.q_lora_rank + (L + r) + H * r + H * dv;
    const uint64_t chunk = std::min<uint64_t>(n, 32);  // kMlaTokenChunk
    fixed += chunk * (H * (L + r) + H * L + std::max(nope, L) + std::max(L, dv));
    if (form == MlaForm::Plain) fixed += P * L + H * P * (nope + dv);
    fixed += std::min<uint64_t>(n, 64) * 2 * c.n_ff;  // kFfnTokenChunk
    mm += 2 * std::max<uint64_t>({E, (uint64_t)c.mla.q_lora_rank, H * dv, L});
  } else {
    per_token += c.q_dim() + c.k_dim() + c.v_dim() + H * std::max(c.head_dim_v, 1) + 2 * c.n_ff;
    mm = 2 * std::max<uint64_t>({E, (uint64_t)c.n_ff, (uint64_t)c.q_dim()});
  }
  if (c.n_expert > 0) {
    const uint64_t k = c.n_expert_used, ff = (uint64_t)c.n_ff_exp * std::max(1, c.n_expert_shared);
    per_token += c.n_expert + 3 * k + 2 * E + 2 * ff;  // logits, ids/weights/group rows, xe/ye, gate/up
    mm += 2 * std::max<uint64_t>(E, ff);
  }
  if (c.kda.n_head > 0) {  // Kimi Delta Attention (KdaScratch): q k v f gate o, beta, the low-rank gates
    const uint64_t C = c.kda.d_inner(), D = c.kda.head_dim, L = 64;  // L: kKdaChunk
    per_token += 6 * C + c.kda.n_head + D;
    // Per thread (up to 64): the chunked delta rule's gamma, kd, w, u, a, b, col for one chunk.
    fixed += 64 * (L * D + 2 * L * D + 2 * L * D + L * D + 2 * L * L + L);
  }
  const uint64_t scores = 64ull * (uint64_t)std::max(1, n_ctx) * 2;  // per thread (up to 64 threads): scores, q
  return (n * per_token + fixed + scores) * sizeof(float) + n * mm + kScratchFixedBytes;
}

static uint64_t read_u64_file(const char* path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return 0;
  try {
    return std::stoull(v);
  } catch (...) {
    return 0;
  }
}

uint64_t memory_available() {
  uint64_t avail = 0;
  std::ifstream mi("/proc/meminfo");
  std::string key;
  uint64_t kb;
  std::string unit;
  while (mi >> key >> kb) {
    std::getline(mi, unit);
    if (key == "MemAvailable:") avail = kb * 1024;
  }
  // The process's cgroup: v2 (unified) memory.max, or v1 memory.limit_in_bytes.
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    uint64_t limit = 0;
    if (ctrl.empty()) limit = read_u64_file(("/sys/fs/cgroup" + path + "/memory.max").c_str());
    else if (ctrl.find("memory") != std::string::npos)
      limit = read_u64_file(("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes").c_str());
    if (limit > 0 && limit < (1ull << 60)) avail = avail ? std::min(avail, limit) : limit;
  }
  return avail;
}

}  // namespace spool
