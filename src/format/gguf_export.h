// Writing an opened model (a Hugging Face checkpoint's metadata and manifest,
// already under GGUF names) out as a GGUF file in llama.cpp's layout: expert
// slices stacked back into [n_embd, n_ff, n_expert] tensors, spool's own
// metadata keys dropped. Everything is read into memory first: meant for small
// checkpoints (test fixtures, tiny models), not for converting big ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace spool {

struct ExportTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order
  std::vector<uint8_t> data;
  std::vector<float> f32() const;  // F32 tensors only
  void set_f32(const std::vector<float>& v);
};

// Every tensor of `file` in memory, expert slices restacked ("...#E" -> one tensor).
std::vector<ExportTensor> export_tensors(const gguf::File& file);

// Writes metadata (spool.* keys excluded) and tensors, in the order given.
void write_gguf(const gguf::File& meta, const std::vector<ExportTensor>& tensors, const std::string& path);

}  // namespace spool
