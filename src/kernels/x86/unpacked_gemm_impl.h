// x86 gemm tiles: R weight rows x C activation rows per micro-tile, so each
// weight block is unpacked once and used C times and each activation block
// is loaded once and used R times. Compiled twice like x86/unpacked_impl.h;
// SPOOL_TILE_R / SPOOL_TILE_C pick the micro-tile (AVX-512 has 32 vector
// registers and takes bigger tiles). Edges use smaller instantiations.
#pragma once

#include <array>

#include "kernels/x86/unpacked_kquant_impl.h"

#ifndef SPOOL_TILE_R
#error "define SPOOL_TILE_R and SPOOL_TILE_C before including x86/unpacked_gemm_impl.h"
#endif

namespace spool::detail {
namespace {

using TileFn = void (*)(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                        float* c, size_t ldc);

// Runs Kernel::tile<R, C> over the whole nr x nc output, full tiles first.
// With kSingle set, one activation row (decode) goes through that vec_dot
// instead: for the K-quants the per-row kernel streams faster than a tile.
template <class Kernel, int kR, int kC, VecDotFn kSingle = nullptr>
void gemm_tiled(int64_t n, const void* wv, size_t ws, int nr, const void* av, size_t as, int nc,
                float* c, size_t ldc) {
  if constexpr (kSingle != nullptr) {
    if (nc == 1) {
      for (int i = 0; i < nr; ++i) c[i] = kSingle(n, (const uint8_t*)wv + i * ws, av);
      return;
    }
  }
  static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, sizeof...(I)>{&Kernel::template tile<I / kC + 1, I % kC + 1>...};
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

template <int R, int C>
inline void store_tile(__m256 (&acc)[R][C], float* c, size_t ldc) {
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < C; ++j) c[j * ldc + i] = hsum(acc[i][j]);
  }
}

// ---- float weights -----------------------------------------------------------------

struct FloatTile {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    for (int64_t k = 0; k < n; k += 8) {
      __m256 av[C];
      for (int j = 0; j < C; ++j) av[j] = _mm256_loadu_ps((const float*)(a + j * as) + k);
      for (int i = 0; i < R; ++i) {
        const __m256 wv = _mm256_loadu_ps((const float*)(w + i * ws) + k);
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(wv, av[j], acc[i][j]);
      }
    }
    store_tile<R, C>(acc, c, ldc);
  }
};
// F16 weights: converted 8 at a time with F16C, activations stay float.
struct HalfTile {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    for (int64_t k = 0; k < n; k += 8) {
      __m256 av[C];
      for (int j = 0; j < C; ++j) av[j] = _mm256_loadu_ps((const float*)(a + j * as) + k);
      for (int i = 0; i < R; ++i) {
        const __m256 wv = load_f16x8((const uint16_t*)(w + i * ws) + k);
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_fmadd_ps(wv, av[j], acc[i][j]);
      }
    }
    store_tile<R, C>(acc, c, ldc);
  }
};

// ---- legacy block types against Q8_0 -----------------------------------------------

// Levels of a weight block as unsigned bytes; value = level - kOffset.
inline __m256i levels(const BlockQ4_0& b) { return unpack_nibbles(b.qs); }
inline __m256i levels(const BlockQ5_0& b) { return _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh)); }
inline __m256i levels(const BlockQ8_0& b) {
  return _mm256_xor_si256(loadu256(b.qs), _mm256_set1_epi8((char)0x80));  // w + 128
}

// With VNNI the offset is folded into the accumulator's start value
// (-offset * sum(a), once per activation block); maddubs cannot take
// Q8_0's 0..255 levels without overflow, so AVX2 uses the sign trick there.
template <class WB, int kOffset>
struct LegacyTile {
  static constexpr bool kSignTrick = !SPOOL_VNNI && kOffset == 128;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    const __m256i offset = _mm256_set1_epi8((char)kOffset), zero = _mm256_setzero_si256();
    for (int64_t b = 0; b < n / kQK; ++b) {
      __m256i av[C], bias[C];
      __m256 ad[C];
      for (int j = 0; j < C; ++j) {
        const BlockQ8_0& ab = reinterpret_cast<const BlockQ8_0*>(a + j * as)[b];
        av[j] = loadu256(ab.qs);
        ad[j] = _mm256_set1_ps(fp16(ab.d));
        if constexpr (!kSignTrick) bias[j] = _mm256_sub_epi32(zero, dot_u8s8(zero, offset, av[j]));
      }
      for (int i = 0; i < R; ++i) {
        const WB& wb = reinterpret_cast<const WB*>(w + i * ws)[b];
        const __m256 wd = _mm256_set1_ps(fp16(wb.d));
        if constexpr (kSignTrick) {
          const __m256i q = loadu256(reinterpret_cast<const BlockQ8_0&>(wb).qs);
          const __m256i u = _mm256_sign_epi8(q, q);
          for (int j = 0; j < C; ++j) {
            const __m256i p = dot_u8s8(zero, u, _mm256_sign_epi8(av[j], q));
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wd, ad[j]), acc[i][j]);
          }
        } else {
          const __m256i u = levels(wb);
          for (int j = 0; j < C; ++j) {
            const __m256i p = dot_u8s8(bias[j], u, av[j]);
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wd, ad[j]), acc[i][j]);
          }
        }
      }
    }
    store_tile<R, C>(acc, c, ldc);
  }
};

