// Packed AVX2 kernels for Q4_K and Q6_K (the bulk of Q4_K_M files): the
// AVX-512 design (x86/packed_kquant_avx512.cpp) at 8 rows per group, with
// maddubs + madd for vpdpbusd. A group keeps exactly the bytes of its 8
// original rows (scales stay 6-bit / int8 and are expanded per super-block in
// registers), so decode, bound by memory bandwidth, streams no more bytes.
#include "kernels/x86/packed_avx2.h"

#include <vector>

namespace spool::detail {
namespace {

using namespace packed2;

// The AVX2 table's Q8_K quantization of a row, in a per-thread buffer.
constexpr auto quantize_q8_k_tmp = packing::q8_k_row<avx2::quantize_q8_k>;

// pshufb control that turns each 32-bit lane's 4 bytes into the int16 pair
// (byte k0, byte k1): zero-extended, or (high) in the upper byte of each
// int16, for a sign-extending arithmetic shift down.
struct Ctrl {
  alignas(32) int8_t b[32];
};
constexpr Ctrl pair_ctrl(int k0, int k1, bool high) {
  Ctrl c{};
  for (int i = 0; i < 32; ++i) {
    const int dword = (i % 16) / 4, e = i % 4;
    const int src = 4 * dword + (e < 2 ? k0 : k1);
    c.b[i] = (int8_t)((e % 2 == (high ? 1 : 0)) ? src : -128);
  }
  return c;
}
inline __m256i shuffle(__m256i v, const Ctrl& c) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256((const __m256i*)c.b));
}
inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
// Opaque to the optimizer: integer adds are associative to GCC, which
// re-balances a long chain of them into a tree, keeps every product live at
// once and spills (Q4_K at 4 tokens); this keeps the chain a chain.
inline __m256i chain(__m256i v) {
  __asm__("" : "+x"(v));
  return v;
}

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

// ---- Q4_K ------------------------------------------------------------------------
// Activation row: [n int8][nb float d][nb x 8 int16 sums of 32].
// Group super-block (1152 bytes): d[8], dmin[8] fp16; the 12 scale bytes of
// each row as 3 ymm (lane r of ymm k: row r's bytes 4k..4k+3); qs[4][8] ymm:
// lane r of qs[p][m] = row r's bytes 32p+4m..+3 (low nibbles: sub-block 2p,
// high nibbles: sub-block 2p+1, chunk m).
struct Q4KPacked {
  static constexpr int kTokens = 4;  // acc, tot and int16 sums per token: 12 of the 16 ymm
  static constexpr size_t kScales = 4 * kRows, kQs = kScales + 96;
  static constexpr size_t kSuperBytes = kQs + 32 * 32;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ4_K), kBlockBytes = kSuperBytes;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kSuperBytes; }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 20 * (size_t)(n / kQKK), 32); }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const int64_t nb = n / kQKK;
    const BlockQ8_K* y = quantize_q8_k_tmp(x, n);
    auto* q = static_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(q + n);
    auto* sums = reinterpret_cast<int16_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(q + b * kQKK, y[b].qs, kQKK);
      d[b] = y[b].d;
      for (int s = 0; s < 8; ++s) sums[8 * b + s] = (int16_t)(y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
    }
  }

  // The 6-bit scales of 8 rows as madd operands: sc16[s] holds each row's
  // scale of sub-block s in both int16 halves of its lane (scaling and
  // widening a pair sum at once), m16[p] its mins of sub-blocks 2p and 2p+1.
  static void expand_scales(const uint8_t* blk, __m256i (&sc16)[8], __m256i (&m16)[4]) {
    static constexpr Ctrl kDup[4] = {pair_ctrl(0, 0, false), pair_ctrl(1, 1, false), pair_ctrl(2, 2, false),
                                     pair_ctrl(3, 3, false)};
    static constexpr Ctrl kPair[2] = {pair_ctrl(0, 1, false), pair_ctrl(2, 3, false)};
    const __m256i a = load(blk + kScales), b = load(blk + kScales + 32), c = load(blk + kScales + 64);
    const __m256i six = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    // Bytes 0-3 / 4-7: scales / mins 0-3 in the low 6 bits; 4-7 split
    // between the nibbles of bytes 8-11 and the top 2 bits of bytes 0-7.
    const __m256i sc[2] = {_mm256_and_si256(a, six),
                           _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_srli_epi16(a, 2), top2))};
    const __m256i mn[2] = {_mm256_and_si256(b, six),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(b, 2), top2))};
    SPOOL_UNROLL for (int s = 0; s < 8; ++s) sc16[s] = shuffle(sc[s / 4], kDup[s % 4]);
    SPOOL_UNROLL for (int p = 0; p < 4; ++p) m16[p] = shuffle(mn[p / 2], kPair[p % 2]);
  }

  // One sub-block of 32 (8 chunks): 8 maddubs of levels 0..15 fit int16
  // (8 x 2 x 15 x 128), then one madd scales and widens. a[j]: token j's
  // activations of the sub-block.
  template <int C, bool kHigh>
  static void sub_block(const uint8_t* qs, const int8_t* const (&a)[C], const __m256i& sc16, __m256i (&tot)[C]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i sum[C];
    SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
      const __m256i raw = load(qs + 32 * m);
      const __m256i w = _mm256_and_si256(kHigh ? _mm256_srli_epi16(raw, 4) : raw, low4);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const __m256i p = mul_u8s8(w, bcast4(a[j] + 4 * m));
        sum[j] = m == 0 ? p : chain(_mm256_add_epi16(sum[j], p));
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm256_add_epi32(tot[j], _mm256_madd_epi16(sum[j], sc16));
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc, int n_valid) {
    const int64_t nb = n / kQKK;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      // Unlike the AVX-512 kernels, these gain from software prefetch at every
      // tile width, decode included (one thread, 2048 x 225280 weights beyond
      // L3, ms without -> with: Q4_K 1 token 36.5 -> 28.7, 2 tokens 43.6 ->
      // 29.1; Q6_K 1 token 72 -> 43, 2 tokens 79 -> 46, 16 tokens 176 -> 130).
      prefetch_weights<kSuperBytes / 64>(blk);
      __m256i sc16[8], m16[4];
      expand_scales(blk, sc16, m16);
      const __m256 wd = load_f16x8(blk), wdmin = load_f16x8(blk + 2 * kRows);
      // Minimums first (fewer live registers below): dmin * sum_s m_s * asum_s.
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as);
        const float* d = reinterpret_cast<const float*>(q + n);
        const int16_t* sums = reinterpret_cast<const int16_t*>(d + nb) + 8 * b;
        __m256i mins = _mm256_madd_epi16(m16[0], bcast4(sums));
        SPOOL_UNROLL for (int p = 1; p < 4; ++p) {
          mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m16[p], bcast4(sums + 2 * p)));
        }
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(wdmin, _mm256_set1_ps(d[b])), acc[j]);
      }
      __m256i tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const uint8_t* qs = blk + kQs + 256 * p;
        const int8_t *lo[C], *hi[C];
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          lo[j] = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 64 * p;
          hi[j] = lo[j] + 32;
        }
        sub_block<C, false>(qs, lo, sc16[2 * p], tot);
        sub_block<C, true>(qs, hi, sc16[2 * p + 1], tot);
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float* d = reinterpret_cast<const float*>(act + j * as + n);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[j]), _mm256_mul_ps(wd, _mm256_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ4_K*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    std::memcpy(blk + 2 * kRows + 2 * r, &src.dmin, 2);
    for (int k = 0; k < 3; ++k) std::memcpy(blk + kScales + 32 * k + 4 * r, src.scales + 4 * k, 4);
    for (int p = 0; p < 4; ++p)
      for (int m = 0; m < 8; ++m) std::memcpy(blk + kQs + (8 * p + m) * 32 + 4 * r, src.qs + 32 * p + 4 * m, 4);
  }
};

