// Packed AVX-512 VNNI kernels for Q5_K (the attention / down projections of
// Q5_K_M files): the AVX-512 Q4_K design (x86/packed_kquant_avx512.cpp,
// 16 rows per group, vpdpbusd, scales and mins unpacked to bytes) plus the
// fifth bits, kept as Q5_K stores them (one byte per element position, bit s
// for sub-block s) and merged in at bit 4 with one shift and one ternlog.
#include "kernels/x86/packed_avx512.h"

#include <vector>

// GCC 12 flags the _mm512_undefined_*() pass-through operand inside the
// unmasked conversion intrinsics (cvtepu8, cvtph, cvtepi32_ps) once they are
// inlined this deep: a false positive (x86/packed_kquant_avx512.cpp gets it too).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spool::detail {
namespace {

using namespace packed;

// Prefetch policy of the Q4_K kernels (measured there): none for 2 and 3
// token tiles, where it costs more than it hides.
template <int C>
constexpr bool prefetch_k() { return C == 1 || C >= 4; }


#define SPOOL_UNROLL _Pragma("GCC unroll 16")

// Levels 0..31 of sub-block S from a 4-byte chunk of packed nibbles (low:
// even S, high: odd S) and its fifth-bit bytes h (bit S of each byte). The
// 16-bit shifts move no wanted bit across a byte: bit 4 of a byte comes
// from bit S of the same byte.
template <int S>
inline __m512i level(__m512i raw, __m512i h, __m512i low4, __m512i bit4) {
  const __m512i lo = _mm512_and_si512(S % 2 ? _mm512_srli_epi16(raw, 4) : raw, low4);
  __m512i hi = h;
  if constexpr (S < 4) hi = _mm512_slli_epi16(h, 4 - S);
  if constexpr (S > 4) hi = _mm512_srli_epi16(h, S - 4);
  return _mm512_ternarylogic_epi32(lo, hi, bit4, 0xF8);  // lo | (hi & bit4)
}

// Activation row (as Q4_K): [n int8][nb float d][nb x 8 int16 sums of 32].
// Group super-block (2880 bytes): d[16], dmin[16] fp16; scales[8][16],
// mins[4][16][2] bytes; qs[4][8] zmm: lane r of qs[p][m] = row r's qs bytes
// 32p+4m..+3 (low nibbles: sub-block 2p, high: 2p+1, chunk m); qh[8] zmm:
// lane r of qh[m] = row r's qh bytes 4m..4m+3 (bit s: sub-block s, chunk m).
struct Q5KPacked {
  static constexpr int kTokens = 8;
  static constexpr size_t kScales = 4 * kRows, kMins = kScales + 8 * kRows, kQs = kMins + 8 * kRows;
  static constexpr size_t kQh = kQs + 32 * 64, kSuperBytes = kQh + 8 * 64;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ5_K), kBlockBytes = kSuperBytes;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kSuperBytes; }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 20 * (size_t)(n / kQKK), 64); }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const int64_t nb = n / kQKK;
    const BlockQ8_K* tmp = packing::q8_k_row<avx512::quantize_q8_k>(x, n);  // the table's Q8_K
    auto* q = static_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(q + n);
    auto* sums = reinterpret_cast<int16_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(q + b * kQKK, tmp[b].qs, kQKK);
      d[b] = tmp[b].d;
      for (int s = 0; s < 8; ++s) sums[8 * b + s] = (int16_t)(tmp[b].bsums[2 * s] + tmp[b].bsums[2 * s + 1]);
    }
  }

  // Sub-blocks S0 .. S0+NS-1 (NS = 1, or 2: both nibbles of the same bytes,
  // so that in small tiles every weight load feeds two dots) for every token.
  template <int C, int S0, int NS>
  static void sub_blocks(const uint8_t* blk, const uint8_t* act, size_t as, int64_t b, __m512i (&tot)[C]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    const uint8_t* qs = blk + kQs + (S0 / 2) * 8 * 64;
    __m512i sum[NS][C];
    SPOOL_UNROLL for (int k = 0; k < NS; ++k) {
      SPOOL_UNROLL for (int j = 0; j < C; ++j) sum[k][j] = _mm512_setzero_si512();
    }
    SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
      const __m512i raw = _mm512_loadu_si512(qs + 64 * m), h = _mm512_loadu_si512(blk + kQh + 64 * m);
      __m512i w[NS];
      w[0] = level<S0>(raw, h, low4, bit4);
      if constexpr (NS == 2) w[1] = level<S0 + 1>(raw, h, low4, bit4);
      SPOOL_UNROLL for (int k = 0; k < NS; ++k) {
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK + 32 * (S0 + k) + 4 * m;
          sum[k][j] = _mm512_dpbusd_epi32(sum[k][j], w[k], bcast4(q));
        }
      }
    }
    SPOOL_UNROLL for (int k = 0; k < NS; ++k) {
      const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blk + kScales + 16 * (S0 + k))));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_add_epi32(tot[j], _mm512_mullo_epi32(sum[k][j], scale));
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   __mmask16 mask) {
    constexpr int kNs = C <= 4 ? 2 : 1;  // pairs of sub-blocks while registers allow
    const int64_t nb = n / kQKK;
    __m512 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      if constexpr (prefetch_k<C>()) prefetch_weights<(kSuperBytes + 63) / 64>(blk);
      __m512i tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm512_setzero_si512();
      [&]<int... I>(std::integer_sequence<int, I...>) {
        (sub_blocks<C, I * kNs, kNs>(blk, act, as, b, tot), ...);
      }(std::make_integer_sequence<int, 8 / kNs>());
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
    const auto& src = *reinterpret_cast<const BlockQ5_K*>(src_block);
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
    // Q5_K's qh byte l holds the fifth bits of position l in all 8 sub-blocks.
    for (int m = 0; m < 8; ++m) std::memcpy(blk + kQh + 64 * m + 4 * r, src.qh + 4 * m, 4);
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_q5k_avx512_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q5_K].packed = Packer<Q5KPacked>::kernels();
}

}  // namespace spool::detail
