// x86 kernels of the low-bit types that dot with Q8_K (IQ1_S, IQ1_M, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS, TQ1_0, TQ2_0), compiled twice like
// the other *_impl.h (x86/iq_avx2.cpp, x86/iq_avx512.cpp).
//
// These formats cost most in decoding a block (grid lookups, sign patterns),
// little in the dot product itself. Each format's unpack() decodes a block of
// 256 weights into registers (Unpacked: int8 levels and 16 float scales, one
// per 16 weights). Tiles of 1-4 activation rows (decode) dot each block
// straight from registers; larger tiles (prefill) decode 4 weight rows once
// into a per-thread scratch that stays in L1 and dot them with every activation
// row. Both end in the same block dot, so a token's result is the same
// whatever it is batched with.
//
// Per instruction set:
// - AVX-512 VNNI: levels are stored biased (q + 128, as u8) for vpdpbusd; the
//   bias is taken off with the activation block's sums of 16 (Q8_K bsums).
// - AVX2: levels stay signed; maddubs(|q|, sign(a, q)) is exact here because
//   |q| <= 127 and the Q8_K quantizer keeps activations within +-127.
// Each set reduces a block's sixteen sums of 16 in its own order (kScaleOrder),
// and the row's scales are stored in that order.
//
// Some formats have a fused one-token kernel (dot1: IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0 on AVX2; IQ2_XS, IQ2_S, IQ1_S, IQ1_M on
// AVX-512) that skips the signed levels: signs go onto the
// activations, or the levels are offset to be unsigned and the offset comes
// off with the activations' sums. Their integer sums are exact and equal to
// block_dot's, so the float tail (shared) gives the same result. On AVX2,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ1_S keep their scales as
// integers (2 l + 1 per 32 or per 16, kIntScales): madd multiplies them in
// and a block converts once. TQ1_0 on
// AVX-512 has a tile of its own (tq1_tile): its digits stay in the lanes of
// their bytes, and the activations are laid out to match once per call.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"
#include "kernels/kernels.h"

#ifndef SPOOL_X86_ISA
#error "define SPOOL_X86_ISA (avx2 or avx512) before including x86/iq_impl.h"
#endif

#ifndef SPOOL_UNROLL
#if defined(__clang__)
#define SPOOL_UNROLL _Pragma("unroll")
#else
#define SPOOL_UNROLL _Pragma("GCC unroll 16")
#endif
#endif
// Unpacks return their block through registers only when inlined into the driver.
#define SPOOL_IQ_INLINE __attribute__((always_inline)) inline

namespace spool::detail::SPOOL_X86_ISA {
namespace {

constexpr int kSubs = kQKK / 16;  // sums of 16 weights per block
constexpr size_t kPrefetchAhead = 4096;  // see decode_block

#if defined(__AVX512BW__)
constexpr uint8_t kLevelBias = 0x80;
// Position p of a block's reduced sums holds the sum of weights 16 * kScaleOrder[p] ..
constexpr int kScaleOrder[kSubs] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
#else
constexpr uint8_t kLevelBias = 0;
constexpr int kScaleOrder[kSubs] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
#endif

// ---- decoding helpers --------------------------------------------------------

// Eight 32-bit words, each holding four 7-bit sign indices (bits 0-27), to the
// 32 sign bytes they stand for: each index completed by its parity bit
// (the sign patterns of 8 weights have an even number of minus signs).
inline __m256i sign_bytes_7bit(__m256i m) {
  const __m256i f = _mm256_or_si256(
      _mm256_or_si256(_mm256_and_si256(m, _mm256_set1_epi32(0x7f)),
                      _mm256_and_si256(_mm256_slli_epi32(m, 1), _mm256_set1_epi32(0x7f00))),
      _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(m, 2), _mm256_set1_epi32(0x7f0000)),
                      _mm256_and_si256(_mm256_slli_epi32(m, 3), _mm256_set1_epi32(0x7f000000))));
  __m256i p = _mm256_xor_si256(f, _mm256_srli_epi32(f, 4));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
  return _mm256_or_si256(f, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(0x01010101)), 7));
}

// The 8 meta words of an IQ2_XXS block, whose 64 bytes are laid out as
// (4 index bytes, 4 meta bytes) x 8.
inline __m256i meta_words(const void* qs) {
  const __m256i perm = _mm256_setr_epi32(1, 3, 5, 7, 0, 2, 4, 6);
  const __m256i lo = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i*)qs), perm);
  const __m256i hi = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i*)((const uint8_t*)qs + 32)), perm);
  return _mm256_permute2x128_si256(lo, hi, 0x20);
}