// ---- Q6_K ------------------------------------------------------------------------
// Activation row: [n int8][nb float d][nb x 16 int16 sums of 16].
// Group: nb super-blocks of 1664 bytes, then nb x d[8] fp16 (there, the
// blocks stay 32-byte aligned). A super-block: the int8 scales as 4 ymm
// (lane r of ymm v: row r's scales 4v..4v+3), then per sub-block s of 16
// three ymm a, b, c whose lane r packs row r's levels (0..63) of its 4
// chunks (chunk q: elements 16s+4q..+3), byte by byte, with u_q a level of
// chunk q: a = u_0 | (u_2 >> 4) << 6, b = u_1 | (u_3 >> 4) << 6, c = (u_2 &
// 15) | (u_3 & 15) << 4. Chunks 0 and 1 then cost one op each, 2 and 3 four
// and five (a plain 4 + 2 bit split costs about 4.25 per chunk).
struct Q6KPacked {
  static constexpr int kTokens = 4;
  static constexpr size_t kQs = 4 * 32;
  static constexpr size_t kSuperBytes = kQs + 16 * 96;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ6_K);
  static size_t group_bytes(int64_t n) { return round_up((size_t)(n / kQKK) * (kSuperBytes + 2 * kRows), 32); }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 36 * (size_t)(n / kQKK), 32); }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const int64_t nb = n / kQKK;
    const BlockQ8_K* y = quantize_q8_k_tmp(x, n);
    auto* q = static_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(q + n);
    auto* sums = reinterpret_cast<int16_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(q + b * kQKK, y[b].qs, kQKK);
      d[b] = y[b].d;
      std::memcpy(sums + 16 * b, y[b].bsums, 32);
    }
  }

  // sc16[s]: each row's (signed) scale of sub-block s in both int16 halves of
  // its lane; off16[k]: 32 x its scales of sub-blocks 2k, 2k+1 (the -32
  // offset of the levels, applied once per super-block through the sums of 16).
  static void expand_scales(const uint8_t* blk, __m256i (&sc16)[16], __m256i (&off16)[8]) {
    static constexpr Ctrl kDup[4] = {pair_ctrl(0, 0, true), pair_ctrl(1, 1, true), pair_ctrl(2, 2, true),
                                     pair_ctrl(3, 3, true)};
    static constexpr Ctrl kPair[2] = {pair_ctrl(0, 1, true), pair_ctrl(2, 3, true)};
    SPOOL_UNROLL for (int v = 0; v < 4; ++v) {
      const __m256i s = load(blk + 32 * v);
      SPOOL_UNROLL for (int k = 0; k < 4; ++k) sc16[4 * v + k] = _mm256_srai_epi16(shuffle(s, kDup[k]), 8);
      SPOOL_UNROLL for (int i = 0; i < 2; ++i) off16[2 * v + i] = _mm256_srai_epi16(shuffle(s, kPair[i]), 3);
    }
  }

  // One sub-block of 16 (4 chunks): maddubs of levels 0..63 reach 2 x 63 x
  // 128, so only pairs are summed in int16 before the scaling madd.
  template <int C>
  static void sub_block(const uint8_t* q, const int8_t* const (&a)[C], const __m256i& sc16, __m256i (&tot)[C]) {
    const __m256i six = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    const __m256i ra = load(q), rb = load(q + 32), rc = load(q + 64);
    const __m256i w0 = _mm256_and_si256(ra, six), w1 = _mm256_and_si256(rb, six);
    const __m256i w2 = _mm256_or_si256(_mm256_and_si256(rc, low4), _mm256_and_si256(_mm256_srli_epi16(ra, 2), top2));
    const __m256i w3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(rc, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi16(rb, 2), top2));
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      const __m256i p01 = _mm256_add_epi16(mul_u8s8(w0, bcast4(a[j])), mul_u8s8(w1, bcast4(a[j] + 4)));
      const __m256i p23 = _mm256_add_epi16(mul_u8s8(w2, bcast4(a[j] + 8)), mul_u8s8(w3, bcast4(a[j] + 12)));
      tot[j] = _mm256_add_epi32(tot[j], _mm256_add_epi32(_mm256_madd_epi16(p01, sc16), _mm256_madd_epi16(p23, sc16)));
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc, int n_valid) {
    const int64_t nb = n / kQKK;
    const uint8_t* wds = wg + nb * kSuperBytes;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      prefetch_weights<kSuperBytes / 64>(blk);  // every C, as for Q4_K
      __m256i sc16[16], off16[8];
      expand_scales(blk, sc16, off16);
      __m256i tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {  // start value: -32 x sum_s scale_s x asum_s
        const auto* sums = reinterpret_cast<const int16_t*>(act + j * as + n + 4 * nb) + 16 * b;
        __m256i off = _mm256_madd_epi16(off16[0], bcast4(sums));
        SPOOL_UNROLL for (int k = 1; k < 8; ++k) {
          off = _mm256_add_epi32(off, _mm256_madd_epi16(off16[k], bcast4(sums + 2 * k)));
        }
        tot[j] = _mm256_sub_epi32(_mm256_setzero_si256(), off);
      }
      for (int s = 0; s < 16; ++s) {
        const int8_t* a[C];
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          a[j] = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 16 * s;
        }
        sub_block<C>(blk + kQs + 96 * s, a, sc16[s], tot);
      }
      const __m256 wd = load_f16x8(wds + 2 * kRows * b);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float* d = reinterpret_cast<const float*>(act + j * as + n);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[j]), _mm256_mul_ps(wd, _mm256_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  // The row scales go after the group's super-blocks: the group, not a block.
  static void pack_block(const uint8_t* src_block, int r, uint8_t* group, int64_t b, int64_t nb) {
    const auto& src = *reinterpret_cast<const BlockQ6_K*>(src_block);
    uint8_t u[kQKK];  // levels 0..63 in element order
    for (int h = 0; h < 2; ++h) {
      const uint8_t *ql = src.ql + 64 * h, *qh = src.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        u[128 * h + l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
        u[128 * h + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        u[128 * h + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        u[128 * h + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    uint8_t* blk = group + b * kSuperBytes;
    std::memcpy(group + nb * kSuperBytes + 2 * kRows * b + 2 * r, &src.d, 2);
    for (int v = 0; v < 4; ++v) std::memcpy(blk + 32 * v + 4 * r, src.scales + 4 * v, 4);
    for (int s = 0; s < 16; ++s) {
      uint8_t* q = blk + kQs + 96 * s + 4 * r;
      const uint8_t* e = u + 16 * s;
      for (int i = 0; i < 4; ++i) {
        q[i] = (uint8_t)(e[i] | (e[8 + i] >> 4) << 6);
        q[32 + i] = (uint8_t)(e[4 + i] | (e[12 + i] >> 4) << 6);
        q[64 + i] = (uint8_t)((e[8 + i] & 0xF) | (e[12 + i] & 0xF) << 4);
      }
    }
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_kquant_avx2_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_K].packed = Packer<Q4KPacked>::kernels();
  t.types[(uint32_t)DType::Q6_K].packed = Packer<Q6KPacked>::kernels();
}

}  // namespace spool::detail
