// AVX-512 (512-bit) tiles for the hottest legacy types, Q4_0 and Q8_0 against
// Q8_0: one zmm holds two consecutive blocks of a row, so a vpdpbusd does 64
// multiply-adds and the per-block float work (convert, scale, accumulate) is
// paid once per two blocks. The weight's offset (8, or 128 for Q8_0 made
// unsigned) is folded into the accumulator's start value, computed once per
// activation block. Used for decode too (nc = 1), where several rows per
// micro-tile share the activation-side work.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/quant_blocks.h"
#include "kernels/fill.h"

namespace spool::detail {
namespace {

// [x x8, y x8] from two fp16 scales: per-block scales for the two halves of
// a zmm of int32 sums. One vector conversion and one permute, rather than
// two scalar conversions and broadcasts: this runs once per row per 2 blocks.
inline __m512 two_scales(uint16_t x, uint16_t y) {
  const __m128 f = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(x), y, 1));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

inline __m512i two_blocks_256(const int8_t* p0, const int8_t* p1) {
  const __m256i lo = _mm256_loadu_si256((const __m256i*)p0);
  const __m256i hi = p1 ? _mm256_loadu_si256((const __m256i*)p1) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Unsigned levels of blocks b and b+1 (absent when `two` is false).
inline __m512i levels2(const BlockQ4_0* b, bool two) {
  const __m128i q0 = _mm_loadu_si128((const __m128i*)b[0].qs);
  const __m128i q1 = two ? _mm_loadu_si128((const __m128i*)b[1].qs) : _mm_setzero_si128();
  const __m512i x = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1));
  const __m512i z = _mm512_shuffle_i64x2(x, x, 0x50);  // [q0, q0, q1, q1]
  const __m512i hi = _mm512_srli_epi16(z, 4);
  return _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, z, hi), _mm512_set1_epi8(0x0F));
}
inline __m512i levels2(const BlockQ8_0* b, bool two) {
  return _mm512_xor_si512(two_blocks_256(b[0].qs, two ? b[1].qs : nullptr), _mm512_set1_epi8((char)0x80));
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t);

template <class WB, int kOffset, int R, int C>
void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
  __m512 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) acc[i][j] = _mm512_setzero_ps();
  const __m512i offset = _mm512_set1_epi8((char)kOffset), zero = _mm512_setzero_si512();
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    __m512i av[C], bias[C];
    __m512 ad[C];
    for (int j = 0; j < C; ++j) {
      const BlockQ8_0* ab = reinterpret_cast<const BlockQ8_0*>(a + j * as) + b;
      av[j] = two_blocks_256(ab[0].qs, two ? ab[1].qs : nullptr);
      ad[j] = two_scales(ab[0].d, two ? ab[1].d : 0);
      bias[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, av[j]));
    }
    for (int i = 0; i < R; ++i) {
      const WB* wb = reinterpret_cast<const WB*>(w + i * ws) + b;
      const __m512i u = levels2(wb, two);
      const __m512 wd = two_scales(wb[0].d, two ? wb[1].d : 0);
      for (int j = 0; j < C; ++j) {
        const __m512i p = _mm512_dpbusd_epi32(bias[j], u, av[j]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wd, ad[j]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) c[j * ldc + i] = hsum(acc[i][j]);
}

constexpr int kR = 4, kC = 3;

template <class WB, int kOffset>
void gemm(int64_t n, const void* wv, size_t ws, int nr, const void* av, size_t as, int nc, float* c,
          size_t ldc) {
  static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, sizeof...(I)>{&tile<WB, kOffset, I / kC + 1, I % kC + 1>...};
  }(std::make_integer_sequence<int, kR * kC>());
  auto* w = static_cast<const uint8_t*>(wv);
  auto* a = static_cast<const uint8_t*>(av);
  for (int j = 0; j < nc; j += kC) {
    const int cc = std::min(kC, nc - j);
    for (int i = 0; i < nr; i += kR) {
      const int rr = std::min(kR, nr - i);
      kFns[(rr - 1) * kC + (cc - 1)](n, w + i * ws, ws, a + j * as, as, c + j * ldc + i, ldc);
    }
  }
}

template <class WB, int kOffset>
float vec_dot(int64_t n, const void* w, const void* a) {
  float out;
  tile<WB, kOffset, 1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &out, 1);
  return out;
}

}  // namespace

void fill_legacy_avx512_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_0].gemm_tile = gemm<BlockQ4_0, 8>;
  t.types[(uint32_t)DType::Q4_0].vec_dot = vec_dot<BlockQ4_0, 8>;
  t.types[(uint32_t)DType::Q8_0].gemm_tile = gemm<BlockQ8_0, 128>;
  t.types[(uint32_t)DType::Q8_0].vec_dot = vec_dot<BlockQ8_0, 128>;
}

}  // namespace spool::detail