// The eight 4-bit fields of a 32-bit word, lowest first.
inline __m256i nibbles8(uint32_t w) {
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                          _mm256_set1_epi32(0xf));
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// v, with the compiler no longer knowing its value (keeps a constant operand
// in a register as written; see FastTQ1_0::dot1).
SPOOL_IQ_INLINE __m256i opaque(__m256i v) {
  __asm__("" : "+x"(v));
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- grid points as codes ---------------------------------------------------
// A grid's bytes take at most 4 distinct levels (IQ2 grids) or 8 (IQ3 grids),
// so a point fits 16 bits: 2 or 3 bits per weight, first weight lowest. The
// AVX-512 kernels of IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S look these codes up with
// word permutes (256 entries are eight registers) and turn them into levels
// with a byte shuffle; on Zen 5 that beats gathering 8-byte points (a cycle or
// more per point). IQ2_XXS and IQ1_S/M load their points one by one instead,
// which measured faster for them (IQ1's 2048-entry grid is too big to permute).
struct GridCodes {
  alignas(64) uint16_t iq2xs[512];
  alignas(64) uint16_t iq2s[1024];
  alignas(64) uint16_t iq3xxs[256];
  alignas(64) uint16_t iq3s[512];
  // Level of each field value, for a byte shuffle (16 entries, repeated).
  alignas(16) int8_t lv_iq2xs[16], lv_iq2s[16], lv_iq3xxs[16], lv_iq3s[16];
  // The IQ1 one-token kernels: the IQ1 grid plus one (levels 0, 1, 2:
  // unsigned, for maddubs and vpdpbusd; one 16 KiB table measured faster than
  // levels + 9 from two tables, one per shift sign, on both sets).
  alignas(64) uint64_t iq1s_plus1[2048];
};

template <size_t N, size_t W, class T>
void encode_grid(const T (&grid)[N][W], uint16_t* codes, int8_t* lv, int bits) {
  std::vector<int> levels;
  for (const auto& point : grid)
    for (T v : point) levels.push_back((int)v);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  SPOOL_CHECK(levels.size() <= (1u << bits) && bits * W <= 16);
  for (size_t i = 0; i < N; ++i) {
    unsigned c = 0;
    for (size_t j = 0; j < W; ++j)
      c |= (unsigned)(std::lower_bound(levels.begin(), levels.end(), (int)grid[i][j]) - levels.begin()) << (bits * j);
    codes[i] = (uint16_t)c;
  }
  for (int k = 0; k < 16; ++k) lv[k] = (int8_t)levels[std::min<size_t>(k % (1 << bits), levels.size() - 1)];
}

inline const GridCodes& grid_codes() {
  static const GridCodes* g = [] {
    const IqCodebooks& cb = iq_codebooks();
    auto* c = new GridCodes{};
    encode_grid(cb.iq2xs, c->iq2xs, c->lv_iq2xs, 2);
    encode_grid(cb.iq2s, c->iq2s, c->lv_iq2s, 2);
    encode_grid(cb.iq3xxs, c->iq3xxs, c->lv_iq3xxs, 3);
    encode_grid(cb.iq3s, c->iq3s, c->lv_iq3s, 3);
    for (int i = 0; i < 2048; ++i) {
      uint64_t m = 0;
      for (int j = 0; j < 8; ++j) m |= (uint64_t)(uint8_t)(cb.iq1s[i][j] + 1) << (8 * j);
      c->iq1s_plus1[i] = m;
    }
    return c;
  }();
  return *g;
}

// Four 8-byte grid points by plain loads.
inline __m256i grid4x8(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

// ---- a decoded block in registers ---------------------------------------------
// Unpacked holds one block: its 256 levels (biased as kLevelBias says; the
// one-scale ternary formats store q + 1, see block_dot_one) and its
// 16 scales in reduction order. Every path computes a block's contribution
// with block_dot() on an Unpacked, whether it was decoded just now (decode,
// small tiles) or loaded back from the scratch (prefill), so the arithmetic
// of a (row, token) pair is the same in both.

#if defined(__AVX512BW__)
struct Unpacked {
  __m512i q[4];  // weights 64k .. 64k + 63
  __m512 sc;
};
// Eight scales, one per 32 weights in natural order (kScaleOrder[p] / 2).
inline void set_scales8(Unpacked& u, __m256 s) {
  const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
  u.sc = _mm512_permutexvar_ps(idx, _mm512_zextps256_ps512(s));
}
inline void store(const Unpacked& u, uint8_t* lv, float* sc) {
  SPOOL_UNROLL for (int k = 0; k < 4; ++k) _mm512_storeu_si512(lv + 64 * k, u.q[k]);
  _mm512_storeu_ps(sc, u.sc);
}
inline void load(Unpacked& u, const uint8_t* lv, const float* sc) {
  SPOOL_UNROLL for (int k = 0; k < 4; ++k) u.q[k] = _mm512_loadu_si512(lv + 64 * k);
  u.sc = _mm512_loadu_ps(sc);
}
// 64 grid levels g (unsigned magnitudes or signed levels), negated where the
// 64 sign bits s are set, biased.
inline __m512i signed64(__m512i g, uint64_t s) {
  const __m512i q = _mm512_mask_sub_epi8(g, _cvtu64_mask64(s), _mm512_setzero_si512(), g);
  return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

// Sixteen scales as 8 low-nibble ones (sub-blocks 0, 2, .., 14) and 8 high.
inline void set_scales_lohi(Unpacked& u, __m256 lo, __m256 hi) {
  const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  u.sc = _mm512_permutexvar_ps(idx, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
}
// Sixteen scales, one per 16 weights in natural order.
inline void set_scales16(Unpacked& u, __m512 s) { u.sc = _mm512_permutexvar_ps(_mm512_loadu_si512(kScaleOrder), s); }

// Codes of the 32 grid indices in the words of idx, from a table of N entries:
// a two-table word permute per 64 entries, then blends on the higher index bits.
template <int N>
SPOOL_IQ_INLINE __m512i lookup_codes(const uint16_t* table, __m512i idx) {
  __m512i r[N / 64];
  SPOOL_UNROLL for (int j = 0; j < N / 64; ++j)
    r[j] = _mm512_permutex2var_epi16(_mm512_load_si512(table + 64 * j), idx, _mm512_load_si512(table + 64 * j + 32));
  int n = N / 64;
  SPOOL_UNROLL for (int bit = 6; n > 1; ++bit, n /= 2) {
    const __mmask32 m = _mm512_test_epi16_mask(idx, _mm512_set1_epi16((short)(1 << bit)));
    SPOOL_UNROLL for (int i = 0; i < n / 2; ++i) r[i] = _mm512_mask_blend_epi16(m, r[2 * i], r[2 * i + 1]);
  }
  return r[0];
}
// The 64 levels of codes 8k .. 8k + 7 (2 bits per weight).
SPOOL_IQ_INLINE __m512i expand_2bit(__m512i codes, int k, const int8_t* lv) {
  const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(8 * k)),
                                       _mm512_setr_epi64(0, 0x0001000100010001, 0x0002000200020002, 0x0003000300030003,
                                                         0x0004000400040004, 0x0005000500050005, 0x0006000600060006,
                                                         0x0007000700070007));
  __m512i x = _mm512_permutexvar_epi16(idx, codes);
  x = _mm512_srlv_epi16(x, _mm512_set1_epi64(0x000c000800040000));
  // low byte: field 2w (bits 0-1); high byte: field 2w + 1 (bits 2-3, moved up by 6)
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi16(x, 6), _mm512_set1_epi16(0x00ff), 0xe4);
  x = _mm512_and_si512(x, _mm512_set1_epi16(0x0303));
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)lv)), x);
}
// The 64 levels of codes 16k .. 16k + 15 (3 bits per weight).
SPOOL_IQ_INLINE __m512i expand_3bit(__m512i codes, int k, const int8_t* lv) {
  const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(16 * k)),
                                       _mm512_srli_epi16(_mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004,
                                                                           0x00070006, 0x00090008, 0x000b000a,
                                                                           0x000d000c, 0x000f000e, 0x00110010,
                                                                           0x00130012, 0x00150014, 0x00170016,
                                                                           0x00190018, 0x001b001a, 0x001d001c,
                                                                           0x001f001e), 1));
  __m512i x = _mm512_permutexvar_epi16(idx, codes);
  x = _mm512_srlv_epi16(x, _mm512_set1_epi32(0x00060000));
  // low byte: field 2w (bits 0-2); high byte: field 2w + 1 (bits 3-5, moved up by 5)
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi16(x, 5), _mm512_set1_epi16(0x00ff), 0xe4);
  x = _mm512_and_si512(x, _mm512_set1_epi16(0x0707));
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)lv)), x);
}

using Acc = __m512;
inline Acc acc_zero() { return _mm512_setzero_ps(); }
inline float hsum(Acc acc) { return _mm512_reduce_add_ps(acc); }

// The sixteen sums of 16 of four vpdpbusd results (s[k]: weights 64 k ..,
// four partial sums per 128-bit lane), in kScaleOrder.
SPOOL_IQ_INLINE __m512i reduce16(const __m512i s[4]) {
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
  const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t1, t2), _mm512_unpackhi_epi64(t1, t2));
}
// 64 unsigned grid magnitudes (two sets of four 8-byte points) dotted with
// 64 activations whose signs are flipped where the 64 sign bits are set:
// the same integers as the signed levels give (activations within +-127).
SPOOL_IQ_INLINE __m512i dot64_signed(__m256i g0, __m256i g1, uint64_t sign_bits, const int8_t* x) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i v = _mm512_loadu_si512(x);
  const __m512i sx = _mm512_mask_sub_epi8(v, _cvtu64_mask64(sign_bits), z, v);
  return _mm512_dpbusd_epi32(z, _mm512_inserti64x4(_mm512_castsi256_si512(g0), g1, 1), sx);
}

// The activation side of a Q8_K block, shared by every weight row dotted with it.
struct Act {
  const int8_t* x;
  const int16_t* bsums;
  __m512i bias;  // the +128 bias of the levels times each sum of 16 activations
  __m512 d;
};
inline Act act(const BlockQ8_K& a) {
  const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)a.bsums));
  return {a.qs, a.bsums, _mm512_slli_epi32(_mm512_permutexvar_epi32(_mm512_loadu_si512(kScaleOrder), bs), 7), _mm512_set1_ps(a.d)};
}

// acc + this block's sixteen scaled sums of 16 products with activation block a.
inline Acc block_dot(const Unpacked& u, const Act& a, Acc acc) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i s0 = _mm512_dpbusd_epi32(z, u.q[0], _mm512_loadu_si512(a.x));
  const __m512i s1 = _mm512_dpbusd_epi32(z, u.q[1], _mm512_loadu_si512(a.x + 64));
  const __m512i s2 = _mm512_dpbusd_epi32(z, u.q[2], _mm512_loadu_si512(a.x + 128));
  const __m512i s3 = _mm512_dpbusd_epi32(z, u.q[3], _mm512_loadu_si512(a.x + 192));
  // 128-bit lane L of s[k] holds the four partial sums of weights 64k + 16L ..
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
  const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
  const __m512i t3 = _mm512_add_epi32(_mm512_unpacklo_epi64(t1, t2), _mm512_unpackhi_epi64(t1, t2));
  const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(t3, a.bias));
  return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), f, acc);
}
// The same for a block with one scale (all 16 equal, levels -1..1): the
// sums need no reduction by sub-block.
inline Acc block_dot_one(const Unpacked& u, const Act& a, Acc acc) {
  const __m512i z = _mm512_setzero_si512();
  __m512i s0 = _mm512_dpbusd_epi32(z, u.q[0], _mm512_loadu_si512(a.x));
  __m512i s1 = _mm512_dpbusd_epi32(z, u.q[1], _mm512_loadu_si512(a.x + 64));
  s0 = _mm512_dpbusd_epi32(s0, u.q[2], _mm512_loadu_si512(a.x + 128));
  s1 = _mm512_dpbusd_epi32(s1, u.q[3], _mm512_loadu_si512(a.x + 192));
  // The levels of these formats are stored as q + 1 (not q + 128): the lanes
  // mix sub-blocks, and a small bias keeps each lane's float exact and small.
  const __m512i bsum = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)a.bsums));
  const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(s0, s1), bsum));
  return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), f, acc);
}
#else
struct Unpacked {
  __m256i q[8];  // weights 32k .. 32k + 31
  __m256 sc[2];
};
inline void set_scales8(Unpacked& u, __m256 s) {
  u.sc[0] = _mm256_permute2f128_ps(s, s, 0x00);  // groups 0-3 twice
  u.sc[1] = _mm256_permute2f128_ps(s, s, 0x11);  // groups 4-7 twice
}
inline void store(const Unpacked& u, uint8_t* lv, float* sc) {
  SPOOL_UNROLL for (int k = 0; k < 8; ++k) _mm256_storeu_si256((__m256i*)(lv + 32 * k), u.q[k]);
  _mm256_storeu_ps(sc, u.sc[0]);
  _mm256_storeu_ps(sc + 8, u.sc[1]);
}
inline void load(Unpacked& u, const uint8_t* lv, const float* sc) {
  SPOOL_UNROLL for (int k = 0; k < 8; ++k) u.q[k] = _mm256_loadu_si256((const __m256i*)(lv + 32 * k));
  u.sc[0] = _mm256_loadu_ps(sc);
  u.sc[1] = _mm256_loadu_ps(sc + 8);
}
// 32 levels g negated where the 32 sign bits s are set (signed levels).
inline __m256i signed32(__m256i g, uint32_t s) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
  const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)s), shuf), bits), bits);
  return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}
