// Packed AVX-512 VNNI kernels for Q4_0 and Q8_0 (prefill gemm and decode
// gemv alike). A group block (16 rows x 32 elements) is 16 fp16 scales then
// 8 chunks of 4 elements x 16 rows: Q4_0 keeps nibbles (chunk m in the low
// nibbles of zmm m, chunk m+4 in its high nibbles, as in the original
// bytes), Q8_0 stores w + 128. Activation rows: int8 levels, one float scale
// per block and -offset * sum(levels) per block, the start of each int sum.
#include "kernels/x86/packed_act.h"
#include "kernels/x86/packed_avx512.h"

#include <vector>

namespace spool::detail {
namespace {

using namespace packed;

QuantizeRowFn g_quantize_q8_0 = nullptr;  // the table's Q8_0 quantizer

// Activation row: packed_act's Q8_0 row with a -kOffset * sum bias, 64-byte multiple.
size_t act_bytes(int64_t n) { return packed_act::q8_row_bytes(n, 64); }
template <int kOffset>
void quantize_act(const float* x, void* out, int64_t n) { packed_act::q8_row<kOffset>(g_quantize_q8_0, x, out, n); }

// kNibbles: Q4_0 (4 zmm of nibbles per block), else Q8_0 (8 zmm of bytes).
template <bool kNibbles>
struct LegacyPacked {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kOffset = kNibbles ? 8 : 128;
  static constexpr size_t kBlockBytes = 2 * kRows + (kNibbles ? 4 : 8) * 64;
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

  static size_t packed_bytes(int64_t n_rows, int64_t n_cols) {
    return (size_t)n_groups(n_rows) * group_bytes(n_cols);
  }

  // Padding rows get zero scales (and level 0), so they contribute nothing.
  static void pack(const void* w, size_t ws, int64_t n_rows, int64_t n_cols, void* out) {
    const int64_t nb = n_cols / kQK;
    auto* dst = static_cast<uint8_t*>(out);
    std::memset(dst, 0, packed_bytes(n_rows, n_cols));
    for (int64_t g = 0; g < n_groups(n_rows); ++g) {
      for (int r = 0; r < kRows && g * kRows + r < n_rows; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w) + (g * kRows + r) * ws;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t* blk = dst + g * group_bytes(n_cols) + b * kBlockBytes;
          uint8_t* qs = blk + 2 * kRows;
          if constexpr (kNibbles) {
            const auto& src = reinterpret_cast<const BlockQ4_0*>(row)[b];
            std::memcpy(blk + 2 * r, &src.d, 2);
            for (int m = 0; m < 4; ++m) std::memcpy(qs + 64 * m + 4 * r, src.qs + 4 * m, 4);
          } else {
            const auto& src = reinterpret_cast<const BlockQ8_0*>(row)[b];
            std::memcpy(blk + 2 * r, &src.d, 2);
            for (int m = 0; m < 8; ++m)
              for (int i = 0; i < 4; ++i) qs[64 * m + 4 * r + i] = (uint8_t)(src.qs[4 * m + i] ^ 0x80);
          }
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
    k.quantize_act = quantize_act<kOffset>;
    k.gemm = gemm_groups<LegacyPacked>;
    return k;
  }
};

}  // namespace

void fill_packed_legacy_avx512_kernels(KernelTable& t) {
  g_quantize_q8_0 = t.types[(uint32_t)DType::Q8_0].quantize;  // set by fill_x86_table
  t.types[(uint32_t)DType::Q4_0].packed = LegacyPacked<true>::kernels();
  t.types[(uint32_t)DType::Q8_0].packed = LegacyPacked<false>::kernels();
}

}  // namespace spool::detail
