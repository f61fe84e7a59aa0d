// Tensor element types. The numeric values are GGUF's ggml_type ids so a GGUF
// tensor header maps onto DType directly. Each type has a traits row: block
// size, bytes per block, and the activation type its dot product consumes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace spool {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30, MXFP4 = 39,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  IQ1_M = 29, TQ1_0 = 34, TQ2_0 = 35, Q1_0 = 41, Q2_0 = 42,
  // spool's own types (ids from kFirstSpoolType; never read from a GGUF file):
  // FP8 e4m3 codes, one byte each, whose real value needs a companion block
  // scale (MatView::block_scale), as DeepSeek-V3 / Kimi-K2 checkpoints store them.
  F8_E4M3 = 48,
};
inline constexpr uint32_t kFirstSpoolType = 48;
inline constexpr uint32_t kNumDTypeIds = 64;  // ids are < this

struct DTypeTraits {
  const char* name;      // "Q4_0", as llama.cpp names it
  int block_size;        // elements per block (1 for float types)
  size_t block_bytes;    // bytes per block
  bool quantized;
  DType vec_dot_type;    // what activations are converted to for vec_dot
};

// Traits of a supported GGUF (ggml) type id; nullptr for ids spool does not
// support and for spool's own types, which no GGUF file may use.
const DTypeTraits* find_dtype_traits(uint32_t ggml_type);
const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = dtype_traits(t);
  return (size_t)(n / tr.block_size) * tr.block_bytes;
}

}  // namespace spool
