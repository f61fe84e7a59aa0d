// Scalar reference kernels for F8_E4M3 weights with block scales (see
// ScaledKernels in kernels.h): every value decoded by fp8_e4m3_to_fp32, each
// block's products summed, then scaled. The SIMD tables are tested against
// these (tests/fp8_kernels_test.cpp).
#include <algorithm>

#include "core/fp8.h"
#include "kernels/fill.h"

namespace spool::detail {
namespace {

float dot_f8_ref(int64_t n, const void* w, const float* scales, int64_t block, const float* a) {
  const auto* q = static_cast<const uint8_t*>(w);
  float sum = 0;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t end = std::min(n, b0 + block);
    float s = 0;
    for (int64_t i = b0; i < end; ++i) s += fp8_e4m3_to_fp32(q[i]) * a[i];
    sum += s * scales[b0 / block];
  }
  return sum;
}

void dequantize_scaled_f8_ref(int64_t n, const void* w, const float* scales, int64_t block, float* out) {
  const auto* q = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_fp32(q[i]) * scales[i / block];
}

// The codes' own values (scale 1): what a tool sees without the scale grid.
void dequantize_f8_ref(const void* w, float* out, int64_t n) {
  const auto* q = static_cast<const uint8_t*>(w);
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_fp32(q[i]);
}

}  // namespace

void fill_ref_fp8_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::F8_E4M3];
  k.dequantize = dequantize_f8_ref;
  k.scaled.dot = dot_f8_ref;
  k.scaled.dequantize = dequantize_scaled_f8_ref;
}

}  // namespace spool::detail
