// The manifest: every tensor of a model mapped to where its bytes live
// (file, offset, length) with its type and shape. Built when a model is opened
// and validated against the file sizes; the weight store reads through it.
// A few small tensors may live in memory instead: ones a loader converts (a
// BF16 norm weight made F32) or computes (llama3 rope frequency factors).
// Mixture-of-experts weights are addressed one expert at a time: entry
// "blk.N.ffn_up_exps.weight#E" is expert E's own matrix, with its own file
// range, whether the file stacks the experts (GGUF) or stores them apart (HF).
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
  int expert = -1;               // expert slices only: which expert of its layer
  // Block-scaled types (F8_E4M3): the F32 entry holding the scale grid,
  // [ceil(n_cols / block_cols), ceil(n_rows / block_rows)] in GGUF order; the
  // weight store pins it together with this one (WeightStore::acquire).
  std::string companion;
  int64_t block_rows = 0, block_cols = 0;
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
  // Gives an existing tensor new bytes of another type (same shape), held by
  // the manifest; drops its companion (weights/convert.h).
  void replace_in_memory(const std::string& name, DType type, std::vector<uint8_t> data);
  uint64_t total_bytes() const;

 private:
  friend void split_expert_tensors(Manifest& m);
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> buffers_;
};

// Name of expert e's slice of the stacked tensor `stacked`: "<stacked>#<e>".
std::string expert_slice_name(const std::string& stacked, int expert);

// Replaces every stacked expert tensor ("*_exps.weight", GGUF shape
// [n_cols, n_rows, n_expert]) by n_expert 2-D slices [n_cols, n_rows] named by
// expert_slice_name. Expert e's bytes are contiguous in the stacked tensor:
// offset + e * (bytes / n_expert). Nothing can then reach all experts at once,
// so a streaming store reads just the experts a batch routes to. Experts that
// early Mixtral GGUFs store apart ("blk.N.ffn_gate.E.weight") get slice names.
void split_expert_tensors(Manifest& m);

}  // namespace spool
