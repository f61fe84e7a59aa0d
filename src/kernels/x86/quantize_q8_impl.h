// The x86 tables' Q8 quantizers (Q8_0, Q8_1, Q8_K rows, rounded as the
// reference rounds), written once and compiled by quantize_q8_avx2.cpp and
// quantize_q8_avx512.cpp into namespaces avx2 and avx512 (quantize_q8.h):
// the tables' entries for those types, and what each ISA's packed kernels
// convert their activations with, calling their own set by name.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/x86/quantize_q8.h"

#ifndef SPOOL_X86_ISA
#error "define SPOOL_X86_ISA (avx2 or avx512) before including quantize_q8_impl.h"
#endif

namespace spool::detail::SPOOL_X86_ISA {
namespace {

// Rounds 32 floats times id to int8 (round to nearest even, like the
// reference's nearbyint) and returns the four int32 vectors' sum too.
inline __m256i round_pack_32(const float* x, __m256 id, __m256i* sum32) {
  __m256i v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id));
  if (sum32) *sum32 = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
  const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  return _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float absmax_32(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
  for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = absmax_32(src + i * kQK) / 127.0f, id = d ? 1.0f / d : 0.0f;
    y[i].d = (uint16_t)_cvtss_sh(d, 0);
    _mm256_storeu_si256((__m256i*)y[i].qs, round_pack_32(src + i * kQK, _mm256_set1_ps(id), nullptr));
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = absmax_32(src + i * kQK) / 127.0f, id = d ? 1.0f / d : 0.0f;
    __m256i sum32;
    _mm256_storeu_si256((__m256i*)y[i].qs, round_pack_32(src + i * kQK, _mm256_set1_ps(id), &sum32));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s = _mm_hadd_epi32(s, s);
    s = _mm_hadd_epi32(s, s);
    y[i].d = (uint16_t)_cvtss_sh(d, 0);
    y[i].s = (uint16_t)_cvtss_sh(d * (float)_mm_cvtsi128_si32(s), 0);
  }
}

void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    __m256 vmax = _mm256_loadu_ps(x), vmin = vmax;
    for (int k = 8; k < kQKK; k += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + k));
      vmin = _mm256_min_ps(vmin, _mm256_loadu_ps(x + k));
    }
    float hi[8], lo[8];
    _mm256_storeu_ps(hi, vmax);
    _mm256_storeu_ps(lo, vmin);
    float top = hi[0], bottom = lo[0];
    for (int k = 1; k < 8; ++k) { top = std::max(top, hi[k]); bottom = std::min(bottom, lo[k]); }
    // The reference maps the element of largest magnitude to -127.
    const float max = top >= -bottom ? top : bottom;
    if (max == 0) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int k = 0; k < kQKK; k += 32) {
      _mm256_storeu_si256((__m256i*)(y[i].qs + k), round_pack_32(x + k, _mm256_set1_ps(iscale), nullptr));
    }
    // Group sums of 16: widen to int16 and add pairs of halves.
    for (int j = 0; j < 16; j += 2) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(y[i].qs + 16 * j));
      const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);  // 16 pair sums
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));  // 8 quad sums
      __m128i a = _mm256_castsi256_si128(s32), b = _mm256_extracti128_si256(s32, 1);
      a = _mm_hadd_epi32(a, b);  // [g0 half sums.., g1 half sums..]
      a = _mm_hadd_epi32(a, a);
      y[i].bsums[j] = (int16_t)_mm_extract_epi32(a, 0);
      y[i].bsums[j + 1] = (int16_t)_mm_extract_epi32(a, 1);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace spool::detail::SPOOL_X86_ISA
