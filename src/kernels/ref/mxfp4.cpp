// Scalar reference kernels for MXFP4 (ggml type 39; BlockMXFP4 in
// quant_blocks.h): 32 e2m1 values sharing one power-of-two e8m0 scale. Written
// from the OCP microscaling spec and llama.cpp's block layout: the table holds
// the e2m1 values doubled (0, .5, 1, 1.5, 2, 3, 4, 6 -> integers) so a dot with
// Q8_0 stays in integers, and the scale 2^(e - 127) is halved to match.
#include "kernels/ref/mxfp4.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/fill.h"

namespace spool::detail {

const int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float mxfp4_half_scale(uint8_t e) { return std::ldexp(1.0f, (int)e - 128); }

namespace {

// Per block: the power of two that puts max|x| in the top binade of the
// doubled table (e = floor(log2 amax) - 2 + 127), then each value's nearest
// entry (the first of equals).
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    int e = amax > 0 ? (int)std::floor(std::log2(amax)) - 2 + 127 : 0;
    e = std::clamp(e, 0, 254);
    const float d = mxfp4_half_scale((uint8_t)e);
    y[i].e = (uint8_t)e;
    auto nearest = [&](float v) {
      int best = 0;
      float best_err = std::fabs(kMxfp4Values[0] * d - v);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(kMxfp4Values[k] * d - v);
        if (err < best_err) best = k, best_err = err;
      }
      return (uint8_t)best;
    };
    for (int j = 0; j < 16; ++j) y[i].qs[j] = (uint8_t)(nearest(x[j]) | (nearest(x[j + 16]) << 4));
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = mxfp4_half_scale(x[i].e);
    for (int j = 0; j < 16; ++j) {
      dst[i * kQK + j] = kMxfp4Values[x[i].qs[j] & 0xF] * d;
      dst[i * kQK + j + 16] = kMxfp4Values[x[i].qs[j] >> 4] * d;
    }
  }
}

float vec_dot_mxfp4(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockMXFP4*>(w);
  auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j)
      sumi += kMxfp4Values[x[i].qs[j] & 0xF] * y[i].qs[j] + kMxfp4Values[x[i].qs[j] >> 4] * y[i].qs[j + 16];
    sum += sumi * (mxfp4_half_scale(x[i].e) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

}  // namespace

void fill_ref_mxfp4_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::MXFP4];
  k.quantize = quantize_mxfp4;
  k.dequantize = dequantize_mxfp4;
  k.vec_dot = vec_dot_mxfp4;
}

}  // namespace spool::detail