inline __m256i grid8x4(const uint32_t* grid, const int* i) {
  return _mm256_setr_epi32((int)grid[i[0]], (int)grid[i[1]], (int)grid[i[2]], (int)grid[i[3]], (int)grid[i[4]],
                           (int)grid[i[5]], (int)grid[i[6]], (int)grid[i[7]]);
}
inline void set_scales_lohi(Unpacked& u, __m256 lo, __m256 hi) {
  u.sc[0] = _mm256_permute2f128_ps(lo, hi, 0x20);
  u.sc[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
}
inline void set_scales16(Unpacked& u, __m256 s0, __m256 s1) {
  const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  u.sc[0] = _mm256_permutevar8x32_ps(s0, idx);
  u.sc[1] = _mm256_permutevar8x32_ps(s1, idx);
}

using Acc = __m256;
inline Acc acc_zero() { return _mm256_setzero_ps(); }
inline float hsum(Acc acc) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

struct Act {
  const int8_t* x;
  const int16_t* bsums;
  __m256 d;
};
inline Act act(const BlockQ8_K& a) { return {a.qs, a.bsums, _mm256_set1_ps(a.d)}; }

// The sixteen exact sums of 16 products of a block, from the partial sums
// s[k] of weights 32k .. (four per 128-bit lane), in kScaleOrder: h[0] holds
// sub-blocks 0, 2, 4, 6, 1, 3, 5, 7, h[1] the same of 8 .. 15.
inline void reduce16(const __m256i s[8], __m256i h[2]) {
  h[0] = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
  h[1] = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
}
// acc + the sums scaled. Every path of a format ends here with the same exact
// integer sums, so results do not depend on the path (one token or a tile).
inline Acc block_tail(const __m256i h[2], const __m256 sc[2], const Act& a, Acc acc) {
  acc = _mm256_fmadd_ps(_mm256_mul_ps(sc[0], a.d), _mm256_cvtepi32_ps(h[0]), acc);
  return _mm256_fmadd_ps(_mm256_mul_ps(sc[1], a.d), _mm256_cvtepi32_ps(h[1]), acc);
}

inline Acc block_dot(const Unpacked& u, const Act& a, Acc acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s[8], h[2];
  SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(a.x + 32 * k));
    s[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(u.q[k]), _mm256_sign_epi8(x, u.q[k])), ones);
  }
  reduce16(s, h);
  return block_tail(h, u.sc, a, acc);
}
// Partial sums of 32 unsigned magnitudes g with 32 activations whose signs
// are flipped where the weights are negative (sg: +1 / -1 bytes): the same
// integers block_dot gets from the signed levels.
inline __m256i dot32_signed(__m256i g, __m256i sg, const int8_t* x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(g, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)x), sg)),
                           _mm256_set1_epi16(1));
}
// One scale, levels stored as q + 1 in 0..3 (unsigned): maddubs takes them as
// they are, its pair sums (|.| <= 762) add up in 16 bits, and the + 1 is taken
// off with the activations' sum.
inline Acc block_dot_one(const Unpacked& u, const Act& a, Acc acc) {
  __m256i s[8];
  SPOOL_UNROLL for (int k = 0; k < 8; ++k)
    s[k] = _mm256_maddubs_epi16(u.q[k], _mm256_loadu_si256((const __m256i*)(a.x + 32 * k)));
  const __m256i t = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(s[0], s[1]), _mm256_add_epi16(s[2], s[3])),
                                     _mm256_add_epi16(_mm256_add_epi16(s[4], s[5]), _mm256_add_epi16(s[6], s[7])));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i bsum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a.bsums), ones);
  const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(t, ones), bsum));
  return _mm256_fmadd_ps(_mm256_mul_ps(u.sc[0], a.d), f, acc);
}

// Integer scales (kIntScales: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S):
// sc[0] holds odd scales 2 l + 1 as int16 pairs (bit pattern), dword k for
// weights 32 k .. 32 k + 31 (low word: the first 16, high word: the next 16;
// equal with one scale per 32), sc[1] the block's float factor. The 16-bit
// products of each 32 are multiplied by their scale in madd and summed
// exactly over the block; one conversion per block.
inline void set_int_scales16(Unpacked& u, __m256i lo, __m256i hi, float factor) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i odd_lo = _mm256_or_si256(_mm256_slli_epi32(lo, 1), one);
  const __m256i odd_hi = _mm256_or_si256(_mm256_slli_epi32(hi, 1), one);
  u.sc[0] = _mm256_castsi256_ps(_mm256_or_si256(odd_lo, _mm256_slli_epi32(odd_hi, 16)));
  u.sc[1] = _mm256_set1_ps(factor);
}
inline void set_int_scales8(Unpacked& u, __m256i l, float factor) { set_int_scales16(u, l, l, factor); }
// The madd operand of group k: its scale in every word (Per16: the low
// half's scale in the low 128 bits, the high half's in the high 128 bits).
template <bool Per16>
SPOOL_IQ_INLINE __m256i group_scale(__m256i ls, int k) {
  const __m256i v = _mm256_permutevar8x32_epi32(ls, _mm256_set1_epi32(k));
  if constexpr (!Per16) return v;
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3,
                                                 2, 3, 2, 3, 2, 3, 2, 3));
}
template <bool Per16 = false>
inline __m256i int_scaled_sum(const __m256i p[8], const Unpacked& u) {
  const __m256i ls = _mm256_castps_si256(u.sc[0]);
  __m256i s[8];
  SPOOL_UNROLL for (int k = 0; k < 8; ++k) s[k] = _mm256_madd_epi16(p[k], group_scale<Per16>(ls, k));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3])),
                          _mm256_add_epi32(_mm256_add_epi32(s[4], s[5]), _mm256_add_epi32(s[6], s[7])));
}
template <bool Per16 = false>
inline Acc int_scaled_tail(const __m256i p[8], const Unpacked& u, const Act& a, Acc acc) {
  return _mm256_fmadd_ps(_mm256_mul_ps(u.sc[1], a.d), _mm256_cvtepi32_ps(int_scaled_sum<Per16>(p, u)), acc);
}
// The 16-bit pair products of a block's signed levels with the activations.
SPOOL_IQ_INLINE void level_products(const Unpacked& u, const Act& a, __m256i p[8]) {
  SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(a.x + 32 * k));
    p[k] = _mm256_maddubs_epi16(_mm256_abs_epi8(u.q[k]), _mm256_sign_epi8(x, u.q[k]));
  }
}
template <bool Per16>
inline Acc block_dot_int(const Unpacked& u, const Act& a, Acc acc) {
  __m256i p[8];
  level_products(u, a, p);
  return int_scaled_tail<Per16>(p, u, a, acc);
}
// The same with the block's sum taken to one integer before its conversion
// (IQ1_S: its one-token kernel gets that sum in other lanes, see FastIQ1_S).
inline Acc int_total_tail(__m256i t, const Unpacked& u, const Act& a, Acc acc) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  const __m256 v = _mm256_zextps128_ps256(_mm_cvtepi32_ps(_mm_and_si128(h, _mm_setr_epi32(-1, 0, 0, 0))));
  return _mm256_fmadd_ps(_mm256_mul_ps(u.sc[1], a.d), v, acc);
}
template <bool Per16>
inline Acc block_dot_int_total(const Unpacked& u, const Act& a, Acc acc) {
  __m256i p[8];
  level_products(u, a, p);
  return int_total_tail(int_scaled_sum<Per16>(p, u), u, a, acc);
}
// The 32 activations of group k with the signs of their weights applied;
// sgb holds a block's 32 sign bytes (byte 4 k + j: weights 32 k + 8 j ..).
// Bytes are spread by a shuffle and tested against their bit: no table loads.
// Bytes 4 k .. 4 k + 3 of v (k = 0..7), each repeated over 8 bytes: one
// byte per 8 weights of group k spread over them.
SPOOL_IQ_INLINE __m256i spread8(__m256i v, int k) {
  // (both immediates spelled out: clang wants a constant even after inlining)
  const __m256i lane = k < 4 ? _mm256_permute4x64_epi64(v, 0x44) : _mm256_permute4x64_epi64(v, 0xee);
  const char o = (char)(4 * (k & 3));
  return _mm256_shuffle_epi8(
      lane, _mm256_setr_epi8(o, o, o, o, o, o, o, o, o + 1, o + 1, o + 1, o + 1, o + 1, o + 1, o + 1, o + 1, o + 2,
                             o + 2, o + 2, o + 2, o + 2, o + 2, o + 2, o + 2, o + 3, o + 3, o + 3, o + 3, o + 3, o + 3,
                             o + 3, o + 3));
}
SPOOL_IQ_INLINE __m256i signed_act32(__m256i sgb, int k, const int8_t* x) {
  const __m256i spread = spread8(sgb, k);
  const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
  const __m256i v = _mm256_loadu_si256((const __m256i*)x);
  return _mm256_sub_epi8(_mm256_xor_si256(v, neg), neg);
}
#endif

