// The manifest: every tensor of a model mapped to where its bytes live
// (file, offset, length) with its type and shape. Built when a model is opened
// and validated against the file sizes; the weight store reads through it.
// A few small tensors may live in memory instead: ones a loader converts (a
// BF16 norm weight made F32) or computes (llama3 rope frequency factors).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace spool {

struct TensorEntry {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the contiguous dimension
  int file = 0;                // index into Manifest::files
  uint64_t offset = 0;         // absolute byte offset in that file
  uint64_t bytes = 0;
  const void* memory = nullptr;  // in-memory tensors only (file is -1); owned by the Manifest
  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_string() const;
};

struct Manifest {
  std::vector<std::string> files;
  std::vector<uint64_t> file_sizes;
  std::vector<TensorEntry> tensors;

  const TensorEntry* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors[it->second];
  }
  // Throws spool::Error naming the tensor if it is missing.
  const TensorEntry& require(const std::string& name) const;
  void add(TensorEntry entry);
  // Adds a tensor whose bytes are held by the manifest (shared by its copies).
  void add_in_memory(TensorEntry entry, std::vector<uint8_t> data);
  uint64_t total_bytes() const;

 private:
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> buffers_;
};

}  // namespace spool
