// Packed AVX-512 VNNI kernels for Q4_K and Q6_K, the bulk of Q4_K_M files.
// Per super-block (256 elements) a 16-row group holds the row scales as fp16
// and the sub-block scales unpacked to one byte per (sub-block, row), then
// the levels as 4-byte chunks x 16 rows (see x86/packed_avx512.h). Each
// sub-block's int sums are scaled with one vpmulld; Q4_K's minimums come
// from per-32 activation sums through vpdpwssd, Q6_K's offset of 32 from
// per-16 activation sums folded into each sub-block's start value.
#include "kernels/x86/packed_avx512.h"

#include <vector>

namespace spool::detail {
namespace {

// K-quant super blocks are large: with 2 or 3 rows the prefetches cost more
// than they hide (Q4_K over 0.5 GB, 2 threads: 2 rows 11.3 -> 13.9 ms, 3 rows
// 12.7 -> 13.2 ms); from 4 rows they pay (4: 16.5 -> 14.3, 8: 31.0 -> 20.9).
// One row (decode) gains too: packed over unpacked, 1 token, 260 MB Q4_K /
// 378 MB Q6_K, 2 threads, three alternating runs on a shared Xeon: 1.49-1.55x
// / 1.34-1.37x without, 1.76-1.88x / 1.91-2.04x with (2026-12-03).
template <int C>
constexpr bool prefetch_k() { return C == 1 || C >= 4; }

using namespace packed;

// The AVX-512 table's Q8_K quantization of a row, in a per-thread buffer.
constexpr auto quantize_q8_k_tmp = packing::q8_k_row<avx512::quantize_q8_k>;

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

// ---- Q4_K ------------------------------------------------------------------------
// Activation row: [n int8][nb float d][nb x 8 int16 sums of 32]. Group
// super-block: Q4KLayout (x86/packed_avx512.h).
struct Q4KPacked : Q4KLayout {
  static constexpr int kTokens = 8;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ4_K), kBlockBytes = kSuperBytes;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kSuperBytes; }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 20 * (size_t)(n / kQKK), 64); }

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

  // Small tiles (decode): both sub-blocks of each packed byte at once, so
  // every weight load feeds two dots.
  template <int C>
  static void sub_block_pairs(const uint8_t* blk, const uint8_t* act, size_t as, int64_t b, __m512i (&tot)[C]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const uint8_t* qs = blk + kQs + p * 8 * 64;
      __m512i lo[C], hi[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
      SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
        const __m512i raw = _mm512_loadu_si512(qs + 64 * m);
        const __m512i wl = _mm512_and_si512(raw, low4), wh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 64 * p + 4 * m;
          lo[j] = _mm512_dpbusd_epi32(lo[j], wl, bcast4(q));
          hi[j] = _mm512_dpbusd_epi32(hi[j], wh, bcast4(q + 32));
        }
      }
      const __m512i sl = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blk + kScales + 32 * p)));
      const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blk + kScales + 32 * p + 16)));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        tot[j] = _mm512_add_epi32(tot[j], _mm512_mullo_epi32(lo[j], sl));
        tot[j] = _mm512_add_epi32(tot[j], _mm512_mullo_epi32(hi[j], sh));
      }
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   __mmask16 mask) {
    const int64_t nb = n / kQKK;
    __m512 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      if constexpr (prefetch_k<C>()) prefetch_weights<(kSuperBytes + 63) / 64>(blk);
      __m512i tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_setzero_si512();
      if constexpr (C <= 4) {
        sub_block_pairs<C>(blk, act, as, b, tot);
      } else for (int s = 0; s < 8; ++s) {
        const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blk + kScales + 16 * s)));
        const uint8_t* qs = blk + kQs + (s / 2) * 8 * 64;
        const int shift = (s & 1) * 4;
        __m512i sum[C];
        SPOOL_UNROLL for (int j = 0; j < C; ++j) sum[j] = _mm512_setzero_si512();
        SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
          const __m512i raw = _mm512_loadu_si512(qs + 64 * m);
          const __m512i w = _mm512_and_si512(_mm512_srl_epi16(raw, _mm_cvtsi32_si128(shift)), low4);
          SPOOL_UNROLL for (int j = 0; j < C; ++j) {
            const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 32 * s + 4 * m;
            sum[j] = _mm512_dpbusd_epi32(sum[j], w, bcast4(q));
          }
        }
        SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_add_epi32(tot[j], _mm512_mullo_epi32(sum[j], scale));
      }
      const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
      const __m512 wdmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 2 * kRows)));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as);
        const float* d = reinterpret_cast<const float*>(q + n);
        const int16_t* sums = reinterpret_cast<const int16_t*>(d + nb) + 8 * b;
        __m512i mins = _mm512_setzero_si512();
        SPOOL_UNROLL for (int p = 0; p < 4; ++p) {
          const __m512i m16 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(blk + kMins + 32 * p)));
          mins = _mm512_dpwssd_epi32(mins, m16, bcast4(sums + 2 * p));
        }
        const __m512 ad = _mm512_set1_ps(d[b]);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[j]), _mm512_mul_ps(wd, ad), acc[j]);
        acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(wdmin, ad), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ4_K*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    std::memcpy(blk + 2 * kRows + 2 * r, &src.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      unpack_scale_min_k4(s, src.scales, &sc, &m);
      blk[kScales + 16 * s + r] = sc;
      blk[kMins + 32 * (s / 2) + 2 * r + (s & 1)] = m;
    }
    for (int p = 0; p < 4; ++p)
      for (int m = 0; m < 8; ++m) std::memcpy(blk + kQs + (8 * p + m) * 64 + 4 * r, src.qs + 32 * p + 4 * m, 4);
  }
};

