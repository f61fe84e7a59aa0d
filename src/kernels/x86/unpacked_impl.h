// x86 SIMD kernels on 256-bit vectors, written once and compiled twice: by
// x86/table_avx2.cpp (AVX2+FMA+F16C; u8 x s8 dots via maddubs/madd) and by
// x86/table_avx512.cpp (AVX-512VL + VNNI; dots via vpdpbusd, 32 vector
// registers so larger gemm tiles). Everything here has internal linkage, so
// the two compilations never clash. Include only from those two files.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/fill.h"

#ifndef SPOOL_VNNI
#error "define SPOOL_VNNI (0 or 1) before including x86/unpacked_impl.h"
#endif

namespace spool::detail {
namespace {

// ---- small helpers -----------------------------------------------------------

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

// acc + per-4-byte-group sums of u8 x s8 products.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if SPOOL_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// u8 x s8 dot of 32 bytes scaled per 16-element half: lanes of the first
// half are multiplied by sc0, of the second by sc1 (K-quant sub-blocks).
inline __m256i dot_scaled(__m256i acc, __m256i u, __m256i s, int sc0, int sc1) {
#if SPOOL_VNNI
  const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  const __m256i scale = _mm256_setr_epi32(sc0, sc0, sc0, sc0, sc1, sc1, sc1, sc1);
  return _mm256_add_epi32(acc, _mm256_mullo_epi32(p, scale));
#else
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  const __m256i scale = _mm256_setr_m128i(_mm_set1_epi16((short)sc0), _mm_set1_epi16((short)sc1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, scale));
#endif
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles, then high nibbles.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i x = _mm_loadu_si128((const __m128i*)qs);
  const __m256i y = _mm256_setr_m128i(x, _mm_srli_epi16(x, 4));
  return _mm256_and_si256(y, _mm256_set1_epi8(0x0F));
}

// Bit j of the 32-bit qh -> 0x10 in byte j (fifth bit of Q5 levels).
inline __m256i fifth_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32((int)qh),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Sum of (u - offset) * s for u8 levels u with a constant offset, via
// sum(u s) - offset * sum(s).
inline __m256i dot_offset(__m256i u, __m256i s, int offset) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i p = dot_u8s8(zero, u, s);
  const __m256i b = dot_u8s8(zero, _mm256_set1_epi8((char)offset), s);
  return _mm256_sub_epi32(p, b);
}

// Signed x signed 32-byte dot: |w| times a with w's sign.
inline __m256i dot_s8s8(__m256i w, __m256i a) {
  return dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

// ---- float types ---------------------------------------------------------------

float vec_dot_f32(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const float*>(wv);
  auto* a = static_cast<const float*>(av);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * k), _mm256_loadu_ps(a + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += w[i] * a[i];
  return sum;
}

inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

template <__m256 (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
float vec_dot_half(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const uint16_t*>(wv);
  auto* a = static_cast<const float*>(av);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(Load(w + i + 8 * k), _mm256_loadu_ps(a + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(a + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += Scalar(w[i]) * a[i];
  return sum;
}
inline float bf16_scalar(uint16_t h) { uint32_t x = (uint32_t)h << 16; float f; std::memcpy(&f, &x, 4); return f; }

template <__m256 (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
void dequantize_half(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load(s + i));
  for (; i < n; ++i) dst[i] = Scalar(s[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = (uint16_t)_cvtss_sh(src[i], 0);
}

// ---- legacy quantized types: vec_dot ------------------------------------------

float vec_dot_q4_0(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ4_0*>(wv);
  auto* a = static_cast<const BlockQ8_0*>(av);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i p0 = dot_offset(unpack_nibbles(w[i].qs), loadu256(a[i].qs), 8);
    const __m256i p1 = dot_offset(unpack_nibbles(w[i + 1].qs), loadu256(a[i + 1].qs), 8);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(fp16(w[i + 1].d) * fp16(a[i + 1].d)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i p = dot_offset(unpack_nibbles(w[i].qs), loadu256(a[i].qs), 8);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

float vec_dot_q4_1(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ4_1*>(wv);
  auto* a = static_cast<const BlockQ8_1*>(av);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), unpack_nibbles(w[i].qs), loadu256(a[i].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc);
    mins += fp16(w[i].m) * fp16(a[i].s);
  }
  return hsum(acc) + mins;
}

float vec_dot_q5_0(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ5_0*>(wv);
  auto* a = static_cast<const BlockQ8_0*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(w[i].qs), fifth_bits(w[i].qh));
    const __m256i p = dot_offset(q, loadu256(a[i].qs), 16);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc);
  }
  return hsum(acc);
}

float vec_dot_q5_1(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ5_1*>(wv);
  auto* a = static_cast<const BlockQ8_1*>(av);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(w[i].qs), fifth_bits(w[i].qh));
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), q, loadu256(a[i].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc);
    mins += fp16(w[i].m) * fp16(a[i].s);
  }
  return hsum(acc) + mins;
}

template <typename Block>
float vec_dot_q8(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const Block*>(wv);
  auto* a = static_cast<const Block*>(av);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i p0 = dot_s8s8(loadu256(w[i].qs), loadu256(a[i].qs));
    const __m256i p1 = dot_s8s8(loadu256(w[i + 1].qs), loadu256(a[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(fp16(w[i + 1].d) * fp16(a[i + 1].d)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i p = dot_s8s8(loadu256(w[i].qs), loadu256(a[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16(w[i].d) * fp16(a[i].d)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace
}  // namespace spool::detail
