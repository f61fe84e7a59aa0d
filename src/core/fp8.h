// FP8 e4m3 (the "fn" variant of the OCP FP8 spec, as DeepSeek-V3 / Kimi-K2
// store weights): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities, S.1111.111 is NaN, the largest finite value is 448. Scalar,
// written from the definition; the SIMD kernels decode through float16 instead
// (src/kernels/x86/fp8_*.cpp) and are tested against this.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace spool {

inline float fp8_e4m3_to_fp32(uint8_t b) {
  const int exp = (b >> 3) & 0xF, mant = b & 0x7;
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (exp == 0xF && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp((float)mant, -9);  // subnormal: mant/8 * 2^-6
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}

}  // namespace spool
