// Writes tensors as a .safetensors file (8-byte header length, JSON header
// with dtype/shape/data_offsets, then raw little-endian data): F32 logits for
// `spool logits`, and any dtype for tests that build checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spool {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// A tensor already in its stored form: safetensors dtype name ("BF16", ...)
// and n_elements x dtype size bytes.
struct SafetensorsRaw {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Throw spool::Error if the file cannot be written (or a dtype is unknown).
void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors);
void write_safetensors(const std::string& path, const std::vector<SafetensorsRaw>& tensors);

}  // namespace spool
