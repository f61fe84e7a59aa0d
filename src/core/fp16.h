// Half-precision (IEEE binary16) and bfloat16 conversions, scalar. Used by the
// reference kernels and by loaders; SIMD kernels use F16C / NEON fp16 instead.
#pragma once

#include <cstdint>
#include <cstring>

namespace spool {

inline float fp32_from_bits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

inline float fp16_to_fp32(uint16_t h) {
  // Exact conversion handling normals, subnormals, inf and NaN.
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return fp32_from_bits(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
  return fp32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

inline uint16_t fp32_to_fp16(float f) {
  // Round to nearest even, as F16C's vcvtps2ph with rounding mode 0.
  uint32_t x = fp32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow -> inf
  if (x < 0x38800000u) {                                   // subnormal or zero
    if (x < 0x33000000u) return (uint16_t)sign;
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = x + 0xc8000fffu + ((x >> 13) & 1);  // rebias exponent, round
  return (uint16_t)(sign | (r >> 13));
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits((uint32_t)h << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = fp32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace spool
