// Sizes as people write them: 512, 64K, 1.5G, 8GiB (binary units), for
// memory budgets in the CLI and the C API. (model/synth_deepseek2.h has its own
// parse_byte_size for synth's --target-size; it belongs here once src/model is
// reorganised.)
#pragma once

#include <cstdint>
#include <string>

namespace spool {

// Throws spool::Error naming the text on anything but a positive number with an optional K, M, G or T suffix.
uint64_t parse_memory_size(const std::string& s);

}  // namespace spool
