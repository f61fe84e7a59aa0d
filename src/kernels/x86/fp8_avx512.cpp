// F8_E4M3 block-scaled kernels, AVX-512 (F/BW/VL) + F16C. A code b becomes the
// float16 bit pattern ((b & 0x7F) << 7) | ((b & 0x80) << 8), whose value is
// the e4m3 value times 2^-8 for normals and subnormals alike; vcvtph2ps widens
// 16 of them at once and the 2^8 is folded into the block scale. The NaN codes
// (0x7F, 0xFF) get an all-ones float16 exponent so they stay NaN.
#include <immintrin.h>

#include <algorithm>

#include "kernels/fill.h"

namespace spool::detail {
namespace {

// 16 codes -> 16 floats (value * 2^-8).
inline __m512 decode16(__m128i bytes) {
  const __m256i b = _mm256_cvtepu8_epi16(bytes);
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7F));
  __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                              _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  const __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
  h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7C00)));
  return _mm512_cvtph_ps(h);
}

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

float dot_f8_avx512(int64_t n, const void* w, const float* scales, int64_t block, const float* a) {
  const auto* q = static_cast<const uint8_t*>(w);
  __m512 total = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t end = std::min(n, b0 + block);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = b0;
    for (; i + 32 <= end; i += 32) {
      const __m512 w0 = decode16(_mm_loadu_si128((const __m128i*)(q + i)));
      const __m512 w1 = decode16(_mm_loadu_si128((const __m128i*)(q + i + 16)));
      acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(a + i), acc0);
      acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(a + i + 16), acc1);
    }
    for (; i < end; i += 16) {
      const __mmask16 m = tail_mask(end - i);
      const __m512 w0 = decode16(_mm_maskz_loadu_epi8(m, q + i));
      acc0 = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, a + i), acc0);
    }
    const __m512 s = _mm512_set1_ps(scales[b0 / block] * 256.0f);
    total = _mm512_fmadd_ps(_mm512_add_ps(acc0, acc1), s, total);
  }
  return _mm512_reduce_add_ps(total);
}

void dequantize_scaled_f8_avx512(int64_t n, const void* w, const float* scales, int64_t block, float* out) {
  const auto* q = static_cast<const uint8_t*>(w);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t end = std::min(n, b0 + block);
    const __m512 s = _mm512_set1_ps(scales[b0 / block] * 256.0f);
    for (int64_t i = b0; i < end; i += 16) {
      const __mmask16 m = tail_mask(end - i);
      _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(decode16(_mm_maskz_loadu_epi8(m, q + i)), s));
    }
  }
}

}  // namespace

void fill_fp8_avx512_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::F8_E4M3];
  k.scaled.dot = dot_f8_avx512;
  k.scaled.dequantize = dequantize_scaled_f8_avx512;
}

}  // namespace spool::detail
