// x86 kernels of the low-bit types that dot with Q8_0 (IQ4_NL, Q1_0, Q2_0),
// compiled twice with iq_impl.h (x86/iq_avx2.cpp, x86/iq_avx512.cpp; 256-bit
// code in both). Each is a vec_dot over one weight row and one activation row;
// the generic tile runs it per (row, token), so results are batch-invariant.
// Their blocks are 32 (IQ4_NL), 128 (Q1_0) or 64 (Q2_0) weights, dotted with
// 1, 4 or 2 Q8_0 blocks of 32 activations, each with its own scale.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"
#include "kernels/kernels.h"

#ifndef SPOOL_X86_ISA
#error "define SPOOL_X86_ISA (avx2 or avx512) before including x86/iq_q8_0_impl.h"
#endif

namespace spool::detail::SPOOL_X86_ISA {
namespace {

inline float hsum8(__m256 acc) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Eight partial sums (int32) of the 32 products of Q8_0 activations and
// levels given as unsigned u minus an offset of 1 (Q2_0) or as signs.
inline __m256i sum32(__m256i v16) { return _mm256_madd_epi16(v16, _mm256_set1_epi16(1)); }

// ---- IQ4_NL (blocks of 32) ---------------------------------------------------
// A block's 32 nibbles looked up in the 16 levels by one byte shuffle, dotted
// with the Q8_0 block (|levels|, |activations| <= 127: maddubs is exact).
float iq4nl_vec_dot(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i lv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)iq_codebooks().iq4nl));
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK4NL;
  auto block = [&](int64_t i) {
    const __m128i q = _mm_loadu_si128((const __m128i*)x[i].qs);
    const __m256i v = _mm256_shuffle_epi8(lv, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low));
    const __m256i yq = _mm256_loadu_si256((const __m256i*)y[i].qs);
    const __m256i p = sum32(_mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(yq, v)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d)), _mm256_cvtepi32_ps(p));
  };
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    acc0 = _mm256_add_ps(acc0, block(i));
    acc1 = _mm256_add_ps(acc1, block(i + 1));
  }
  if (i < nb) acc0 = _mm256_add_ps(acc0, block(i));
  return hsum8(_mm256_add_ps(acc0, acc1));
}

// ---- Q1_0 (blocks of 128 sign bits) ---------------------------------------------
// Weight j is +d where bit j is set and -d where it is clear, so a dot with 32
// activations is their sum with the clear bits' activations negated: no
// multiplies. The four sums of a block (one per Q8_0 block) are reduced side
// by side and scaled by a vector of the four activation scales.
float q1_0_vec_dot(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ1_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  const int64_t nb = n / kQK1_0;
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_0* yb = y + 4 * i;
    __m256i s[4];
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)x[i].qs));
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      // byte j of 32: bit j % 8 of byte 4 k + j / 8
      const char b0 = (char)(4 * k), b1 = (char)(b0 + 1), b2 = (char)(b0 + 2), b3 = (char)(b0 + 3);
      const __m256i b = _mm256_shuffle_epi8(q, _mm256_setr_epi8(b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1, b1,
                                                                b1, b2, b2, b2, b2, b2, b2, b2, b2, b3, b3, b3, b3, b3, b3,
                                                                b3, b3));
      const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), _mm256_setzero_si256());
      const __m256i v = _mm256_loadu_si256((const __m256i*)yb[k].qs);
      s[k] = _mm256_maddubs_epi16(ones, _mm256_sub_epi8(_mm256_xor_si256(v, clear), clear));  // pairs, |.| <= 254
    }
    // sums of 8 (|.| <= 1016) by two 16-bit horizontal adds, then of 16: in
    // each half, lanes k = 0..3 (the low and high 16 of each 32)
    const __m256i h = sum32(_mm256_hadd_epi16(_mm256_hadd_epi16(s[0], s[1]), _mm256_hadd_epi16(s[2], s[3])));
    const __m128 d4 = _mm_mul_ps(_mm_set1_ps(_cvtsh_ss(x[i].d)),
                                 _mm_cvtph_ps(_mm_setr_epi16((short)yb[0].d, (short)yb[1].d, (short)yb[2].d,
                                                             (short)yb[3].d, 0, 0, 0, 0)));
    acc = _mm256_fmadd_ps(_mm256_set_m128(d4, d4), _mm256_cvtepi32_ps(h), acc);
  }
  return hsum8(acc);
}

// ---- Q2_0 (blocks of 64 two-bit fields, levels field - 1) -----------------------
// The fields of 32 weights come from their 8 bytes in one variable shift: dword
// lanes hold bytes 0-3 (low half) or 4-7 (high half) shifted right by 0, 2, 4
// and 6, so byte 4 s + i of a half is the field of weight 4 i + s; one byte
// shuffle puts them in weight order. The fields are unsigned (0..3) as maddubs
// takes them; the level offset comes off as the activations' pair sums.
float q2_0_vec_dot(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i order = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13,
                                         2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i three = _mm256_set1_epi8(3), ones = _mm256_set1_epi8(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK2_0;
  auto half = [&](const uint8_t* qs, const BlockQ8_0& yb) {
    const __m256i q = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i*)qs)), halves);
    const __m256i f = _mm256_shuffle_epi8(_mm256_and_si256(_mm256_srlv_epi32(q, shifts), three), order);
    const __m256i v = _mm256_loadu_si256((const __m256i*)yb.qs);
    // pairs: f.v - 1.v, |.| <= 3 * 127 * 2: exact in 16 bits
    return sum32(_mm256_sub_epi16(_mm256_maddubs_epi16(f, v), _mm256_maddubs_epi16(ones, v)));
  };
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(x[i].d);
    const BlockQ8_0* yb = y + 2 * i;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * _cvtsh_ss(yb[0].d)), _mm256_cvtepi32_ps(half(x[i].qs, yb[0])), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * _cvtsh_ss(yb[1].d)), _mm256_cvtepi32_ps(half(x[i].qs + 8, yb[1])), acc1);
  }
  return hsum8(_mm256_add_ps(acc0, acc1));
}

}  // namespace

// The generic tile runs each per (row, token).
inline void fill_iq_q8_0_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::IQ4_NL].vec_dot = iq4nl_vec_dot;
  t.types[(uint32_t)DType::Q1_0].vec_dot = q1_0_vec_dot;
  t.types[(uint32_t)DType::Q2_0].vec_dot = q2_0_vec_dot;
}

}  // namespace spool::detail::SPOOL_X86_ISA
