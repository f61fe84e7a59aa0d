// Sizes as people write them: 512, 64K, 1.5G, 8GiB (binary units), for
// memory budgets in the CLI and the C API (parse_memory_size), and synth's
// --target-size and plan's device sizes (parse_byte_size, which also takes
// spaces and a bare "B": "24 GB").
#pragma once

#include <cstdint>
#include <string>

namespace spool {

// Throws spool::Error naming the text on anything but a positive number with an optional K, M, G or T suffix.
uint64_t parse_memory_size(const std::string& s);

// "24G", "512M", "3.5GB", "1000000" -> bytes (K/M/G/T are powers of 1024).
uint64_t parse_byte_size(const std::string& text);

}  // namespace spool
