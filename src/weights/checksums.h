// Per-tensor checksums for streamed weights. A model file from the internet
// carries none, and a flipped bit on a flaky SSD or a proxy that mangles a
// Range reply would otherwise become silently wrong logits. `spool checksum
// MODEL` reads every tensor once and writes a sidecar, MODEL.sums (JSON: the
// CRC-32 of each tensor as the weight store sees it, experts one slice each);
// when a sidecar sits next to a model's first file, the streaming store checks
// every tensor it reads against it and fails the read, naming the tensor,
// on a mismatch. Resident (mapped) weights are not checked: they are read by
// the kernel's page cache, not by the store.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "format/manifest.h"

namespace spool {

struct TensorChecksums {
  std::string path;                                // the sidecar it came from
  std::unordered_map<std::string, uint32_t> crc;   // by TensorEntry::name
};

// CRC-32 (zlib's, polynomial 0xEDB88320) of n bytes, continuing from crc (0 to start).
uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

// MODEL.sums for the model whose first file is `model_file`.
std::string checksums_path(const std::string& model_file);

// Reads every file-backed tensor of m and writes the sidecar to out_path.
// Returns the bytes checksummed.
uint64_t write_checksums(const Manifest& m, const std::string& out_path);

// The sidecar for m's first file if one exists (nullptr-like empty path
// otherwise). Throws spool::Error when it exists but is malformed or was made
// for another file (size differs, or a tensor of m is missing from it).
TensorChecksums load_checksums_for(const Manifest& m);

}  // namespace spool