// ---- Q6_K ------------------------------------------------------------------------
// Activation row: [n int8][nb float d][nb x 16 int32: -32 * sum of each 16].
// Group super-block: Q6KLayout (x86/packed_avx512.h).
struct Q6KPacked : Q6KLayout {
  static constexpr int kTokens = 8;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ6_K), kBlockBytes = kSuperBytes;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kSuperBytes; }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 68 * (size_t)(n / kQKK), 64); }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const int64_t nb = n / kQKK;
    const BlockQ8_K* y = quantize_q8_k_tmp(x, n);
    auto* q = static_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(q + n);
    auto* bias = reinterpret_cast<int32_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(q + b * kQKK, y[b].qs, kQKK);
      d[b] = y[b].d;
      for (int s = 0; s < 16; ++s) bias[16 * b + s] = -32 * y[b].bsums[s];
    }
  }

  // Levels (0..63) of chunks 16k + 4 s4 + q, q = 0..3, for the given k.
  template <int K>
  static __m512i chunk(const uint8_t* blk, int s4, int q, __m512i low4, __m512i top2) {
    const int c = 16 * K + 4 * s4 + q;
    const __m512i ql = _mm512_loadu_si512(blk + kQl + 64 * (c % 32));
    const __m512i lo = K < 2 ? _mm512_and_si512(ql, low4) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4);
    const __m512i qh = _mm512_loadu_si512(blk + kQh + 64 * (c % 16));
    const __m512i hi = K == 0 ? _mm512_slli_epi16(qh, 4) : K == 1 ? _mm512_slli_epi16(qh, 2)
                     : K == 2 ? qh : _mm512_srli_epi16(qh, 2);
    return _mm512_ternarylogic_epi32(lo, hi, top2, 0xF8);  // lo | (hi & top2)
  }

  template <int C, int K>
  static void quarter(int64_t n, const uint8_t* blk, const uint8_t* act, size_t as, int64_t b, int64_t nb,
                      __m512i (&tot)[C]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
    for (int s4 = 0; s4 < 4; ++s4) {
      const int s = 4 * K + s4;
      const __m512i scale = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(blk + kScales + 16 * s)));
      __m512i sum[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const auto* bias = reinterpret_cast<const int32_t*>(act + j * as + n + 4 * nb);
        sum[j] = _mm512_set1_epi32(bias[16 * b + s]);
      }
      SPOOL_UNROLL for (int q = 0; q < 4; ++q) {
        const __m512i w = chunk<K>(blk, s4, q, low4, top2);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const int8_t* a = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 16 * s + 4 * q;
          sum[j] = _mm512_dpbusd_epi32(sum[j], w, bcast4(a));
        }
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_add_epi32(tot[j], _mm512_mullo_epi32(sum[j], scale));
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   __mmask16 mask) {
    const int64_t nb = n / kQKK;
    __m512 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      if constexpr (prefetch_k<C>()) prefetch_weights<(kSuperBytes + 63) / 64>(blk);
      __m512i tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_setzero_si512();
      quarter<C, 0>(n, blk, act, as, b, nb, tot);
      quarter<C, 1>(n, blk, act, as, b, nb, tot);
      quarter<C, 2>(n, blk, act, as, b, nb, tot);
      quarter<C, 3>(n, blk, act, as, b, nb, tot);
      const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float* d = reinterpret_cast<const float*>(act + j * as + n);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[j]), _mm512_mul_ps(wd, _mm512_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
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
    std::memcpy(blk + 2 * r, &src.d, 2);
    for (int s = 0; s < 16; ++s) blk[kScales + 16 * s + r] = (uint8_t)src.scales[s];
    for (int c = 0; c < 64; ++c) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t v = u[4 * c + i];
        uint8_t& l = blk[kQl + 64 * (c % 32) + 4 * r + i];
        l = (uint8_t)(l | ((v & 0xF) << (c < 32 ? 0 : 4)));
        uint8_t& h = blk[kQh + 64 * (c % 16) + 4 * r + i];
        h = (uint8_t)(h | ((v >> 4) << (2 * (c / 16))));
      }
    }
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_kquant_avx512_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_K].packed = Packer<Q4KPacked>::kernels();
  t.types[(uint32_t)DType::Q6_K].packed = Packer<Q6KPacked>::kernels();
}

namespace avx512 {

void packed_gemm_q4_k(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc) {
  packed::gemm_groups<Q4KPacked>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
}
void packed_gemm_q6_k(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc) {
  packed::gemm_groups<Q6KPacked>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
}

}  // namespace avx512

}  // namespace spool::detail