// The block dot of format U.
template <class U, class = void>
struct OneScale : std::false_type {};
template <class U>
struct OneScale<U, std::void_t<decltype(U::kOneScale)>> : std::bool_constant<U::kOneScale> {};
template <class U, class = void>
struct IntScales : std::false_type {};
template <class U>
struct IntScales<U, std::void_t<decltype(U::kIntScales)>> : std::bool_constant<U::kIntScales> {};
template <class U>
SPOOL_IQ_INLINE Acc dot(const Unpacked& u, const Act& a, Acc acc) {
  if constexpr (OneScale<U>::value) {
    return block_dot_one(u, a, acc);
#if !defined(__AVX512BW__)
  } else if constexpr (IntScales<U>::value) {
    if constexpr (U::kIntTotal) {
      return block_dot_int_total<U::kPer16>(u, a, acc);
    } else {
      return block_dot_int<U::kPer16>(u, a, acc);
    }
#endif
  } else {
    return block_dot(u, a, acc);
  }
}

// ---- the formats -------------------------------------------------------------
// The tables an unpack may read.
struct Books {
  const IqCodebooks* cb;
  const GridCodes* gc;
};

// Each unpack(books, block, u) decodes one block into u.

// The scales of the IQ2 types with 4-bit scales per 16 (IQ2_XS, IQ2_S):
// d * (l + 1/2) / 4, low nibbles and high nibbles of 8 bytes.
SPOOL_IQ_INLINE void iq2_scales16(Unpacked& u, uint16_t d16, const uint8_t* scales) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)scales));
#if !defined(__AVX512BW__)
  // as integers (set_int_scales16): d / 8 * (2 l + 1)
  set_int_scales16(u, _mm256_and_si256(b, _mm256_set1_epi32(0xf)), _mm256_srli_epi32(b, 4), _cvtsh_ss(d16) * 0.125f);
#else
  (void)b;
  // position p (kScaleOrder; built in place: permuting the floats of
  // set_scales_lohi into that order took half the one-token kernel's time
  // on Zen 5): nibble kScaleOrder[p] % 2 of byte kScaleOrder[p] / 2, straight into place
  const __m128i bytes = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i*)scales),
                                         _mm_setr_epi8(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7));
  const __m512i l = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(bytes),
                                                       _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4)),
                                     _mm512_set1_epi32(0xf));
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(d16));
  // d (l + 1/2) / 4, rounded as before: ((d * (l + 1/2)) * 1/4)
  u.sc = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_add_ps(_mm512_cvtepi32_ps(l), _mm512_set1_ps(0.5f))),
                       _mm512_set1_ps(0.25f));
#endif
}

// The scales of IQ2_XXS and IQ3_XXS, one per 32 weights in the top 4 bits of
// their meta words: d * (l + 1/2) * f.
SPOOL_IQ_INLINE void meta_scales8(Unpacked& u, uint16_t d16, __m256i meta, float f) {
#if !defined(__AVX512BW__)
  // as integers (see set_int_scales8): d * f / 2 * (2 l + 1)
  set_int_scales8(u, _mm256_srli_epi32(meta, 28), _cvtsh_ss(d16) * (f * 0.5f));
#else
  const __m256 l = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(meta, 28)), _mm256_set1_ps(0.5f));
  set_scales8(u, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(d16)), l), _mm256_set1_ps(f)));
#endif
}

// IQ2_XXS: per 32 weights four 8-bit indices into a grid of 8 magnitudes, four
// 7-bit sign indices and a 4-bit scale.
struct FastIQ2_XXS {
  using Block = BlockIQ2_XXS;
  static constexpr bool kIntScales = true, kIntTotal = false, kPer16 = false;  // AVX2
  static SPOOL_IQ_INLINE void scales(const Block& b, __m256i meta, Unpacked& u) { meta_scales8(u, b.d, meta, 0.25f); }
#if !defined(__AVX512BW__)
  // One token: grid points (magnitudes) by plain loads from the 2 KiB grid,
  // the signs applied to the activations from the block's sign bytes (no
  // table), integer scales. A 256 KiB table of every point under every sign
  // pattern (one load per 8 weights) took about 10 % more time at kernel
  // level (bench/lowbit_kernel_bench.cpp, Zen 5); presumably its loads miss
  // L1 (not measured: no hardware counters in that VM).
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    const __m256i meta = meta_words(b.qs);
    scales(b, meta, u);
    const __m256i sgb = sign_bytes_7bit(meta);
    const auto* raw = reinterpret_cast<const uint8_t*>(b.qs);
    const auto* grid = (const uint64_t*)bk.cb->iq2xxs;
    __m256i p[8];
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* i = raw + 8 * k;
      p[k] = _mm256_maddubs_epi16(grid4x8(grid, i[0], i[1], i[2], i[3]), signed_act32(sgb, k, a.x + 32 * k));
    }
    return int_scaled_tail(p, u, a, acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const __m256i meta = meta_words(b.qs);
    alignas(32) uint8_t sg[32];
    _mm256_store_si256((__m256i*)sg, sign_bytes_7bit(meta));
    scales(b, meta, u);
#if defined(__AVX512BW__)
    // Grid points by plain loads, indices read from the block (bytes 0-3 of
    // each 8); loads beat both gathers and a permute lookup here.
    const auto* raw = reinterpret_cast<const uint8_t*>(b.qs);
    const auto* grid = (const uint64_t*)bk.cb->iq2xxs;
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      const uint8_t* i = raw + 16 * k;
      const __m512i g = _mm512_inserti64x4(_mm512_castsi256_si512(grid4x8(grid, i[0], i[1], i[2], i[3])),
                                           grid4x8(grid, i[8], i[9], i[10], i[11]), 1);
      u.q[k] = signed64(g, load64(sg + 8 * k));
    }
#else
    const auto* raw = reinterpret_cast<const uint8_t*>(b.qs);
    const auto* grid = (const uint64_t*)bk.cb->iq2xxs;
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* i = raw + 8 * k;
      u.q[k] = signed32(grid4x8(grid, i[0], i[1], i[2], i[3]), load32(sg + 4 * k));
    }
#endif
  }
};

// IQ2_XS: per 8 weights a 9-bit grid index and a 7-bit sign index; 4-bit
// scales per 16.
struct FastIQ2_XS {
  using Block = BlockIQ2_XS;
  static constexpr bool kIntScales = true, kIntTotal = false, kPer16 = true;  // AVX2
#if !defined(__AVX512BW__)
  // One token: the 32 sign bytes built in vectors (index completed by its
  // parity bit) and put onto the activations; grid points by plain loads.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    iq2_scales16(u, b.d, b.scales);
    __m256i sb[2];
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i f = _mm256_srli_epi16(_mm256_loadu_si256((const __m256i*)(b.qs + 16 * h)), 9);
      __m256i par = _mm256_xor_si256(f, _mm256_srli_epi16(f, 4));
      par = _mm256_xor_si256(par, _mm256_srli_epi16(par, 2));
      par = _mm256_xor_si256(par, _mm256_srli_epi16(par, 1));
      sb[h] = _mm256_or_si256(f, _mm256_slli_epi16(_mm256_and_si256(par, _mm256_set1_epi16(1)), 7));
    }
    const __m256i sgb = _mm256_permute4x64_epi64(_mm256_packus_epi16(sb[0], sb[1]), 0xd8);
    const auto* grid = (const uint64_t*)bk.cb->iq2xs;
    __m256i p[8];
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint16_t* v = b.qs + 4 * k;
      p[k] = _mm256_maddubs_epi16(grid4x8(grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511),
                                  signed_act32(sgb, k, a.x + 32 * k));
    }
    return int_scaled_tail<true>(p, u, a, acc);
  }
