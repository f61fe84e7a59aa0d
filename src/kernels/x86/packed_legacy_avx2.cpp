// Packed AVX2 kernels for Q4_0 and Q8_0 (prefill gemm and decode gemv alike),
// the AVX-512 layout (x86/packed_legacy_avx512.cpp) at 8 rows per group.
// A group block (8 rows x 32 elements) is 8 fp16 scales, then the levels as
// 4-byte chunks x 8 rows. Q4_0 keeps its nibbles (chunk m in the low nibbles
// of ymm m, chunk m+4 in its high nibbles, as in the original bytes) and
// uses level - 8: maddubs of the 0..15 levels, eight of them summed in int16
// (8 x 2 x 15 x 127 fits), the -8 * sum(a) start value from the activation
// row. Q8_0 keeps signed levels: maddubs(|w|, a with w's sign), as 0..255
// levels would overflow maddubs's int16 pairs.
#include <vector>

#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx2.h"

namespace spool::detail {
namespace {

using namespace packed2;

// Activation row: packed_act's Q8_0 row (the AVX2 table's quantizer) with a
// -kOffset * sum bias, 32-byte multiple.
size_t legacy_act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 32); }
template <int kOffset>
constexpr QuantizeRowFn legacy_quantize_act = packed_act::q8_row<kOffset, avx2::quantize_q8_0>;

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

struct ActRow {  // one converted activation row
  const int8_t* q;
  const float* d;
  const int32_t* bias;
  ActRow(const uint8_t* p, int64_t n) {
    q = reinterpret_cast<const int8_t*>(p);
    d = reinterpret_cast<const float*>(q + n);
    bias = reinterpret_cast<const int32_t*>(d + n / kQK);
  }
};

struct Q4_0Packed {
  static constexpr int kTokens = 4;  // activation rows per micro-tile (16 ymm registers)
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ4_0), kBlockBytes = 2 * kRows + 4 * 32;
  static constexpr auto act_bytes = legacy_act_bytes;
  static constexpr QuantizeRowFn quantize_act = legacy_quantize_act<8>;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    const int64_t nb = n / kQK;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      if constexpr (C >= kPrefetchMinTokens) prefetch_weights<(kBlockBytes + 63) / 64>(blk);
      __m256i sum[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) sum[j] = _mm256_setzero_si256();
      SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk + 2 * kRows + 32 * m));
        const __m256i lo = _mm256_and_si256(raw, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQK;
          const __m256i p = _mm256_add_epi16(mul_u8s8(lo, bcast4(q + 4 * m)), mul_u8s8(hi, bcast4(q + 16 + 4 * m)));
          sum[j] = _mm256_add_epi16(sum[j], p);
        }
      }
      const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const ActRow a(act + j * as, n);
        const __m256i s32 = _mm256_add_epi32(widen(sum[j]), _mm256_set1_epi32(a.bias[b]));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(wd, _mm256_set1_ps(a.d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ4_0*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    for (int m = 0; m < 4; ++m) std::memcpy(blk + 2 * kRows + 32 * m + 4 * r, src.qs + 4 * m, 4);
  }
};

struct Q8_0Packed {
  static constexpr int kTokens = 4;
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ8_0), kBlockBytes = 2 * kRows + 8 * 32;
  static constexpr auto act_bytes = legacy_act_bytes;
  static constexpr QuantizeRowFn quantize_act = legacy_quantize_act<0>;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    const int64_t nb = n / kQK;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      if constexpr (C >= kPrefetchMinTokens) prefetch_weights<(kBlockBytes + 63) / 64>(blk);
      __m256i sum[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) sum[j] = _mm256_setzero_si256();
      // |w| x (a with w's sign): each maddubs pair is at most 2 x 128 x 127,
      // so every chunk is widened to int32 on its own.
      SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
        const __m256i w = _mm256_loadu_si256((const __m256i*)(blk + 2 * kRows + 32 * m));
        const __m256i u = _mm256_sign_epi8(w, w);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQK + 4 * m;
          sum[j] = _mm256_add_epi32(sum[j], widen(mul_u8s8(u, _mm256_sign_epi8(bcast4(q), w))));
        }
      }
      const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const ActRow a(act + j * as, n);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j]), _mm256_mul_ps(wd, _mm256_set1_ps(a.d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ8_0*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    for (int m = 0; m < 8; ++m) std::memcpy(blk + 2 * kRows + 32 * m + 4 * r, src.qs + 4 * m, 4);
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_legacy_avx2_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_0].packed = Packer<Q4_0Packed>::kernels();
  t.types[(uint32_t)DType::Q8_0].packed = Packer<Q8_0Packed>::kernels();
}

}  // namespace spool::detail
