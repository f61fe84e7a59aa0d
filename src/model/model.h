// A loaded model: configuration, tokenizer, weights (through the weight
// store) and an architecture-specific forward(). load_model() opens the file,
// validates it and picks the architecture from its metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "text/tokenizer.h"
#include "weights/weight_store.h"

namespace spool {

class ThreadPool;
class ExpertParallel;

// Which form of multi-head latent attention an MLA model computes (model/mla.h).
enum class MlaForm { Auto, Plain, Absorbed };

// How weights are held: mapped (resident), streamed under a budget, or
// resident when the model fits the memory available and streamed otherwise.
enum class WeightMode { Auto, Resident, Streaming };

struct LoadOptions {
  int n_threads = 0;  // 0: all cores
  MlaForm mla_form = MlaForm::Auto;
  // Memory budget (weights/streaming_store.h): weight cache + KV + scratch.
  // 0 with Auto: the memory available (MemAvailable, cgroup limit).
  WeightMode weight_mode = WeightMode::Auto;
  uint64_t mem_budget = 0;
  int n_ctx = 0;          // KV positions the budget reserves (0: the model's, at most 4096)
  int n_batch = 512;      // tokens per forward pass, for the scratch estimate (0: chosen, see Model::n_batch)
  int n_seq = 1;          // sequences whose full-context KV the budget reserves (serve: --parallel)
  int n_logits = 0;       // logits rows the caller keeps, for the scratch estimate (0: one per batch token)
  std::string cache_policy = "lru";
  bool speculate = true;  // streaming: guess the next layer's experts
  int http_retries = 4;   // models over HTTP(S): attempts after the first for a failed range request
  bool adapt_speculation = true;  // streaming: stop guessing while reads dominate a pass
  bool pack_streaming = true;  // streaming: repack resident matmul weights (off: exactly the unpacked kernels)
  bool verbose = false;   // per-tensor load timings on stderr (also SPOOL_LOG=debug)
  uint64_t weight_budget = 0;  // >0: streaming with exactly this much for the weights (tests, experiments)
  // Streaming: the store holds and reads only the routed experts (an expert
  // rank of --dist ep, which never runs the rest of the model).
  bool experts_only = false;
  // Matmul weights converted at load into this type, in memory (weights/convert.h).
  std::optional<DType> convert = std::nullopt;
  // KV cache element type: F32, or F16 (half the memory and attention reads;
  // MLA's latent cache stays F32).
  DType kv_type = DType::F32;
  // The threads to compute with; null: a pool of n_threads of its own. A
  // draft model shares its target's, so the two never spin against each other.
  std::shared_ptr<ThreadPool> pool = nullptr;
};

// Bytes of KV cache and activation scratch a model reserves at n_ctx
// positions and n_batch tokens per pass (what a memory budget must leave out).
uint64_t kv_bytes_estimate(const ModelConfig& c, int n_ctx, DType kv_type = DType::F32);
uint64_t scratch_bytes_estimate(const ModelConfig& c, int n_ctx, int n_batch, MlaForm form = MlaForm::Auto,
                                int n_logits = 0);
// The part of scratch_bytes_estimate that does not grow with the batch (process, libraries, stacks).
constexpr uint64_t kScratchFixedBytes = 40ull << 20;
// Memory this process may use: MemAvailable, capped by its cgroup's limit.
uint64_t memory_available();

// What every architecture is built from.
struct ModelParts {
  gguf::File file;
  std::unique_ptr<WeightStore> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<ThreadPool> pool;
  LoadOptions options;
};

class Model {
 public:
  explicit Model(ModelParts parts);
  virtual ~Model();

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *parts_.tokenizer; }
  const gguf::File& file() const { return parts_.file; }
  WeightStore& weights() { return *parts_.weights; }
  ThreadPool& pool() { return *parts_.pool; }
  std::shared_ptr<ThreadPool> shared_pool() const { return parts_.pool; }
  KvShape kv_shape() const;
  // Tokens per prefill pass the memory budget was planned for: LoadOptions::n_batch, or when that is 0,
  // 512 resident and, streaming, the most (up to 512 and n_ctx) whose scratch takes 1/16 of the budget.
  int n_batch() const { return parts_.options.n_batch; }

  // Runs one batch. Writes one row of n_vocab logits per batch row with
  // want_logits set, in batch order, into logits ([n_outputs, n_vocab]).
  virtual void forward(const Batch& batch, KvCache& kv, float* logits) = 0;

  // Expert parallelism (model/expert_parallel.h; src/dist/): routed experts
  // that `ep` does not call local run in other processes. Not owned; null: all here.
  void set_expert_parallel(ExpertParallel* ep) { expert_parallel_ = ep; }
  ExpertParallel* expert_parallel() const { return expert_parallel_; }

 protected:
  friend std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);
  ModelParts parts_;
  ModelConfig config_;
  ExpertParallel* expert_parallel_ = nullptr;
};

// The KV cache rows a model of this configuration stores per token and layer.
// The cache shape of c's attention with `kv_type` elements (MLA: always F32).
KvShape kv_shape_of(const ModelConfig& c, DType kv_type = DType::F32);

// `path` is a GGUF file (or the first of a split GGUF), or a Hugging Face
// checkpoint directory (or its config.json).
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);
// The metadata and manifest of either form, tokenizer keys included, without loading.
gguf::File open_model_file(const std::string& path);

// Checks a tensor's shape; throws spool::Error naming the tensor on mismatch.
const TensorEntry& expect_tensor(const Manifest& m, const std::string& name, std::vector<int64_t> shape);
const TensorEntry* optional_tensor(const Manifest& m, const std::string& name, std::vector<int64_t> shape);

}  // namespace spool