#else
  // One token: grid magnitudes by plain loads, the signs (index completed by
  // its parity bit, built in vectors) onto the activations, vpdpbusd.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    iq2_scales16(u, b.d, b.scales);
    const __m256i sg = sign_bytes(_mm512_loadu_si512(b.qs));
    const auto* grid = (const uint64_t*)bk.cb->iq2xs;
    __m512i s[4];
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      const uint16_t* v = b.qs + 8 * k;
      const __m128i lane = k < 2 ? _mm256_castsi256_si128(sg) : _mm256_extracti128_si256(sg, 1);
      s[k] = dot64_signed(grid4x8(grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511),
                          grid4x8(grid, v[4] & 511, v[5] & 511, v[6] & 511, v[7] & 511),
                          (uint64_t)(k % 2 ? _mm_extract_epi64(lane, 1) : _mm_cvtsi128_si64(lane)), a.x + 64 * k);
    }
    return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), _mm512_cvtepi32_ps(reduce16(s)), acc);
  }
  // The 32 sign bytes of a block's 32 index words: bits 9-15, completed by
  // their parity bit.
  static SPOOL_IQ_INLINE __m256i sign_bytes(__m512i v) {
    const __m512i f = _mm512_srli_epi16(v, 9);
    __m512i par = _mm512_xor_si512(f, _mm512_srli_epi16(f, 4));
    par = _mm512_xor_si512(par, _mm512_srli_epi16(par, 2));
    par = _mm512_xor_si512(par, _mm512_srli_epi16(par, 1));
    return _mm512_cvtepi16_epi8(_mm512_ternarylogic_epi32(f, _mm512_slli_epi16(par, 7), _mm512_set1_epi16(0x80), 0xf8));
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    iq2_scales16(u, b.d, b.scales);
#if defined(__AVX512BW__)
    const __m512i v = _mm512_loadu_si512(b.qs);
    // sign index (bits 9-15) completed by its parity bit
    const __m512i f = _mm512_srli_epi16(v, 9);
    __m512i par = _mm512_xor_si512(f, _mm512_srli_epi16(f, 4));
    par = _mm512_xor_si512(par, _mm512_srli_epi16(par, 2));
    par = _mm512_xor_si512(par, _mm512_srli_epi16(par, 1));
    const __m512i sgn = _mm512_ternarylogic_epi32(f, _mm512_slli_epi16(par, 7), _mm512_set1_epi16(0x80), 0xf8);
    alignas(32) uint8_t sg[32];
    _mm256_store_si256((__m256i*)sg, _mm512_cvtepi16_epi8(sgn));
    const __m512i codes = lookup_codes<512>(bk.gc->iq2xs, _mm512_and_si512(v, _mm512_set1_epi16(511)));
    SPOOL_UNROLL for (int k = 0; k < 4; ++k)
      u.q[k] = signed64(expand_2bit(codes, k, bk.gc->lv_iq2xs), load64(sg + 8 * k));
#else
    const auto* grid = (const uint64_t*)bk.cb->iq2xs;
    const uint8_t* signs = bk.cb->signs;
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint16_t* v = b.qs + 4 * k;
      const uint32_t s = signs[v[0] >> 9] | signs[v[1] >> 9] << 8 | signs[v[2] >> 9] << 16 | (uint32_t)signs[v[3] >> 9] << 24;
      u.q[k] = signed32(grid4x8(grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511), s);
    }
#endif
  }
};

// IQ2_S: per 8 weights a 10-bit grid index (8 bits in qs, 2 in qh) and an
// explicit sign byte (after the indices); 4-bit scales per 16.
struct FastIQ2_S {
  using Block = BlockIQ2_S;
  static constexpr bool kIntScales = true, kIntTotal = false, kPer16 = true;  // AVX2
#if !defined(__AVX512BW__)
  // One token: the explicit sign bytes onto the activations.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    iq2_scales16(u, b.d, b.scales);
    const __m256i sgb = _mm256_loadu_si256((const __m256i*)(b.qs + kQKK / 8));
    const auto* grid = (const uint64_t*)bk.cb->iq2s;
    __m256i p[8];
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* q = b.qs + 4 * k;
      const int h = b.qh[k];
      p[k] = _mm256_maddubs_epi16(grid4x8(grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300),
                                          q[2] | (h << 4 & 0x300), q[3] | (h << 2 & 0x300)),
                                  signed_act32(sgb, k, a.x + 32 * k));
    }
    return int_scaled_tail<true>(p, u, a, acc);
  }
#else
  // One token: grid magnitudes by plain loads (as AVX2; the permute lookup
  // of unpack is slower for one token), the explicit signs onto the
  // activations, vpdpbusd.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    iq2_scales16(u, b.d, b.scales);
    const uint8_t* signs = b.qs + kQKK / 8;
    const auto* grid = (const uint64_t*)bk.cb->iq2s;
    __m512i s[4];
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i p[2];
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const uint8_t* q = b.qs + 8 * k + 4 * j;
        const int h = b.qh[2 * k + j];
        p[j] = grid4x8(grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                       q[3] | (h << 2 & 0x300));
      }
      s[k] = dot64_signed(p[0], p[1], load64(signs + 8 * k), a.x + 64 * k);
    }
    return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), _mm512_cvtepi32_ps(reduce16(s)), acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    iq2_scales16(u, b.d, b.scales);
    const uint8_t* signs = b.qs + kQKK / 8;
#if defined(__AVX512BW__)
    // index m: qs[m] | bits 2 (m % 4) .. of qh[m / 4] as bits 8-9
    const __m512i h = _mm512_permutexvar_epi16(
        _mm512_srli_epi16(_mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006, 0x00090008, 0x000b000a,
                                            0x000d000c, 0x000f000e, 0x00110010, 0x00130012, 0x00150014, 0x00170016,
                                            0x00190018, 0x001b001a, 0x001d001c, 0x001f001e), 2),
        _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(_mm_loadl_epi64((const __m128i*)b.qh))));
    const __m512i hi = _mm512_and_si512(_mm512_sllv_epi16(h, _mm512_set1_epi64(0x0002000400060008)),
                                        _mm512_set1_epi16(0x300));
    const __m512i idx = _mm512_or_si512(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)b.qs)), hi);
    const __m512i codes = lookup_codes<1024>(bk.gc->iq2s, idx);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k)
      u.q[k] = signed64(expand_2bit(codes, k, bk.gc->lv_iq2s), load64(signs + 8 * k));
#else
    const auto* grid = (const uint64_t*)bk.cb->iq2s;
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* q = b.qs + 4 * k;
      const int h = b.qh[k];
      u.q[k] = signed32(grid4x8(grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                                q[3] | (h << 2 & 0x300)),
                        load32(signs + 4 * k));
    }
#endif
  }
};

// IQ3_XXS: 64 8-bit indices into a grid of 4 magnitudes, then per 32 weights a
// word of four 7-bit sign indices and a 4-bit scale.
struct FastIQ3_XXS {
  using Block = BlockIQ3_XXS;
  static constexpr bool kIntScales = true, kIntTotal = false, kPer16 = false;  // AVX2
  static SPOOL_IQ_INLINE void scales(const Block& b, __m256i meta, Unpacked& u) { meta_scales8(u, b.d, meta, 0.5f); }
#if !defined(__AVX512BW__)
  // One token: signs onto the activations, as FastIQ2_XXS::dot1.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    const __m256i meta = _mm256_loadu_si256((const __m256i*)(b.qs + kQKK / 4));
    scales(b, meta, u);
    const __m256i sgb = sign_bytes_7bit(meta);
    const auto* grid = (const uint32_t*)bk.cb->iq3xxs;
    __m256i p[8];
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* q = b.qs + 8 * k;
      const int i[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
      p[k] = _mm256_maddubs_epi16(grid8x4(grid, i), signed_act32(sgb, k, a.x + 32 * k));
    }
    return int_scaled_tail(p, u, a, acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const __m256i meta = _mm256_loadu_si256((const __m256i*)(b.qs + kQKK / 4));
    alignas(32) uint8_t sg[32];
    _mm256_store_si256((__m256i*)sg, sign_bytes_7bit(meta));
    scales(b, meta, u);
#if defined(__AVX512BW__)
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i codes =
          lookup_codes<256>(bk.gc->iq3xxs, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * h))));
      SPOOL_UNROLL for (int k = 0; k < 2; ++k)
        u.q[2 * h + k] = signed64(expand_3bit(codes, k, bk.gc->lv_iq3xxs), load64(sg + 16 * h + 8 * k));
    }
#else
    const auto* grid = (const uint32_t*)bk.cb->iq3xxs;
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      const uint8_t* q = b.qs + 8 * k;
      const int i[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
      u.q[k] = signed32(grid8x4(grid, i), load32(sg + 4 * k));
    }
#endif
  }
};

