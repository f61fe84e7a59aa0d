// Quantized Hugging Face checkpoints: config.json's quantization_config read
// into what the loader needs. Two stored forms are supported:
// - "fp8" with weight_block_size (DeepSeek-V3 / Kimi-K2): Linear weights are
//   F8_E4M3 with an F32 `weight_scale_inv` grid, one scale per block (kept as
//   they are; the matmul applies the scales, see MatView::block_scale);
// - "compressed-tensors" / "pack-quantized" symmetric int4 groups (Kimi-K2-
//   Thinking's routed experts): repacked at open into Q4_0 (compressed_tensors.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace spool::hf {

struct QuantConfig {
  enum class Method { None, Fp8Block, PackQuantized };
  Method method = Method::None;
  int64_t block_rows = 0, block_cols = 0;  // Fp8Block: weight_block_size [rows, cols]
  int num_bits = 0;                        // PackQuantized: 4
  int64_t group_size = 0;                  // PackQuantized: columns per scale
};

// Reads config.json's quantization_config (Method::None when absent). Throws
// spool::Error naming the field for a scheme spool cannot compute exactly.
QuantConfig read_quant_config(const nlohmann::json& config);

}  // namespace spool::hf