// ---- legacy block types with a minimum (Q4_1, Q5_1) against Q8_1 -------------------

inline __m256i levels(const BlockQ4_1& b) { return unpack_nibbles(b.qs); }
inline __m256i levels(const BlockQ5_1& b) { return _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh)); }

// Per block: d_w * d_a * sum(level * a) in the vector accumulator, m_w * s_a
// (s_a = d_a * sum(a)) in a float one, in vec_dot_q4_1 / vec_dot_q5_1's order,
// so a token's result is the same in a tile as alone.
template <class WB>
struct MinTile {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    float mins[R][C] = {};
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t b = 0; b < n / kQK; ++b) {
      __m256i av[C];
      float ad[C], sa[C];
      for (int j = 0; j < C; ++j) {
        const BlockQ8_1& ab = reinterpret_cast<const BlockQ8_1*>(a + j * as)[b];
        av[j] = loadu256(ab.qs);
        ad[j] = fp16(ab.d);
        sa[j] = fp16(ab.s);
      }
      for (int i = 0; i < R; ++i) {
        const WB& wb = reinterpret_cast<const WB*>(w + i * ws)[b];
        const float wd = fp16(wb.d), wm = fp16(wb.m);
        const __m256i u = levels(wb);
        for (int j = 0; j < C; ++j) {
          const __m256i p = dot_u8s8(zero, u, av[j]);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * ad[j]), acc[i][j]);
          mins[i][j] += wm * sa[j];
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) c[j * ldc + i] = hsum(acc[i][j]) + mins[i][j];
  }
};

// ---- K-quants against Q8_K ---------------------------------------------------------

// Per super-block: integer sums per (row, activation) over the 8 chunks of
// 32, then one float update with the super-block scales and the minimums.
struct TileQ4K {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const BlockQ4_K* wb[R];
      const BlockQ8_K* ab[C];
      ScalesK4 s[R];
      for (int i = 0; i < R; ++i) {
        wb[i] = reinterpret_cast<const BlockQ4_K*>(w + i * ws) + b;
        s[i] = unpack_k4(wb[i]->scales);
      }
      for (int j = 0; j < C; ++j) ab[j] = reinterpret_cast<const BlockQ8_K*>(a + j * as) + b;
      __m256i sumi[R][C] = {};
      for (int q = 0; q < 8; ++q) {
        __m256i av[C];
        for (int j = 0; j < C; ++j) av[j] = loadu256(ab[j]->qs + 32 * q);
        for (int i = 0; i < R; ++i) {
          const __m256i raw = loadu256(wb[i]->qs + 32 * (q / 2));
          const __m256i u = (q & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4) : _mm256_and_si256(raw, low4);
          for (int j = 0; j < C; ++j) sumi[i][j] = dot_scaled(sumi[i][j], u, av[j], s[i].sc[q], s[i].sc[q]);
        }
      }
      for (int i = 0; i < R; ++i) {
        const float d = fp16(wb[i]->d), dmin = fp16(wb[i]->dmin);
        for (int j = 0; j < C; ++j) {
          const __m256i mins = mins_dot_bsums(s[i].m, ab[j]->bsums);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i][j]), _mm256_set1_ps(d * ab[j]->d), acc[i][j]);
          acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(dmin * ab[j]->d), acc[i][j]);
        }
      }
    }
    store_tile<R, C>(acc, c, ldc);
  }
};

