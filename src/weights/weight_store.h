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

#include "core/matmul.h"
#include "format/manifest.h"
#include "weights/store_stats.h"

namespace spool {

class ThreadPool;
class WeightStore;

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
  virtual bool wants_expert_guess() const { return false; }
  virtual void guess_experts(const std::vector<const TensorEntry*>& tensors) {}
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

}  // namespace spool
