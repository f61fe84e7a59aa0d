// Random tensor contents for synthetic models (see synth_fill.h).
#include "synth/synth_fill.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"

namespace spool::synth {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Irwin-Hall with four terms: far cheaper than Box-Muller and
// indistinguishable for a benchmark model.
void fill_normal(float* x, int64_t n, uint64_t stream, float mean, float stddev) {
  constexpr float kSumMean = 4 * 32767.5f;
  constexpr float kSumStd = 37837.2f;  // 2 * sqrt((65536^2 - 1) / 12)
  const float scale = stddev / kSumStd;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t z = mix64(stream + (uint64_t)i * 0x9E3779B97F4A7C15ull);
    const uint32_t sum = (uint32_t)(z & 0xffff) + (uint32_t)((z >> 16) & 0xffff) + (uint32_t)((z >> 32) & 0xffff) +
                         (uint32_t)(z >> 48);
    x[i] = mean + ((float)sum - kSumMean) * scale;
  }
}

// ---- pools of quantized blocks ---------------------------------------------------

namespace {
constexpr int64_t kPoolValues = 1 << 21;  // thousands of distinct blocks per type

// The codebook types' quantizers search their grids (src/kernels/ref/iq_quant.cpp,
// ~10-30 us per 256 weights): a pool of 1024 super-blocks is plenty of variety.
int64_t pool_values(DType type) {
  switch (type) {
    case DType::IQ1_S: case DType::IQ1_M: case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S:
    case DType::IQ3_XXS: case DType::IQ3_S: return 1 << 18;
    default: return kPoolValues;
  }
}
}

BlockPool::BlockPool(DType type, uint64_t seed, float stddev) {
  const DTypeTraits& tr = dtype_traits(type);
  block_bytes_ = tr.block_bytes;
  const int64_t n_values = pool_values(type);
  n_blocks_ = n_values / tr.block_size;
  bytes_.resize((size_t)n_blocks_ * block_bytes_);
  std::vector<float> x((size_t)n_values);
  fill_normal(x.data(), n_values, mix64(seed ^ ((uint64_t)type + 1) * 0xA24BAED4963EE407ull), 0.0f, stddev);
  quantize_row(type, x.data(), bytes_.data(), n_values);
}

void BlockPool::fill_row(uint8_t* dst, int64_t n_blocks, uint64_t stream) const {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint64_t pick = mix64(stream + (uint64_t)b * 0x9E3779B97F4A7C15ull) % (uint64_t)n_blocks_;
    std::memcpy(dst + (size_t)b * block_bytes_, bytes_.data() + pick * block_bytes_, block_bytes_);
  }
}

// ---- Q4_K from random bytes -------------------------------------------------------

double RandomQ4K::variance_per_d2() {
  const double e_sc2 = 63.0 * 127.0 / 6.0;   // E[sc^2], sc uniform on 0..63
  const double e_q2 = 15.0 * 31.0 / 6.0;     // E[q^2], q uniform on 0..15
  const double var_scq = e_sc2 * e_q2 - (31.5 * 7.5) * (31.5 * 7.5);
  const double var_m = (64.0 * 64.0 - 1.0) / 12.0;
  return var_scq + 7.5 * 7.5 * var_m;
}

RandomQ4K::RandomQ4K(float stddev) {
  const double d = stddev / std::sqrt(variance_per_d2());
  d_ = fp32_to_fp16((float)d);
  // dmin = 7.5 d exactly in f16 terms, so the mean stays zero after rounding.
  dmin_ = fp32_to_fp16(7.5f * fp16_to_fp32(d_));
}

void RandomQ4K::fill_row(uint8_t* dst, int64_t n_blocks, uint64_t stream) const {
  static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ4_K) % 8 == 0);
  uint64_t counter = stream;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint64_t words[sizeof(BlockQ4_K) / 8];
    for (uint64_t& w : words) w = mix64(counter += 0x9E3779B97F4A7C15ull);
    BlockQ4_K blk;
    std::memcpy(&blk, words, sizeof blk);
    blk.d = d_;
    blk.dmin = dmin_;
    std::memcpy(dst + (size_t)b * sizeof blk, &blk, sizeof blk);
  }
}

}  // namespace spool::synth
