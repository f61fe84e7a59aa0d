// Packed AVX2 kernel for MXFP4 (prefill gemm and decode gemv alike), the
// Q4_0 layout of x86/packed_legacy_avx2.cpp with e8m0 exponents: a group
// block (8 rows x 32 elements) is the 8 exponent bytes, then the nibbles as
// 4-byte chunks x 8 rows (chunk m in the low nibbles of ymm m, chunk m + 4 in
// its high nibbles, as in the original bytes).
#include <vector>

#include "kernels/ref/mxfp4.h"
#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx2.h"

namespace spool::detail {
namespace {

using namespace packed2;

// The doubled e2m1 values are looked up as value + kOffset (0..24, maddubs's
// unsigned side) and each block's int sum starts at -kOffset * sum(a). Cheaper
// than maddubs(|w|, a with w's sign), which costs a psignb per chunk and token;
// the price is an int16 pair sum of 2 x 24 x 127, so only 4 chunks (elements
// 0-7 and 16-23, then 8-15 and 24-31) are summed in int16 before widening.
constexpr int kOffset = 12;

// Activation row: packed_act's Q8_0 row (the AVX2 table's quantizer) with a -kOffset *
// sum bias, 32-byte multiple.
size_t mxfp4_act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 32); }

// 2^(e - 128) for 8 exponent bytes, as mxfp4_half_scale: the float with
// exponent field e - 1, or for e < 2 the subnormal 2^21 << e (x 2^-149).
inline __m256 half_scales(const uint8_t* e8) {
  int64_t raw;
  std::memcpy(&raw, e8, 8);
  const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(raw));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small));
}

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

struct Mxfp4Packed {
  static constexpr int kTokens = 4;  // activation rows per micro-tile (16 ymm registers)
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = sizeof(BlockMXFP4), kBlockBytes = kRows + 4 * 32;
  static constexpr auto act_bytes = mxfp4_act_bytes;
  static constexpr QuantizeRowFn quantize_act = packed_act::q8_row<kOffset, avx2::quantize_q8_0>;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    const int64_t nb = n / kQK;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    alignas(16) int8_t shifted[16];
    for (int i = 0; i < 16; ++i) shifted[i] = (int8_t)(kMxfp4Values[i] + kOffset);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)shifted));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      if constexpr (C >= kPrefetchMinTokens) prefetch_weights<(kBlockBytes + 63) / 64>(blk);
      __m256i sum[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int32_t* bias = reinterpret_cast<const int32_t*>(act + j * as + n + 4 * nb);
        sum[j] = _mm256_set1_epi32(bias[b]);
      }
      SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
        __m256i s16[C];
        SPOOL_UNROLL for (int k = 0; k < 2; ++k) {
          const int m = 2 * h + k;
          const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk + kRows + 32 * m));
          const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, low4));
          const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
          SPOOL_UNROLL for (int j = 0; j < C; ++j) {
            const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as) + b * kQK;
            const __m256i p = _mm256_add_epi16(mul_u8s8(lo, bcast4(q + 4 * m)), mul_u8s8(hi, bcast4(q + 16 + 4 * m)));
            s16[j] = k == 0 ? p : _mm256_add_epi16(s16[j], p);
          }
        }
        SPOOL_UNROLL for (int j = 0; j < C; ++j) sum[j] = _mm256_add_epi32(sum[j], widen(s16[j]));
      }
      // sum * (scale * d), the reference's order (the scale alone can be
      // near either end of the float range).
      const __m256 we = half_scales(blk);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float* d = reinterpret_cast<const float*>(act + j * as + n);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j]), _mm256_mul_ps(we, _mm256_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  // Padding rows keep exponent 0 and nibble 0 (value 0): no contribution.
  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockMXFP4*>(src_block);
    blk[r] = src.e;
    for (int m = 0; m < 4; ++m) std::memcpy(blk + kRows + 32 * m + 4 * r, src.qs + 4 * m, 4);
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_mxfp4_avx2_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::MXFP4].packed = Packer<Mxfp4Packed>::kernels();
}

}  // namespace spool::detail
