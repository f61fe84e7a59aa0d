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

// ---- activation quantizers -------------------------------------------------------

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
      const __m256i q = loadu256(y[i].qs + 16 * j);
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

}  // namespace
}  // namespace spool::detail
