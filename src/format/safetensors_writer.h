// Writes F32 tensors as a .safetensors file (8-byte header length, JSON
// header with dtype/shape/data_offsets, then raw little-endian data).
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

// Throws spool::Error if the file cannot be written.
void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors);

}  // namespace spool