struct TileQ6K {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* c, size_t ldc) {
    __m256 acc[R][C] = {};
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const BlockQ6_K* wb[R];
      const BlockQ8_K* ab[C];
      for (int i = 0; i < R; ++i) wb[i] = reinterpret_cast<const BlockQ6_K*>(w + i * ws) + b;
      for (int j = 0; j < C; ++j) ab[j] = reinterpret_cast<const BlockQ8_K*>(a + j * as) + b;
      __m256i sumi[R][C];
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < C; ++j) {
          sumi[i][j] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_slli_epi32(scales_dot_bsums(wb[i]->scales, ab[j]->bsums), 5));
        }
      }
      for (int h = 0; h < 2; ++h) {
        for (int q = 0; q < 4; ++q) {
          __m256i av[C];
          for (int j = 0; j < C; ++j) av[j] = loadu256(ab[j]->qs + 128 * h + 32 * q);
          const int sub = 8 * h + 2 * q;
          for (int i = 0; i < R; ++i) {
            const __m256i u = q6_levels(*wb[i], h, q, loadu256(wb[i]->qh + 32 * h));
            const int s0 = wb[i]->scales[sub], s1 = wb[i]->scales[sub + 1];
            for (int j = 0; j < C; ++j) sumi[i][j] = dot_scaled(sumi[i][j], u, av[j], s0, s1);
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        const float d = fp16(wb[i]->d);
        for (int j = 0; j < C; ++j) {
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i][j]), _mm256_set1_ps(d * ab[j]->d), acc[i][j]);
        }
      }
    }
    store_tile<R, C>(acc, c, ldc);
  }
};

// Float tiles need whole vectors; other lengths, and single activation rows
// (decode), go through vec_dot.
template <class Kernel, VecDotFn kDot>
void gemm_float(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc, float* c,
                size_t ldc) {
  if (n % 8 == 0 && nc > 1) {
    gemm_tiled<Kernel, SPOOL_TILE_R, SPOOL_TILE_C>(n, w, ws, nr, a, as, nc, c, ldc);
    return;
  }
  for (int j = 0; j < nc; ++j) {
    for (int i = 0; i < nr; ++i) {
      c[j * ldc + i] = kDot(n, (const uint8_t*)w + i * ws, (const uint8_t*)a + j * as);
    }
  }
}

// ---- the table -------------------------------------------------------------------

void fill_x86_table(KernelTable& t) {
  auto set = [&](DType type, VecDotFn dot, GemmTileFn tile) {
    t.types[(uint32_t)type].vec_dot = dot;
    t.types[(uint32_t)type].gemm_tile = tile;
  };
  set(DType::F32, vec_dot_f32, gemm_float<FloatTile, vec_dot_f32>);
  set(DType::F16, vec_dot_half<load_f16x8, fp16>, gemm_float<HalfTile, vec_dot_half<load_f16x8, fp16>>);
  set(DType::BF16, vec_dot_half<load_bf16x8, bf16_scalar>, nullptr);
  set(DType::Q4_0, vec_dot_q4_0, gemm_tiled<LegacyTile<BlockQ4_0, 8>, SPOOL_TILE_R, SPOOL_TILE_C, vec_dot_q4_0>);
  set(DType::Q5_0, vec_dot_q5_0, gemm_tiled<LegacyTile<BlockQ5_0, 16>, SPOOL_TILE_R, SPOOL_TILE_C, vec_dot_q5_0>);
  set(DType::Q8_0, vec_dot_q8<BlockQ8_0>, gemm_tiled<LegacyTile<BlockQ8_0, 128>, SPOOL_TILE_R, SPOOL_TILE_C, vec_dot_q8<BlockQ8_0>>);
  set(DType::Q4_1, vec_dot_q4_1, gemm_tiled<MinTile<BlockQ4_1>, SPOOL_TILE_R, SPOOL_TILE_C, vec_dot_q4_1>);
  set(DType::Q5_1, vec_dot_q5_1, gemm_tiled<MinTile<BlockQ5_1>, SPOOL_TILE_R, SPOOL_TILE_C, vec_dot_q5_1>);
  set(DType::Q8_1, vec_dot_q8<BlockQ8_1>, nullptr);
  set(DType::Q2_K, vec_dot_q2_k, nullptr);
  set(DType::Q3_K, vec_dot_q3_k, nullptr);
  set(DType::Q4_K, vec_dot_q4_k, gemm_tiled<TileQ4K, SPOOL_KTILE_R, SPOOL_KTILE_C, vec_dot_q4_k>);
  set(DType::Q5_K, vec_dot_q5_k, nullptr);
  set(DType::Q6_K, vec_dot_q6_k, gemm_tiled<TileQ6K, SPOOL_KTILE_R, SPOOL_KTILE_C, vec_dot_q6_k>);
  t.types[(uint32_t)DType::F16].quantize = quantize_f16;
  t.types[(uint32_t)DType::F16].dequantize = dequantize_half<load_f16x8, fp16>;
  t.types[(uint32_t)DType::BF16].dequantize = dequantize_half<load_bf16x8, bf16_scalar>;
}

}  // namespace
}  // namespace spool::detail
