// x86 SIMD dots of the K-quants against Q8_K, on 256-bit vectors; compiled
// twice like x86/unpacked_impl.h (AVX2, and AVX-512VL+VNNI). Levels are made
// unsigned (adding the format's offset) so the u8 x s8 dot applies, and the
// offset comes back out through Q8_K's per-16 sums (bsums).
#pragma once

#include "kernels/x86/unpacked_impl.h"

namespace spool::detail {
namespace {

// The 8 scales and 8 mins of a Q4_K/Q5_K block, unpacked from 12 bytes.
struct ScalesK4 {
  uint8_t sc[8], m[8];
};
inline ScalesK4 unpack_k4(const uint8_t* q) {
  uint32_t v[3];
  std::memcpy(v, q, 12);
  const uint32_t lo[2] = {v[0] & 0x3f3f3f3f, ((v[2] >> 0) & 0x0f0f0f0f) | (((v[0] >> 6) & 0x03030303) << 4)};
  const uint32_t mi[2] = {v[1] & 0x3f3f3f3f, ((v[2] >> 4) & 0x0f0f0f0f) | (((v[1] >> 6) & 0x03030303) << 4)};
  ScalesK4 s;
  std::memcpy(s.sc, lo, 8);
  std::memcpy(s.m, mi, 8);
  return s;
}

// sum_j m[j] * (bsums[2j] + bsums[2j+1]) as 8 int32 lanes.
inline __m256i mins_dot_bsums(const uint8_t* m, const int16_t* bsums) {
  uint64_t m8;
  std::memcpy(&m8, m, 8);
  const __m256i m32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
  const __m256i pairs = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
  return _mm256_madd_epi16(loadu256(bsums), pairs);
}

// sum_j sc[j] * bsums[j] over 16 signed scales, as 8 int32 lanes.
inline __m256i scales_dot_bsums(const int8_t* sc, const int16_t* bsums) {
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)sc));
  return _mm256_madd_epi16(loadu256(bsums), sc16);
}

float vec_dot_q4_k(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ4_K*>(wv);
  auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const ScalesK4 s = unpack_k4(w[i].scales);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = loadu256(w[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      sumi = dot_scaled(sumi, lo, loadu256(a[i].qs + 64 * c), s.sc[2 * c], s.sc[2 * c]);
      sumi = dot_scaled(sumi, hi, loadu256(a[i].qs + 64 * c + 32), s.sc[2 * c + 1], s.sc[2 * c + 1]);
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(a[i].d * fp16(w[i].d)), acc);
    const __m256i mins = mins_dot_bsums(s.m, a[i].bsums);
    accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(a[i].d * fp16(w[i].dmin)), accm);
  }
  return hsum(_mm256_sub_ps(acc, accm));
}

float vec_dot_q5_k(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ5_K*>(wv);
  auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const ScalesK4 s = unpack_k4(w[i].scales);
    const __m256i qh = loadu256(w[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = loadu256(w[i].qs + 32 * c);
      // Fifth bits: bit 2c (first 32 levels) and 2c+1 (next 32) of qh.
      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_slli_epi16(h0, 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), _mm256_slli_epi16(h1, 4));
      sumi = dot_scaled(sumi, lo, loadu256(a[i].qs + 64 * c), s.sc[2 * c], s.sc[2 * c]);
      sumi = dot_scaled(sumi, hi, loadu256(a[i].qs + 64 * c + 32), s.sc[2 * c + 1], s.sc[2 * c + 1]);
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(a[i].d * fp16(w[i].d)), acc);
    const __m256i mins = mins_dot_bsums(s.m, a[i].bsums);
    accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(a[i].d * fp16(w[i].dmin)), accm);
  }
  return hsum(_mm256_sub_ps(acc, accm));
}

// Q6_K levels u = q + 32 in 0..63 for the 32 elements at 128h + 32c.
inline __m256i q6_levels(const BlockQ6_K& b, int h, int c, __m256i qh) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  const __m256i ql = loadu256(b.ql + 64 * h + 32 * (c & 1));
  const __m256i lo = c < 2 ? _mm256_and_si256(ql, low4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
  const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), three);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
}

float vec_dot_q6_k(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ6_K*>(wv);
  auto* a = static_cast<const BlockQ8_K*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = w[i].scales;
    // sum sc (u - 32) a = sum sc u a - 32 sum sc bsums.
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scales_dot_bsums(sc, a[i].bsums), 5));
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = loadu256(w[i].qh + 32 * h);
      for (int c = 0; c < 4; ++c) {
        const int sub = 8 * h + 2 * c;
        sumi = dot_scaled(sumi, q6_levels(w[i], h, c, qh), loadu256(a[i].qs + 128 * h + 32 * c), sc[sub], sc[sub + 1]);
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(a[i].d * fp16(w[i].d)), acc);
  }
  return hsum(acc);
}

// 16 Q3_K scales (bias removed), unpacked.
inline void q3_scales(const uint8_t* packed, int8_t* out) {
  unpack_scales_q3_k(packed, out);
  for (int j = 0; j < 16; ++j) out[j] = (int8_t)(out[j] - 32);
}

float vec_dot_q3_k(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ3_K*>(wv);
  auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t sc[16];
    q3_scales(w[i].scales, sc);
    // Levels u = low2 + 4 * hbit in 0..7 stand for u - 4.
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scales_dot_bsums(sc, a[i].bsums), 2));
    const __m256i hm = loadu256(w[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = loadu256(w[i].qs + 32 * h);
      for (int c = 0; c < 4; ++c) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), three);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + c), one);
        const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(hb, 2));
        const int sub = 8 * h + 2 * c;
        sumi = dot_scaled(sumi, u, loadu256(a[i].qs + 128 * h + 32 * c), sc[sub], sc[sub + 1]);
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(a[i].d * fp16(w[i].d)), acc);
  }
  return hsum(acc);
}

float vec_dot_q2_k(int64_t n, const void* wv, const void* av) {
  auto* w = static_cast<const BlockQ2_K*>(wv);
  auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i three = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8_t* sc = w[i].scales;
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = loadu256(w[i].qs + 32 * h);
      for (int c = 0; c < 4; ++c) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), three);
        const int sub = 8 * h + 2 * c;
        sumi = dot_scaled(sumi, u, loadu256(a[i].qs + 128 * h + 32 * c), sc[sub] & 0xF, sc[sub + 1] & 0xF);
      }
    }
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i*)sc), _mm_set1_epi8((char)0xF0)), 4));
    const __m256i mins = _mm256_madd_epi16(loadu256(a[i].bsums), m16);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(a[i].d * fp16(w[i].d)), acc);
    accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(a[i].d * fp16(w[i].dmin)), accm);
  }
  return hsum(_mm256_sub_ps(acc, accm));
}

}  // namespace
}  // namespace spool::detail
