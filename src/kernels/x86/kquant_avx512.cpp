// AVX-512 (512-bit) gemm tile for Q4_K against Q8_K, the bulk of Q4_K_M
// files: one zmm holds a 64-element chunk (two 32-element sub-blocks: the
// low and high nibbles of 32 packed bytes), matching 64 contiguous Q8_K
// bytes, so each vpdpbusd covers two sub-blocks and one vpmulld applies both
// sub-block scales. The minimums come back through Q8_K's bsums.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/quant_blocks.h"
#include "kernels/fill.h"

namespace spool::detail {
namespace {

using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t);

// Scales (or mins) of sub-blocks 0-7 as 8 bytes from the packed 12.
inline void unpack_k4(const uint8_t* q, uint64_t* sc, uint64_t* m) {
  uint32_t v[3];
  std::memcpy(v, q, 12);
  const uint32_t s[2] = {v[0] & 0x3f3f3f3f, (v[2] & 0x0f0f0f0f) | (((v[0] >> 6) & 0x03030303) << 4)};
  const uint32_t n[2] = {v[1] & 0x3f3f3f3f, ((v[2] >> 4) & 0x0f0f0f0f) | (((v[1] >> 6) & 0x03030303) << 4)};
  std::memcpy(sc, s, 8);
  std::memcpy(m, n, 8);
}

template <int R, int C>
void tile_q4k(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
  __m512 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) acc[i][j] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K* wb[R];
    const BlockQ8_K* ab[C];
    __m512i sc32[R];   // the 8 scales as int32 lanes 0-7
    __m256i mins[R];   // each min twice, as int16 pairs for the bsums
    for (int i = 0; i < R; ++i) {
      wb[i] = reinterpret_cast<const BlockQ4_K*>(w + i * ws) + b;
      uint64_t s8, m8;
      unpack_k4(wb[i]->scales, &s8, &m8);
      sc32[i] = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s8));
      const __m256i m32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
      mins[i] = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
    }
    for (int j = 0; j < C; ++j) ab[j] = reinterpret_cast<const BlockQ8_K*>(a + j * as) + b;
    __m512i sumi[R][C];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) sumi[i][j] = _mm512_setzero_si512();
    for (int q = 0; q < 4; ++q) {
      __m512i av[C];
      for (int j = 0; j < C; ++j) av[j] = _mm512_loadu_si512(ab[j]->qs + 64 * q);
      const __m512i idx = _mm512_setr_epi32(2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q,
                                            2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1,
                                            2 * q + 1, 2 * q + 1, 2 * q + 1);
      for (int i = 0; i < R; ++i) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(wb[i]->qs + 32 * q));
        const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(raw), raw, 1);
        const __m512i u = _mm512_and_si512(_mm512_mask_blend_epi64(0xF0, z, _mm512_srli_epi16(z, 4)), low4);
        const __m512i scale = _mm512_permutexvar_epi32(idx, sc32[i]);
        for (int j = 0; j < C; ++j) {
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, av[j]);
          sumi[i][j] = _mm512_add_epi32(sumi[i][j], _mm512_mullo_epi32(p, scale));
        }
      }
    }
    for (int i = 0; i < R; ++i) {
      const float d = _cvtsh_ss(wb[i]->d), dmin = _cvtsh_ss(wb[i]->dmin);
      for (int j = 0; j < C; ++j) {
        const __m256i mn = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)ab[j]->bsums), mins[i]);
        const __m512 mnf = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(mn));  // upper half zero
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[i][j]), _mm512_set1_ps(d * ab[j]->d), acc[i][j]);
        acc[i][j] = _mm512_fnmadd_ps(mnf, _mm512_set1_ps(dmin * ab[j]->d), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) c[j * ldc + i] = _mm512_reduce_add_ps(acc[i][j]);
}

constexpr int kR = 4, kC = 2;

void gemm_q4k(int64_t n, const void* wv, size_t ws, int nr, const void* av, size_t as, int nc, float* c,
              size_t ldc, VecDotFn single) {
  static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, sizeof...(I)>{&tile_q4k<I / kC + 1, I % kC + 1>...};
  }(std::make_integer_sequence<int, kR * kC>());
  auto* w = static_cast<const uint8_t*>(wv);
  auto* a = static_cast<const uint8_t*>(av);
  if (nc == 1) {  // decode: the per-row kernel streams faster
    for (int i = 0; i < nr; ++i) c[i] = single(n, w + i * ws, a);
    return;
  }
  for (int j = 0; j < nc; j += kC) {
    const int cc = std::min(kC, nc - j);
    for (int i = 0; i < nr; i += kR) {
      const int rr = std::min(kR, nr - i);
      kFns[(rr - 1) * kC + (cc - 1)](n, w + i * ws, ws, a + j * as, as, c + j * ldc + i, ldc);
    }
  }
}

VecDotFn g_q4k_vec_dot = nullptr;

void gemm_q4k_entry(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc, float* c,
                    size_t ldc) {
  gemm_q4k(n, w, ws, nr, a, as, nc, c, ldc, g_q4k_vec_dot);
}

}  // namespace

void fill_kquant_avx512_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::Q4_K];
  g_q4k_vec_dot = k.vec_dot;  // the 256-bit per-row kernel, set just before
  k.gemm_tile = gemm_q4k_entry;
}

}  // namespace spool::detail
