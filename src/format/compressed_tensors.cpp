// pack-quantized int4 -> Q4_0 (see compressed_tensors.h): nibbles re-ordered
// from the file's 8-per-word sequence to Q4_0's (j, j + 16) pairs, the offset
// of 8 kept as is, each group's scale converted to float16 only when exact.
#include "format/compressed_tensors.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace spool::compressed_tensors {
namespace {

float read_scale(const uint8_t* scales, ScaleType t, int64_t i) {
  if (t == ScaleType::F32) {
    float f;
    std::memcpy(&f, scales + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, scales + 2 * i, 2);
  return t == ScaleType::BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
}

}  // namespace

std::vector<uint8_t> repack_to_q4_0(const uint8_t* packed, const uint8_t* scales, ScaleType scale_type, int64_t rows,
                                    int64_t cols, int64_t group_size, const std::string& what) {
  SPOOL_CHECK(cols % kQK == 0 && group_size % kQK == 0 && cols % group_size == 0);
  const int64_t words_per_row = (cols + 7) / 8, groups_per_row = cols / group_size, blocks_per_row = cols / kQK;
  std::vector<uint8_t> out((size_t)(rows * blocks_per_row) * sizeof(BlockQ4_0));
  auto* blocks = reinterpret_cast<BlockQ4_0*>(out.data());
  uint8_t q[kQK];
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = packed + (size_t)r * words_per_row * 4;
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      const int64_t g = r * groups_per_row + b * kQK / group_size;
      const float s = read_scale(scales, scale_type, g);
      const uint16_t d = fp32_to_fp16(s);
      if (!std::isfinite(s) || fp16_to_fp32(d) != s)
        throw Error(what + ": scale " + std::to_string(s) + " of row " + std::to_string(r) + " group " +
                    std::to_string(g % groups_per_row) +
                    " is not exactly representable as float16, the scale type of Q4_0 (outside its range or below its precision)");
      for (int j = 0; j < kQK; ++j) {
        const int64_t c = b * kQK + j;  // word c / 8, nibble c % 8 (little-endian int32)
        q[j] = (row[(c / 8) * 4 + (c % 8) / 2] >> (4 * (c % 2))) & 0xF;
      }
      BlockQ4_0& blk = blocks[r * blocks_per_row + b];
      blk.d = d;
      for (int j = 0; j < kQK / 2; ++j) blk.qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
  }
  return out;
}

}  // namespace spool::compressed_tensors
