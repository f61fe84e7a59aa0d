// MXFP4 x Q8_0 dot and MXFP4 dequantize with 256-bit integer SIMD, shared by
// the AVX2 and AVX-512 tables (included once by each, compiled with its
// flags): the 16-entry value table is a pshufb lookup on the nibbles, the
// signed x signed byte products go through maddubs on |w| and sign-adjusted
// activations (AVX-512 VNNI: vpdpbusd), then one float FMA per block with the
// product of the two scales.
#pragma once

#include <immintrin.h>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/fill.h"
#include "kernels/ref/mxfp4.h"

namespace spool::detail {

namespace {

// The block's 32 values as bytes: lanes 0-15 the low nibbles (elements 0-15),
// 16-31 the high ones (elements 16-31), as Q8_0 orders its 32 activations.
inline __m256i mxfp4_values(const BlockMXFP4& b, __m128i table) {
  const __m128i q = _mm_loadu_si128((const __m128i*)b.qs);
  const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
  return _mm256_set_m128i(_mm_shuffle_epi8(table, hi), _mm_shuffle_epi8(table, lo));
}

inline __m256i dot_i8(__m256i w, __m256i a) {
  const __m256i aw = _mm256_sign_epi8(w, w), sa = _mm256_sign_epi8(a, w);  // |w| * (a * sign w)
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sa);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), _mm256_set1_epi16(1));
#endif
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float vec_dot_mxfp4_x86(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockMXFP4*>(w);
  auto* y = static_cast<const BlockQ8_0*>(a);
  const __m128i table = _mm_loadu_si128((const __m128i*)kMxfp4Values);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i ai = _mm256_loadu_si256((const __m256i*)y[i].qs);
    const __m256 s = _mm256_cvtepi32_ps(dot_i8(mxfp4_values(x[i], table), ai));
    acc = _mm256_fmadd_ps(s, _mm256_set1_ps(mxfp4_half_scale(x[i].e) * fp16_to_fp32(y[i].d)), acc);
  }
  return hsum256(acc);
}

void dequantize_mxfp4_x86(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockMXFP4*>(src);
  const __m128i table = _mm_loadu_si128((const __m128i*)kMxfp4Values);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i v = mxfp4_values(x[i], table);
    const __m256 d = _mm256_set1_ps(mxfp4_half_scale(x[i].e));
    for (int k = 0; k < 4; ++k) {
      const __m128i part = k < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
      const __m128i bytes = (k & 1) ? _mm_srli_si128(part, 8) : part;
      _mm256_storeu_ps(dst + i * kQK + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), d));
    }
  }
}

}  // namespace
}  // namespace spool::detail
