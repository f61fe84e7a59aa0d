// A weight store that counts acquires per tensor over a resident store: which
// tensors (e.g. which experts) a forward pass touched, and how often. Used by
// `spool synth --verify` (expert spread) and the MoE batching tests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/weight_store.h"

namespace spool {

class CountingStore final : public WeightStore {
 public:
  explicit CountingStore(const Manifest& m) : WeightStore(m), inner_(make_resident_store(m)) {}
  const char* mode() const override { return "counting"; }
  void prepare_matmul_weights(const std::vector<const TensorEntry*>& tensors, ThreadPool* pool) override {
    std::vector<const TensorEntry*> mine;
    for (const TensorEntry* t : tensors) mine.push_back(&inner(*t));
    inner_->prepare_matmul_weights(mine, pool);
  }
  std::map<std::string, int> acquires;  // tensor name -> acquires

 protected:
  const void* pin(const TensorEntry& t) override {
    ++acquires[t.name];
    return inner_->acquire(inner(t)).data();  // resident: stays valid after the ref goes
  }
  const void* packed(const TensorEntry& t) override { return inner_->acquire(inner(t)).mat().packed; }

 private:
  const TensorEntry& inner(const TensorEntry& t) const {
    return inner_->manifest().tensors[&t - manifest_.tensors.data()];
  }
  std::unique_ptr<WeightStore> inner_;
};

}  // namespace spool