// IQ3_S: 64 9-bit indices (the top bits in qh) into a grid of 4 odd levels,
// explicit signs, 4-bit scales per 32: d * (1 + 2 l).
struct FastIQ3_S {
  using Block = BlockIQ3_S;
  static constexpr bool kIntScales = true, kIntTotal = false, kPer16 = false;  // AVX2
  // d * (2 l + 1) per 32 weights
  static SPOOL_IQ_INLINE void scales(const Block& b, Unpacked& u) {
    const __m256i l = nibbles8(load32(b.scales));
#if defined(__AVX512BW__)
    const __m256 l21 = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(l, l), _mm256_set1_epi32(1)));
    set_scales8(u, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), l21));
#else
    set_int_scales8(u, l, _cvtsh_ss(b.d));
#endif
  }
  // index m: qs[m] with bit m % 8 of qh[m / 8] as bit 8
  static SPOOL_IQ_INLINE void indices8(const Block& b, int k, int i[8]) {
    const uint8_t* q = b.qs + 8 * k;
    const int h = b.qh[k];
    SPOOL_UNROLL for (int j = 0; j < 8; ++j) i[j] = q[j] | (h << (8 - j) & 256);
  }
#if !defined(__AVX512BW__)
  // One token: the explicit sign bytes onto the activations.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    scales(b, u);
    const __m256i sgb = _mm256_loadu_si256((const __m256i*)b.signs);
    const auto* grid = (const uint32_t*)bk.cb->iq3s;
    __m256i p[8];
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      int i[8];
      indices8(b, k, i);
      p[k] = _mm256_maddubs_epi16(grid8x4(grid, i), signed_act32(sgb, k, a.x + 32 * k));
    }
    return int_scaled_tail(p, u, a, acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    scales(b, u);
#if defined(__AVX512BW__)
    const uint64_t qh = load64(b.qh);
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * h)));
      idx = _mm512_mask_add_epi16(idx, (__mmask32)(qh >> (32 * h)), idx, _mm512_set1_epi16(256));
      const __m512i codes = lookup_codes<512>(bk.gc->iq3s, idx);
      SPOOL_UNROLL for (int k = 0; k < 2; ++k)
        u.q[2 * h + k] = signed64(expand_3bit(codes, k, bk.gc->lv_iq3s), load64(b.signs + 16 * h + 8 * k));
    }
#else
    const auto* grid = (const uint32_t*)bk.cb->iq3s;
    SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
      int i[8];
      indices8(b, k, i);
      u.q[k] = signed32(grid8x4(grid, i), load32(b.signs + 4 * k));
    }
#endif
  }
};

// IQ1_S: per 8 weights an 11-bit index into a grid of -1/0/+1; per 32 weights
// a 3-bit scale and the sign of the +-1/8 shift (levels 8 * point +- 1).
struct FastIQ1_S {
  using Block = BlockIQ1_S;
  static constexpr bool kIntScales = true, kIntTotal = true, kPer16 = false;  // AVX2
  static SPOOL_IQ_INLINE void scales(const Block& b, Unpacked& u) {
    // d * (2 * ((qh >> 12) & 7) + 1) / 8 per 32 weights
    const __m256i h3 = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)b.qh)), 12),
                                        _mm256_set1_epi32(7));
#if defined(__AVX512BW__)
    const __m256 l = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(h3, h3), _mm256_set1_epi32(1)));
    set_scales8(u, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d) * 0.125f), l));
#else
    set_int_scales8(u, h3, _cvtsh_ss(b.d) * 0.125f);
#endif
  }
#if defined(__AVX512BW__)
  // One token: with levels q = 8 p + delta (p in -1..1, delta +-1 per 32),
  // q . x = 8 (p + 1) . x + (delta - 8) sum(x); p + 1 is unsigned, so the grid
  // (plus one) goes into vpdpbusd as it is and the rest comes from the
  // activations' sums of 16. Exact, so equal to block_dot's sums.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    scales(b, u);
    const uint64_t* grid = bk.gc->iq1s_plus1;
    const __m512i z = _mm512_setzero_si512();
    __m512i s[4];
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i p[2];
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int h = b.qh[2 * k + j];
        const uint8_t* q = b.qs + 8 * k + 4 * j;
        p[j] = grid4x8(grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8, q[2] | ((h >> 6) & 7) << 8,
                       q[3] | ((h >> 9) & 7) << 8);
      }
      s[k] = _mm512_dpbusd_epi32(z, _mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1),
                                 _mm512_loadu_si512(a.x + 64 * k));
    }
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i t3 = _mm512_add_epi32(_mm512_unpacklo_epi64(t1, t2), _mm512_unpackhi_epi64(t1, t2));
    // delta - 8 per group of 32 (-9 where bit 15 of qh is set, else -7), in kScaleOrder
    const __m256i neg = _mm256_srai_epi32(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i*)b.qh)), 31);
    const __m256i dm = _mm256_add_epi32(_mm256_set1_epi32(-7), _mm256_add_epi32(neg, neg));
    const __m512i dq = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7),
                                                _mm512_castsi256_si512(dm));
    const __m512i sums = _mm512_add_epi32(_mm512_slli_epi32(t3, 3), _mm512_mullo_epi32(_mm512_srai_epi32(a.bias, 7), dq));
    return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), _mm512_cvtepi32_ps(sums), acc);
  }
#else
  // One token: with levels q = 8 p + delta (p in -1..1, delta +-1 per 32),
  // q . x = 8 (p + 1) . x + (delta - 8) sum(x); p + 1 is unsigned, so the grid
  // (plus one) goes into maddubs as it is, and the rest, scaled, comes from
  // the activations' sums of 16 in one madd. The block's integer total is the
  // one block_dot_int_total gets from the levels.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    scales(b, u);
    const uint64_t* grid = bk.gc->iq1s_plus1;
    __m256i p[8];
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const int hb = b.qh[g];
      const uint8_t* q = b.qs + 4 * g;
      p[g] = _mm256_maddubs_epi16(grid4x8(grid, q[0] | (hb & 7) << 8, q[1] | ((hb >> 3) & 7) << 8,
                                          q[2] | ((hb >> 6) & 7) << 8, q[3] | ((hb >> 9) & 7) << 8),
                                  _mm256_loadu_si256((const __m256i*)(a.x + 32 * g)));
    }
    // per sum of 16 (group j / 2): (2 l + 1) (delta - 8), delta - 8 = -9 where bit 15 of qh is set, else -7
    const __m128i qh = _mm_loadu_si128((const __m128i*)b.qh);
    const __m128i l = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1),
                                   _mm_set1_epi16(1));
    const __m128i dm = _mm_add_epi16(_mm_set1_epi16(-7), _mm_slli_epi16(_mm_srai_epi16(qh, 15), 1));
    const __m256i coef = _mm256_cvtepu16_epi32(_mm_mullo_epi16(l, dm));  // one per group, in 32-bit lanes
    const __m256i c16 = _mm256_or_si256(_mm256_and_si256(coef, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(coef, 16));
    const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a.bsums), c16);
    return int_total_tail(_mm256_add_epi32(_mm256_slli_epi32(int_scaled_sum(p, u), 3), corr), u, a, acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    scales(b, u);
#if defined(__AVX512BW__)
    // Grid points by plain loads: 2048 entries are too many to permute, and a
    // load per point beats gathering them.
    const auto* grid = (const uint64_t*)bk.cb->iq1s;
    const __m512i f8 = _mm512_set1_epi8((char)0xf8);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i p[2];
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int h = b.qh[2 * k + j];
        const uint8_t* q = b.qs + 8 * k + 4 * j;
        p[j] = grid4x8(grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8, q[2] | ((h >> 6) & 7) << 8,
                       q[3] | ((h >> 9) & 7) << 8);
      }
      const __m512i g8 = _mm512_and_si512(_mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1), 3), f8);
      const __mmask8 neg = (__mmask8)((b.qh[2 * k] & 0x8000 ? 0x0f : 0) | (b.qh[2 * k + 1] & 0x8000 ? 0xf0 : 0));
      const __m512i delta = _mm512_mask_blend_epi64(neg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
      u.q[k] = _mm512_xor_si512(_mm512_add_epi8(g8, delta), _mm512_set1_epi8((char)0x80));
    }
#else
    const __m256i f8 = _mm256_set1_epi8((char)0xf8);
    const auto* grid = (const uint64_t*)bk.cb->iq1s;
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const int h = b.qh[g];
      const uint8_t* q = b.qs + 4 * g;
      const __m256i p = grid4x8(grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8, q[2] | ((h >> 6) & 7) << 8,
                                q[3] | ((h >> 9) & 7) << 8);
      const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(p, 3), f8);
      u.q[g] = _mm256_add_epi8(g8, _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
    }
#endif
  }
};

