// Packed AVX-512 VNNI kernel for MXFP4 (prefill gemm and decode gemv alike),
// the Q4_0 layout of x86/packed_legacy_avx512.cpp with e8m0 exponents: a
// group block (16 rows x 32 elements) is the 16 exponent bytes, then the
// nibbles as 4-byte chunks x 16 rows (chunk m in the low nibbles of zmm m,
// chunk m + 4 in its high nibbles, as in the original bytes).
#include <vector>

#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx512.h"

namespace spool::detail {

extern const int8_t kMxfp4Values[16];  // ref/mxfp4.cpp

namespace {

using namespace packed;

QuantizeRowFn g_quantize_q8_0 = nullptr;  // the table's Q8_0 quantizer

// vpdpbusd multiplies unsigned by signed bytes: the doubled e2m1 values are
// looked up as value + kOffset (0..24) and each block's int sum starts at
// -kOffset * sum(a), from the activation row.
constexpr int kOffset = 12;

// Activation row: packed_act's Q8_0 row with a -kOffset * sum bias, 64-byte multiple.
size_t act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 64); }
void quantize_act(const float* x, void* out, int64_t n) { packed_act::q8_row<kOffset>(g_quantize_q8_0, x, out, n); }

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
  static constexpr size_t kBlockBytes = kRows + 4 * 64;
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

  static size_t packed_bytes(int64_t n_rows, int64_t n_cols) {
    return (size_t)n_groups(n_rows) * group_bytes(n_cols);
  }

  // Padding rows keep exponent 0 and nibble 0 (value 0): no contribution.
  static void pack(const void* w, size_t ws, int64_t n_rows, int64_t n_cols, void* out) {
    auto* dst = static_cast<uint8_t*>(out);
    std::memset(dst, 0, packed_bytes(n_rows, n_cols));
    for (int64_t g = 0; g < n_groups(n_rows); ++g) {
      for (int r = 0; r < kRows && g * kRows + r < n_rows; ++r) {
        const auto* row = reinterpret_cast<const BlockMXFP4*>(static_cast<const uint8_t*>(w) + (g * kRows + r) * ws);
        for (int64_t b = 0; b < n_cols / kQK; ++b) {
          uint8_t* blk = dst + g * group_bytes(n_cols) + b * kBlockBytes;
          blk[r] = row[b].e;
          for (int m = 0; m < 4; ++m) std::memcpy(blk + kRows + 64 * m + 4 * r, row[b].qs + 4 * m, 4);
        }
      }
    }
  }

  static PackedKernels kernels() {
    PackedKernels k;
    k.rows = kRows;
    k.packed_bytes = packed_bytes;
    k.pack = pack;
    k.act_bytes = act_bytes;
    k.quantize_act = quantize_act;
    k.gemm = gemm_groups<Mxfp4Packed>;
    return k;
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_mxfp4_avx512_kernels(KernelTable& t) {
  g_quantize_q8_0 = t.types[(uint32_t)DType::Q8_0].quantize;  // set by fill_x86_table
  t.types[(uint32_t)DType::MXFP4].packed = Mxfp4Packed::kernels();
}

}  // namespace spool::detail
