// compressed-tensors "pack-quantized" int4 weights (as Kimi-K2-Thinking stores
// its routed experts), read from the format's definition (neuralmagic's
// compressed-tensors, PackedQuantizationCompressor / pack_to_int32):
//   X.weight_packed  int32 [rows, ceil(cols / 8)]: element c of a row is the
//                    nibble (c % 8) of word c / 8, lowest nibble first, stored
//                    unsigned as q + 8 for the signed value q in [-8, 7];
//   X.weight_scale   bf16/f16/f32 [rows, cols / group_size]: w = q * scale;
//   X.weight_shape   int32/int64 [2]: (rows, cols).
// Symmetric groups of a multiple of 32 columns become Q4_0 blocks exactly
// (nibble = q + 8, d = the group's scale as float16), 18 bytes per 32 weights:
// the same as the file's 16 + 2 for group_size 32 (more for larger groups:
// 18 vs 16.5 bytes per 32 at group_size 128).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spool::compressed_tensors {

enum class ScaleType { BF16, F16, F32 };

// Repacks rows x cols packed int4 values with their group scales into
// rows * cols / 32 Q4_0 blocks. cols must be a multiple of 32 and of
// group_size, group_size of 32. Throws spool::Error naming `what` when a scale
// is not exactly representable as float16 (Q4_0's scale type) or not finite.
std::vector<uint8_t> repack_to_q4_0(const uint8_t* packed, const uint8_t* scales, ScaleType scale_type, int64_t rows,
                                    int64_t cols, int64_t group_size, const std::string& what);

}  // namespace spool::compressed_tensors