// IQ1_M: as IQ1_S with the shift's sign per 8 weights (bit 3 of each index's
// nibble in qh) and 3-bit scales per 16; the fp16 scale is spread over the
// top nibbles of the four scale words.
struct FastIQ1_M {
  using Block = BlockIQ1_M;
  static constexpr bool kIntScales = true, kIntTotal = true, kPer16 = true;  // AVX2
  static SPOOL_IQ_INLINE uint16_t d16(const uint16_t sc[4]) {
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  }
#if !defined(__AVX512BW__)
  // The 3-bit scale of each 16 as integers 2 l + 1 (set_int_scales16), d / 8 the block's factor.
  static SPOOL_IQ_INLINE void scales(const Block& b, Unpacked& u) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof sc);
    // scale f (weights 16 f ..): bits 3 (f % 4) .. of word f / 4; group k has f = 2 k (low) and 2 k + 1 (high)
    const __m256i w = _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(_mm_loadl_epi64((const __m128i*)sc)),
                                                  _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    const __m256i seven = _mm256_set1_epi32(7);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_setr_epi32(0, 6, 0, 6, 0, 6, 0, 6)), seven);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_setr_epi32(3, 9, 3, 9, 3, 9, 3, 9)), seven);
    set_int_scales16(u, lo, hi, _cvtsh_ss(d16(sc)) * 0.125f);
  }
  // One token: with levels q = 8 p + delta (p in -1..1, delta +-1 per 8
  // weights), q + 9 = 8 (p + 1) + (delta + 1) is unsigned (0..18): maddubs
  // takes it with the grid plus one shifted and 0 or 2 added per 8 weights, and
  // the - 9 sum(x) comes off with the activations' sums of 16 times their
  // scales in one madd. The block's integer total is the one
  // block_dot_int_total gets from the levels.
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    scales(b, u);
    // byte s (8 weights 8 s ..): 2 where the shift is + 1 (bit 3 or 7 of qh[s / 2] clear), else 0
    const __m256i hh = _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)b.qh)),
        _mm256_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14,
                         14, 15, 15));
    const __m256i bit = _mm256_set1_epi16((short)0x8008);
    const __m256i plus = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hh, bit), bit), _mm256_set1_epi8(2));
    const uint64_t* grid = bk.gc->iq1s_plus1;
    __m256i p[8];
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const uint8_t* q = b.qs + 4 * g;
      const int h0 = b.qh[2 * g], h1 = b.qh[2 * g + 1];
      const __m256i g1 = grid4x8(grid, q[0] | (h0 & 7) << 8, q[1] | ((h0 >> 4) & 7) << 8, q[2] | (h1 & 7) << 8,
                                 q[3] | ((h1 >> 4) & 7) << 8);
      const __m256i u9 = _mm256_add_epi8(_mm256_slli_epi16(g1, 3), spread8(plus, g));
      p[g] = _mm256_maddubs_epi16(u9, _mm256_loadu_si256((const __m256i*)(a.x + 32 * g)));
    }
    const __m256i c16 = _mm256_mullo_epi16(_mm256_castps_si256(u.sc[0]), _mm256_set1_epi16(-9));  // natural order
    const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a.bsums), c16);
    return int_total_tail(_mm256_add_epi32(int_scaled_sum<true>(p, u), corr), u, a, acc);
  }
#endif
#if defined(__AVX512BW__)
  // The sixteen scales d (2 l + 1) / 8, in the reduction order.
  static SPOOL_IQ_INLINE void scales(const Block& b, Unpacked& u) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof sc);
    // field f (sub-block f): bits 3 (f % 4) .. of word f / 4; position p of
    // kScaleOrder holds f = 4 (p % 4) + p / 4: word p % 4, shifted 3 (p / 4).
    // Built in place: permuting floats into the order measured slow here.
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_set1_epi64x((long long)load64(b.scales)));
    const __m512i l = _mm512_and_si512(
        _mm512_srlv_epi32(w, _mm512_setr_epi32(0, 0, 0, 0, 3, 3, 3, 3, 6, 6, 6, 6, 9, 9, 9, 9)), _mm512_set1_epi32(7));
    const __m512 l21 = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(l, l), _mm512_set1_epi32(1)));
    u.sc = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(d16(sc))), l21), _mm512_set1_ps(0.125f));
  }
  // One token: q + 9 = 8 (p + 1) + (delta + 1) is unsigned (0..18), as on
  // AVX2, so vpdpbusd takes it with the grid plus one shifted and 0 or 2 added
  // per 8 weights; each sum of 16 then loses 9 times its activations' sum
  // (block_dot takes 128 times it off the levels + 128: the same integers).
  static SPOOL_IQ_INLINE Acc dot1(const Books& bk, const Block& b, const Act& a, Acc acc) {
    Unpacked u;
    scales(b, u);
    // bit n (8 weights 8 n ..): the shift's sign, bit 3 (n even) or 7 (n odd) of qh[n / 2]
    const __m128i qh = _mm_loadu_si128((const __m128i*)b.qh);
    const uint32_t neg = _pdep_u32(_mm_test_epi8_mask(qh, _mm_set1_epi8(8)), 0x55555555u) |
                         _pdep_u32(_mm_movepi8_mask(qh), 0xaaaaaaaau);
    const uint64_t* grid = bk.gc->iq1s_plus1;
    const __m512i z = _mm512_setzero_si512(), two = _mm512_set1_epi8(2);
    __m512i s[4];
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i p[2];
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int g = 2 * k + j;
        const uint8_t* q = b.qs + 4 * g;
        const int h0 = b.qh[2 * g], h1 = b.qh[2 * g + 1];
        p[j] = grid4x8(grid, q[0] | (h0 & 7) << 8, q[1] | ((h0 >> 4) & 7) << 8, q[2] | (h1 & 7) << 8,
                       q[3] | ((h1 >> 4) & 7) << 8);
      }
      const __m512i g8 = _mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1), 3);
      const __m512i u9 = _mm512_add_epi8(g8, _mm512_maskz_mov_epi64((__mmask8)~(neg >> (8 * k)), two));
      s[k] = _mm512_dpbusd_epi32(z, u9, _mm512_loadu_si512(a.x + 64 * k));
    }
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i t3 = _mm512_add_epi32(_mm512_unpacklo_epi64(t1, t2), _mm512_unpackhi_epi64(t1, t2));
    const __m512i nine_sums = _mm512_mullo_epi32(_mm512_srai_epi32(a.bias, 7), _mm512_set1_epi32(9));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(t3, nine_sums));
    return _mm512_fmadd_ps(_mm512_mul_ps(u.sc, a.d), f, acc);
  }
#endif
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
#if defined(__AVX512BW__)
    scales(b, u);
    // Grid points by plain loads, indices assembled in scalar registers (2048
    // entries are too many to permute; loads beat gathers, and a vector of
    // indices stored and read back stalls on store forwarding).
    const auto* grid = (const uint64_t*)bk.cb->iq1s;
    const __m512i f8 = _mm512_set1_epi8((char)0xf8);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i p[2];
      __mmask8 neg = 0;
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int g = 2 * k + j;
        const uint8_t* q = b.qs + 4 * g;
        const int h0 = b.qh[2 * g], h1 = b.qh[2 * g + 1];
        const int n[4] = {h0 & 0xf, h0 >> 4, h1 & 0xf, h1 >> 4};  // 3 index bits, then the shift's sign
        p[j] = grid4x8(grid, q[0] | (n[0] & 7) << 8, q[1] | (n[1] & 7) << 8, q[2] | (n[2] & 7) << 8,
                       q[3] | (n[3] & 7) << 8);
        neg |= (__mmask8)(((n[0] >> 3) | (n[1] >> 3) << 1 | (n[2] >> 3) << 2 | (n[3] >> 3) << 3) << (4 * j));
      }
      const __m512i g8 = _mm512_and_si512(_mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1), 3), f8);
      const __m512i delta = _mm512_mask_blend_epi64(neg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
      u.q[k] = _mm512_xor_si512(_mm512_add_epi8(g8, delta), _mm512_set1_epi8((char)0x80));
    }
#else
    scales(b, u);
    const __m256i f8 = _mm256_set1_epi8((char)0xf8);
    const auto* grid = (const uint64_t*)bk.cb->iq1s;
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const uint8_t* q = b.qs + 4 * g;
      const int h0 = b.qh[2 * g], h1 = b.qh[2 * g + 1];
      const int n[4] = {h0 & 0xf, h0 >> 4, h1 & 0xf, h1 >> 4};
      const __m256i p = grid4x8(grid, q[0] | (n[0] & 7) << 8, q[1] | (n[1] & 7) << 8, q[2] | (n[2] & 7) << 8,
                                q[3] | (n[3] & 7) << 8);
      const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(p, 3), f8);
      const __m256i delta = _mm256_setr_epi64x(n[0] & 8 ? -1 : 0x0101010101010101, n[1] & 8 ? -1 : 0x0101010101010101,
                                               n[2] & 8 ? -1 : 0x0101010101010101, n[3] & 8 ? -1 : 0x0101010101010101);
      u.q[g] = _mm256_add_epi8(g8, delta);
    }
