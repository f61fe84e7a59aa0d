// The streaming weight store: every weight under a hard memory budget. At
// start() it plans residency: tensors every token needs (norms, attention,
// routers, shared experts, dense FFNs, output, embeddings) are read once
// through Storage into budgeted memory, smallest first, as far as the budget
// allows after the minimum cache; routed experts stream one expert at a time
// (its gate, up and down slices in one Storage::read call) and any dense
// tensor that did not fit streams alone. The cache is one arena of fixed-size
// slots (an expert pool and a tensor pool) with a replaceable eviction policy
// (weights/cache_policy.h), per-layer quotas, and pins held by WeightRefs.
// I/O threads serve a prefetch queue: the batch's routed experts (prefetch),
// the next layer's streamed tensors (will_use_layer) and speculative expert
// guesses (guess_experts), in that priority. Nothing is ever memory-mapped,
// and reads bypass the page cache where the file system allows, so the
// budget is the whole truth under a cgroup memory cap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "storage/storage.h"
#include "weights/weight_store.h"

namespace spool {

struct StreamingOptions {
  std::string policy = "lru";  // lru, lfu, lru2 (weights/cache_policy.h)
  int min_expert_slots = 4;    // the fewest expert slots start() accepts
  int io_threads = 2;
  bool pack_resident = true;   // repack resident matmul weights for the packed kernels
  bool speculate = true;       // accept guess_experts() hints
  bool adapt_speculation = true;  // stop guessing while reads dominate (speculation_after_pass)
  bool verbose = false;        // per-tensor load timings on stderr
  // Only the routed experts are ever looked up (an expert rank of --dist ep):
  // no tensor is resident or streamed, the whole budget caches experts, and a
  // lookup of any other tensor is an error.
  bool experts_only = false;
  StorageOptions storage;
};

class StreamingStore : public WeightStore {
 public:
  // Sizes the cache and reads the resident set: `weight_budget` is what the
  // weights may use (the caller has taken KV and scratch off the budget).
  // Throws spool::Error saying how much is needed when it is too small.
  virtual void start(uint64_t weight_budget, ThreadPool* pool) = 0;
  // Overrides StreamingOptions::min_expert_slots before start() (the model's
  // experts per token + 1, known once its configuration is read).
  virtual void set_min_expert_slots(int n) = 0;
  // Bytes the weights need at least: the smallest resident set plus the minimum slots.
  virtual uint64_t minimum_budget() const = 0;

 protected:
  using WeightStore::WeightStore;
};

std::unique_ptr<StreamingStore> make_streaming_store(Manifest manifest, const StreamingOptions& options);

// Whether guessing stays on after a forward pass that spent `io_wait_share`
// of its time waiting for reads: off above 60 % (the disk is the bottleneck,
// a wrong guess costs its whole read), back on below 30 %, unchanged between.
bool speculation_after_pass(bool on, double io_wait_share);

}  // namespace spool
