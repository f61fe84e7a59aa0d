// safetensors reader: an 8-byte little-endian header length, a JSON header
// mapping tensor names to dtype, shape and data_offsets, then the raw data.
// Every entry is checked against the file size at open. Used for reference
// logits in tests now, and for Hugging Face checkpoints (see the HF issue).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace spool::safetensors {

struct Entry {
  std::string dtype;           // "F32", "F16", "BF16", "I64", "F8_E4M3", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;         // absolute byte offset in the file
  uint64_t bytes = 0;
  int64_t n_elements() const;
};

struct File {
  std::string path;
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"

  const Entry& require(const std::string& name) const;
  // Reads a tensor converted to float (F32, F16, BF16, F64) or int64 (I64, I32, I16, I8, U8, BOOL).
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<int64_t> read_i64(const std::string& name) const;
};

// Throws spool::Error naming the file and tensor on any inconsistency.
File open(const std::string& path);

// Bytes per element of a safetensors dtype, 0 if unknown.
size_t dtype_size(const std::string& dtype);

}  // namespace spool::safetensors
