// F8_E4M3 block-scaled kernels, AVX2 + FMA + F16C: the float16 decoding of
// x86/fp8_avx512.cpp (bits ((b & 0x7F) << 7) | ((b & 0x80) << 8) hold the
// e4m3 value times 2^-8; NaN codes kept NaN), 8 codes per vcvtph2ps; block
// tails shorter than 8 go through the scalar decoder.
#include <immintrin.h>

#include <algorithm>

#include "core/fp8.h"
#include "kernels/fill.h"

namespace spool::detail {
namespace {

// 8 codes (the low 8 bytes of `bytes`) -> 8 floats (value * 2^-8).
inline __m256 decode8(__m128i bytes) {
  const __m128i b = _mm_cvtepu8_epi16(bytes);
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  const __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F));
  h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7C00)));
  return _mm256_cvtph_ps(h);
}

inline __m128i load8(const uint8_t* p) { return _mm_loadl_epi64((const __m128i*)p); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float dot_f8_avx2(int64_t n, const void* w, const float* scales, int64_t block, const float* a) {
  const auto* q = static_cast<const uint8_t*>(w);
  __m256 total = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t end = std::min(n, b0 + block);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = b0;
    for (; i + 16 <= end; i += 16) {
      acc0 = _mm256_fmadd_ps(decode8(load8(q + i)), _mm256_loadu_ps(a + i), acc0);
      acc1 = _mm256_fmadd_ps(decode8(load8(q + i + 8)), _mm256_loadu_ps(a + i + 8), acc1);
    }
    for (; i + 8 <= end; i += 8) acc0 = _mm256_fmadd_ps(decode8(load8(q + i)), _mm256_loadu_ps(a + i), acc0);
    const float scale = scales[b0 / block];
    total = _mm256_fmadd_ps(_mm256_add_ps(acc0, acc1), _mm256_set1_ps(scale * 256.0f), total);
    float s = 0;
    for (; i < end; ++i) s += fp8_e4m3_to_fp32(q[i]) * a[i];
    tail += s * scale;
  }
  return hsum(total) + tail;
}

void dequantize_scaled_f8_avx2(int64_t n, const void* w, const float* scales, int64_t block, float* out) {
  const auto* q = static_cast<const uint8_t*>(w);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t end = std::min(n, b0 + block);
    const float scale = scales[b0 / block];
    const __m256 s = _mm256_set1_ps(scale * 256.0f);
    int64_t i = b0;
    for (; i + 8 <= end; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(decode8(load8(q + i)), s));
    for (; i < end; ++i) out[i] = fp8_e4m3_to_fp32(q[i]) * scale;
  }
}

}  // namespace

void fill_fp8_avx2_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::F8_E4M3];
  k.scaled.dot = dot_f8_avx2;
  k.scaled.dequantize = dequantize_scaled_f8_avx2;
}

}  // namespace spool::detail
