// The weight store: the only way compute code reaches weights. A caller
// acquires a tensor (a WeightRef, pinned while it lives) and gets a view of its
// bytes. The resident store maps every file once; the streaming store (later)
// will keep a budgeted cache of expert/layer slices behind the same interface,
// which is why every access goes through acquire() even when it is free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/manifest.h"
#include "kernels/matmul.h"
#include "weights/store_stats.h"

namespace spool {

class ThreadPool;
class WeightStore;

// Thrown by a streaming store's expert lookup that waited longer than the
// read-stall limit (WeightStore::set_read_stall_ms) for a read in flight. The
// read goes on; `unit` names it for read_pending(). The MoE layer fills
// `tokens` with the batch rows routed to that expert, so the engine can set
// their requests aside until the read lands and go on with the others.
class ReadStalled : public Error {
 public:
  ReadStalled(const std::string& what, int unit) : Error(what), unit(unit) {}
  int unit;
  std::vector<int> tokens;
};

// A pinned tensor. Move-only; releases its pin when destroyed.
class WeightRef {
 public:
  WeightRef() = default;
  WeightRef(WeightStore* store, const TensorEntry* entry, const void* data, const void* packed = nullptr)
      : store_(store), entry_(entry), data_(data), packed_(packed) {}
  WeightRef(WeightRef&& o) noexcept { *this = std::move(o); }
  WeightRef& operator=(WeightRef&& o) noexcept;
  ~WeightRef();

  const void* data() const { return data_; }
  const TensorEntry& entry() const { return *entry_; }
  // The tensor as a matrix: shape[0] columns, the product of the rest rows;
  // with the store's packed copy attached when it keeps one.
  MatView mat() const;
  const float* f32() const;  // only for F32 tensors (norm weights, biases)

 private:
  friend class WeightStore;
  WeightStore* store_ = nullptr;
  const TensorEntry* entry_ = nullptr;
  const void* data_ = nullptr;
  const void* packed_ = nullptr;
  const TensorEntry* companion_ = nullptr;  // the block-scale grid of entry_, pinned with it
  const void* companion_data_ = nullptr;
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  const Manifest& manifest() const { return manifest_; }
  // Pins t, and its companion entry (block scales) when it names one.
  WeightRef acquire(const TensorEntry& t);
  WeightRef acquire(const std::string& name) { return acquire(manifest_.require(name)); }
  // Hint that these tensors are needed soon (prefetch); resident store ignores it.
  virtual void prefetch(const std::vector<const TensorEntry*>& tensors) {}
  virtual const char* mode() const = 0;
  // Declares the tensors that serve as matmul weights. A store may keep them
  // in the kernels' packed layout (see PackedKernels), made here, once.
  virtual void prepare_matmul_weights(const std::vector<const TensorEntry*>& tensors, ThreadPool* pool) {}
  // Streaming hooks (the resident store ignores them). will_use_layer: layer
  // `layer`'s weights come next (n_layer: the output tensors), read them
  // ahead. wants_expert_guess/guess_experts: the model may apply the next
  // layer's router early and name the experts it expects (speculative
  // prefetch); the store counts how often the guess was right.
  virtual void will_use_layer(int layer) {}
  // A process that computes only some routed experts (an expert-parallel
  // rank, src/dist) works on layer `layer` next: its read-aheads for that
  // layer are kept until used; nothing else is read for the layer.
  virtual void will_use_experts_of(int layer) {}
  virtual bool wants_expert_guess() const { return false; }
  virtual void guess_experts(const std::vector<const TensorEntry*>& tensors) {}
  // Read-stall limit of expert lookups, in ms (0, the default: wait as long as
  // the read takes). Past it a lookup throws ReadStalled. Set by the engine
  // before a forward pass; the resident store never waits for reads.
  virtual void set_read_stall_ms(int ms) {}
  // Whether the read of a unit named by ReadStalled is still in flight.
  virtual bool read_pending(int unit) const { return false; }
  // Counters of a streaming store (a copy, taken under its lock); false for the resident store.
  virtual bool streaming() const { return false; }
  virtual StoreStats stats_snapshot() const { return {}; }

 protected:
  explicit WeightStore(Manifest manifest) : manifest_(std::move(manifest)) {}
  virtual const void* pin(const TensorEntry& t) = 0;
  virtual void unpin(const TensorEntry& t) {}
  virtual const void* packed(const TensorEntry& t) { return nullptr; }
  friend class WeightRef;

  Manifest manifest_;
};

// Everything mapped from the model files (page cache backed, like llama.cpp's
// mmap); matmul weights get a packed copy in memory when the kernels have a
// packed layout for their type, and their mapped pages are released.
std::unique_ptr<WeightStore> make_resident_store(Manifest manifest);

// Every tensor read through Storage into memory at load (no mmap): models
// whose files are URLs, or local files when mapping is not wanted (loaded_store.cpp).
struct StorageOptions;
std::unique_ptr<WeightStore> make_loaded_store(Manifest manifest, const StorageOptions& options);

}  // namespace spool
