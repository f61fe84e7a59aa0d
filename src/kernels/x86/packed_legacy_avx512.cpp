// Packed AVX-512 VNNI kernels for Q4_0 and Q8_0 (prefill gemm and decode
// gemv alike). A group block (16 rows x 32 elements) is 16 fp16 scales then
// 8 chunks of 4 elements x 16 rows: Q4_0 keeps nibbles (chunk m in the low
// nibbles of zmm m, chunk m+4 in its high nibbles, as in the original
// bytes), Q8_0 stores w + 128. Activation rows: int8 levels, one float scale
// per block and -offset * sum(levels) per block, the start of each int sum.
#include <vector>

#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx512.h"

namespace spool::detail {
namespace {

using namespace packed;

// Activation row: packed_act's Q8_0 row (the AVX-512 table's quantizer) with
// a -kOffset * sum bias, 64-byte multiple.
size_t legacy_act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 64); }

// kNibbles: Q4_0 (4 zmm of nibbles per block), else Q8_0 (8 zmm of bytes).
template <bool kNibbles>
struct LegacyPacked {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kOffset = kNibbles ? 8 : 128;
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = kNibbles ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  static constexpr size_t kBlockBytes = 2 * kRows + (kNibbles ? 4 : 8) * 64;
  static constexpr auto act_bytes = legacy_act_bytes;
  static constexpr QuantizeRowFn quantize_act = packed_act::q8_row<kOffset, avx512::quantize_q8_0>;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   __mmask16 mask) {
    const int64_t nb = n / kQK;
    __m512 acc[C];
    #pragma GCC unroll 16
    for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      if constexpr (C >= kPrefetchMinTokens) prefetch_weights<(kBlockBytes + 63) / 64>(blk);
      const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
      __m512i w[8];
      if constexpr (kNibbles) {
        #pragma GCC unroll 16
        for (int m = 0; m < 4; ++m) {
          const __m512i raw = _mm512_loadu_si512(blk + 2 * kRows + 64 * m);
          w[m] = _mm512_and_si512(raw, low4);
          w[m + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        }
      } else {
        #pragma GCC unroll 16
        for (int m = 0; m < 8; ++m) w[m] = _mm512_loadu_si512(blk + 2 * kRows + 64 * m);
      }
      #pragma GCC unroll 16
      for (int j = 0; j < C; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as);
        const float* d = reinterpret_cast<const float*>(q + n);
        const int32_t* bias = reinterpret_cast<const int32_t*>(d + nb);
        __m512i sum = _mm512_set1_epi32(bias[b]);
        #pragma GCC unroll 16
        for (int m = 0; m < 8; ++m) sum = _mm512_dpbusd_epi32(sum, w[m], bcast4(q + b * kQK + 4 * m));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wd, _mm512_set1_ps(d[b])), acc[j]);
      }
    }
    #pragma GCC unroll 16
    for (int j = 0; j < C; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
  }

  // Padding rows get zero scales (and level 0), so they contribute nothing.
  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    uint8_t* qs = blk + 2 * kRows;
    if constexpr (kNibbles) {
      const auto& src = *reinterpret_cast<const BlockQ4_0*>(src_block);
      std::memcpy(blk + 2 * r, &src.d, 2);
      for (int m = 0; m < 4; ++m) std::memcpy(qs + 64 * m + 4 * r, src.qs + 4 * m, 4);
    } else {
      const auto& src = *reinterpret_cast<const BlockQ8_0*>(src_block);
      std::memcpy(blk + 2 * r, &src.d, 2);
      for (int m = 0; m < 8; ++m)
        for (int i = 0; i < 4; ++i) qs[64 * m + 4 * r + i] = (uint8_t)(src.qs[4 * m + i] ^ 0x80);
    }
  }
};

}  // namespace

void fill_packed_legacy_avx512_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_0].packed = Packer<LegacyPacked<true>>::kernels();
  t.types[(uint32_t)DType::Q8_0].packed = Packer<LegacyPacked<false>>::kernels();
}

namespace avx512 {

void packed_gemm_q4_0(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc) {
  packed::gemm_groups<LegacyPacked<true>>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
}
void packed_gemm_q8_0(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc) {
  packed::gemm_groups<LegacyPacked<false>>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
}

}  // namespace avx512

}  // namespace spool::detail