#endif
  }
};

// IQ4_XS: 4-bit indices into 16 non-linear levels, 6-bit scales per 32.
struct FastIQ4_XS {
  using Block = BlockIQ4_XS;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    // 6-bit scale g: nibble g of scales_l, bits 2g..2g+1 of scales_h on top, minus 32
    const __m256i lo = nibbles8(load32(b.scales_l));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    set_scales8(u, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(ls)));
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i*)bk.cb->iq4nl), _mm_set1_epi8((char)kLevelBias));
#if defined(__AVX512BW__)
    const __m512i t4 = _mm512_broadcast_i32x4(t), low = _mm512_set1_epi8(0x0f);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      // lanes: bytes 0-15 (low nibbles), the same (high), bytes 16-31 (low), (high)
      const __m512i y = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * k)));
      __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), y);
      z = _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), low);
      u.q[k] = _mm512_shuffle_epi8(t4, z);
    }
#else
    const __m256i t2 = _mm256_broadcastsi128_si256(t), low = _mm256_set1_epi8(0x0f);
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const __m128i x = _mm_loadu_si128((const __m128i*)(b.qs + 16 * g));
      const __m256i z = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), low);
      u.q[g] = _mm256_shuffle_epi8(t2, z);
    }
#endif
  }
};

// TQ1_0: ternary digits, five per byte of qs and four per byte of qh, each the
// top base-3 digit of the byte times 3^n (taken as (v * 3) >> 8: 0, 1 or 2).
struct FastTQ1_0 {
  using Block = BlockTQ1_0;
  // The digit of each byte v (q + 1, as block_dot_one takes the levels) from
  // t = v ^ 0x80, by two signed compares. Multiplying by 3 commutes with the
  // bias (3 * 128 = 128 mod 256), so a block is biased once, before its
  // powers of 3 are taken.
  static __m256i levels(__m256i t) {
    const __m256i ge86 = _mm256_cmpgt_epi8(t, opaque(_mm256_set1_epi8((char)(85 ^ 0x80))));
    const __m256i ge171 = _mm256_cmpgt_epi8(t, opaque(_mm256_set1_epi8((char)(170 ^ 0x80))));
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge86), ge171);
  }
  static __m256i times3(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }
  static __m128i times3(__m128i v) { return _mm_add_epi8(v, _mm_add_epi8(v, v)); }
#if defined(__AVX512BW__)
  // AVX-512 has its own tile (tq1_tile): these feed it.
  static __m512i levels(__m512i v) {
    const __m512i one = _mm512_set1_epi8(1);
    // the digit itself: q + 1 (see tq1_dot)
    const __m512i r = _mm512_maskz_mov_epi8(_mm512_cmpge_epu8_mask(v, _mm512_set1_epi8(86)), one);
    return _mm512_mask_add_epi8(r, _mm512_cmpge_epu8_mask(v, _mm512_set1_epi8((char)171)), r, one);
  }
  static __m512i times3(__m512i v) { return _mm512_add_epi8(v, _mm512_add_epi8(v, v)); }
  // All 256 digits of a block (q + 1) in five registers, in the lane order of
  // tq1_arrange: the block's 52 bytes of qs and qh in one register times 1, 3,
  // 9, 27 and 81.
  static SPOOL_IQ_INLINE void levels5(const Block& b, __m512i l[5]) {
    __m512i z = _mm512_maskz_loadu_epi8(0x000fffffffffffffULL, &b);  // qs and qh: bytes 0-51
    SPOOL_UNROLL for (int n = 0; n < 5; ++n) {
      l[n] = levels(z);
      if (n < 4) z = times3(z);
    }
  }
#else
  static constexpr bool kOneScale = true;
  // One token: each register of digits goes into maddubs as it is made, so few
  // stay live. The integers and lanes are those of unpack + block_dot_one.
  static SPOOL_IQ_INLINE Acc dot1(const Books&, const Block& b, const Act& a, Acc acc) {
    // Thresholds hidden from the compiler, which otherwise turns one of the
    // two compares into min + compare-equal.
    const __m256i c85 = opaque(_mm256_set1_epi8((char)(85 ^ 0x80)));
    const __m256i c170 = opaque(_mm256_set1_epi8((char)(170 ^ 0x80)));
    const auto digits = [&](__m256i t) {
      return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), _mm256_cmpgt_epi8(t, c85)),
                             _mm256_cmpgt_epi8(t, c170));
    };
    const auto prod = [&](__m256i t, int k) {
      return _mm256_maddubs_epi16(digits(t), _mm256_loadu_si256((const __m256i*)(a.x + 32 * k)));
    };
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), bias);
    __m256i s = prod(x, 0);
    SPOOL_UNROLL for (int k = 1; k < 5; ++k) {
      x = times3(x);
      s = _mm256_add_epi16(s, prod(x, k));
    }
    // qs[32..47] in the low lane, qh's dword in every dword of the high lane:
    // times 1, 3, 9, 27 and 81 give unpack's registers 5-7 by lane moves.
    const __m256i w1 = _mm256_xor_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(b.qs + 32))),
                                _mm_set1_epi32((int)load32(b.qh)), 1),
        bias);
    const __m256i w3 = times3(w1), w9 = times3(w3), w27 = times3(w9), w81 = times3(w27);
    s = _mm256_add_epi16(s, prod(_mm256_permute2x128_si256(w1, w3, 0x20), 5));
    s = _mm256_add_epi16(s, prod(_mm256_permute2x128_si256(w9, w27, 0x20), 6));
    const __m256i h = _mm256_blend_epi32(_mm256_blend_epi32(w1, w3, 0x20), _mm256_blend_epi32(w9, w27, 0x80), 0xc0);
    s = _mm256_add_epi16(s, prod(_mm256_blend_epi32(w81, h, 0xf0), 7));
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i bsum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a.bsums), ones);
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(s, ones), bsum));
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), a.d), f, acc);
  }
  static SPOOL_IQ_INLINE void unpack(const Books&, const Block& b, Unpacked& u) {
    set_scales8(u, _mm256_set1_ps(_cvtsh_ss(b.d)));
    // Weights 0-159: the five digits of qs[0..31]; 160-239: those of qs[32..47];
    // 240-255: the four digits of qh[0..3].
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    const __m256i x1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), bias), x3 = times3(x1),
                  x9 = times3(x3), x27 = times3(x9), x81 = times3(x27);
    const __m128i y1 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(b.qs + 32)), _mm256_castsi256_si128(bias)),
                  y3 = times3(y1), y9 = times3(y3), y27 = times3(y9), y81 = times3(y27);
    // qh's four bytes times 1, 3, 9, 27 in the four dwords: digits 0-3 in order.
    const __m128i h1 = _mm_set1_epi32((int)(load32(b.qh) ^ 0x80808080u));
    const __m128i h3 = times3(h1), h9 = times3(h3), h27 = times3(h9);
    const __m128i hv = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, h27, 0x8), 0xc);
    u.q[0] = levels(x1);
    u.q[1] = levels(x3);
    u.q[2] = levels(x9);
    u.q[3] = levels(x27);
    u.q[4] = levels(x81);
    u.q[5] = levels(_mm256_set_m128i(y3, y1));
    u.q[6] = levels(_mm256_set_m128i(y27, y9));
    u.q[7] = levels(_mm256_set_m128i(hv, y81));
  }
#endif
};

// TQ2_0: 2-bit fields q + 1, four per byte.
struct FastTQ2_0 {
  using Block = BlockTQ2_0;
  static constexpr bool kOneScale = true;
  static SPOOL_IQ_INLINE void unpack(const Books&, const Block& b, Unpacked& u) {
    set_scales8(u, _mm256_set1_ps(_cvtsh_ss(b.d)));
#if defined(__AVX512BW__)
    const __m512i three = _mm512_set1_epi8(3);  // fields are q + 1, as block_dot_one takes them
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      // weights 64k ..: fields 2 (k % 2) and 2 (k % 2) + 1 of bytes 32 (k / 2) ..
      const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * (k / 2))));
      const int s0 = 4 * (k % 2);
      const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)s0), _mm256_set1_epi16((short)(s0 + 2)), 1);
      u.q[k] = _mm512_and_si512(_mm512_srlv_epi16(x, sh), three);
    }
#else
    const __m256i three = _mm256_set1_epi8(3);
    SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
      const __m256i x = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
      SPOOL_UNROLL for (int l = 0; l < 4; ++l)
        u.q[4 * j + l] = _mm256_and_si256(_mm256_srli_epi16(x, 2 * l), three);
    }
#endif
  }
};

}  // namespace
}  // namespace spool::detail::SPOOL_X86_ISA
