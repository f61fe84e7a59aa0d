// Packed AVX-512 VNNI kernel for MXFP4 (prefill gemm and decode gemv alike),
// the Q4_0 layout of x86/packed_legacy_avx512.cpp with e8m0 exponents: a
// group block (16 rows x 32 elements) is the 16 exponent bytes, then the
// nibbles as 4-byte chunks x 16 rows (chunk m in the low nibbles of zmm m,
// chunk m + 4 in its high nibbles, as in the original bytes).
#include <vector>

#include "kernels/ref/mxfp4.h"
#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx512.h"

namespace spool::detail {
namespace {

using namespace packed;

// vpdpbusd multiplies unsigned by signed bytes: the doubled e2m1 values are
// looked up as value + kOffset (0..24) and each block's int sum starts at
// -kOffset * sum(a), from the activation row.
constexpr int kOffset = 12;

// Activation row: packed_act's Q8_0 row (the AVX-512 table's quantizer) with a -kOffset *
// sum bias, 64-byte multiple.
size_t mxfp4_act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 64); }

// 2^(e - 128) for 16 exponent bytes, as mxfp4_half_scale: the float with
// exponent field e - 1, or for e < 2 the subnormal 2^21 << e (x 2^-149).
inline __m512 half_scales(const uint8_t* e8) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)e8));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 is_small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_small, normal, small));
}

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

struct Mxfp4Packed {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = sizeof(BlockMXFP4), kBlockBytes = kRows + 4 * 64;
  static constexpr auto act_bytes = mxfp4_act_bytes;
  static constexpr QuantizeRowFn quantize_act = packed_act::q8_row<kOffset, avx512::quantize_q8_0>;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   __mmask16 mask) {
    const int64_t nb = n / kQK;
    __m512 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    alignas(16) int8_t shifted[16];
    for (int i = 0; i < 16; ++i) shifted[i] = (int8_t)(kMxfp4Values[i] + kOffset);
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)shifted));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      if constexpr (C >= kPrefetchMinTokens) prefetch_weights<(kBlockBytes + 63) / 64>(blk);
      __m512i w[8];
      SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
        const __m512i raw = _mm512_loadu_si512(blk + kRows + 64 * m);
        w[m] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, low4));
        w[m + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
      }
      const __m512 we = half_scales(blk);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as);
        const float* d = reinterpret_cast<const float*>(q + n);
        const int32_t* bias = reinterpret_cast<const int32_t*>(d + nb);
        __m512i sum = _mm512_set1_epi32(bias[b]);
        SPOOL_UNROLL for (int m = 0; m < 8; ++m) sum = _mm512_dpbusd_epi32(sum, w[m], bcast4(q + b * kQK + 4 * m));
        // sum * (scale * d), the reference's order (the scale alone can be
        // near either end of the float range).
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(we, _mm512_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
  }

  // Padding rows keep exponent 0 and nibble 0 (value 0): no contribution.
  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockMXFP4*>(src_block);
    blk[r] = src.e;
    for (int m = 0; m < 4; ++m) std::memcpy(blk + kRows + 64 * m + 4 * r, src.qs + 4 * m, 4);
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_mxfp4_avx512_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::MXFP4].packed = Packer<Mxfp4Packed>::kernels();
}

}  // namespace spool::detail
