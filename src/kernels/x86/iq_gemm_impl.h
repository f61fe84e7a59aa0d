// The drivers of the x86 low-bit kernels (x86/iq_impl.h's formats): the
// one-token and small-tile path (decode each block into registers, dot with
// 1-4 activation rows; a format's dot1 fuses both for one row), the prefill
// path (four weight rows decoded into a per-thread scratch, then dotted with
// every activation row), TQ1_0's own AVX-512 tile, and the table fill.
// Included once per instruction set (x86/iq_avx2.cpp, x86/iq_avx512.cpp).
#pragma once

#include "kernels/x86/iq_impl.h"

namespace spool::detail::SPOOL_X86_ISA {
namespace {

// ---- the drivers -------------------------------------------------------------

// The weight stream is prefetched kPrefetchAhead bytes ahead of the block being
// decoded (the rows of a task are contiguous); past the end of the matrix a
// prefetch is harmless.
template <class B>
SPOOL_IQ_INLINE void prefetch_ahead(const B* b) {
  const char* ahead = reinterpret_cast<const char*>(b) + kPrefetchAhead;
  for (size_t o = 0; o < sizeof(*b); o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
}
template <class U>
SPOOL_IQ_INLINE void decode_block(const Books& cb, const typename U::Block* b, Unpacked& u) {
  prefetch_ahead(b);
  U::unpack(cb, *b, u);
}

// Formats with a fused one-token kernel (decode block and dot in one pass,
// the same sums as unpack + block_dot).
template <class U, class = void>
struct HasDot1 : std::false_type {};
template <class U>
struct HasDot1<U, std::void_t<decltype(&U::dot1)>> : std::true_type {};

// Few activation rows (decode): each block is decoded into registers and
// dotted with the C rows at once.
template <class U, int C>
void gemm_direct(int64_t nb, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, float* c, size_t ldc) {
  Books cb{&iq_codebooks(), &grid_codes()};
  const BlockQ8_K* at[C];
  SPOOL_UNROLL for (int t = 0; t < C; ++t) at[t] = reinterpret_cast<const BlockQ8_K*>(a + t * as);
  for (int r = 0; r < nr; ++r) {
    const auto* b = reinterpret_cast<const typename U::Block*>(w + r * ws);
    Acc acc[C];
    SPOOL_UNROLL for (int t = 0; t < C; ++t) acc[t] = acc_zero();
    if constexpr (C == 1 && HasDot1<U>::value) {
      for (int64_t i = 0; i < nb; ++i) {
        prefetch_ahead(b + i);
        acc[0] = U::dot1(cb, b[i], act(at[0][i]), acc[0]);
      }
    } else {
      for (int64_t i = 0; i < nb; ++i) {
        Unpacked u;
        decode_block<U>(cb, b + i, u);
        SPOOL_UNROLL for (int t = 0; t < C; ++t) acc[t] = dot<U>(u, act(at[t][i]), acc[t]);
      }
    }
    SPOOL_UNROLL for (int t = 0; t < C; ++t) c[t * ldc + r] = hsum(acc[t]);
  }
}

// Many activation rows (prefill): kScratchRows weight rows at a time are
// decoded once into a per-thread scratch, then dotted with every activation
// row, the rows side by side so that each activation block is read once.
constexpr int kScratchRows = 4;

struct RowScratch {
  std::vector<uint8_t> lv;
  std::vector<float> sc;
};

template <class U, int R>
void dot_rows(int64_t nb, const RowScratch& s, int64_t n, const BlockQ8_K* at, float* c) {
  Acc acc[R];
  SPOOL_UNROLL for (int r = 0; r < R; ++r) acc[r] = acc_zero();
  for (int64_t i = 0; i < nb; ++i) {
    const Act x = act(at[i]);
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      Unpacked u;
      load(u, s.lv.data() + r * n + kQKK * i, s.sc.data() + (r * nb + i) * kSubs);
      acc[r] = dot<U>(u, x, acc[r]);
    }
  }
  SPOOL_UNROLL for (int r = 0; r < R; ++r) c[r] = hsum(acc[r]);
}

template <class U>
void gemm_scratch(int64_t n, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nc, float* c,
                  size_t ldc) {
  thread_local RowScratch s;
  const Books cb{&iq_codebooks(), &grid_codes()};
  const int64_t nb = n / kQKK;
  s.lv.resize(kScratchRows * n);
  s.sc.resize(kScratchRows * nb * kSubs);
  for (int r0 = 0; r0 < nr; r0 += kScratchRows) {
    const int rr = std::min(kScratchRows, nr - r0);
    for (int r = 0; r < rr; ++r) {
      const auto* b = reinterpret_cast<const typename U::Block*>(w + (r0 + r) * ws);
      for (int64_t i = 0; i < nb; ++i) {
        Unpacked u;
        decode_block<U>(cb, b + i, u);
        store(u, s.lv.data() + r * n + kQKK * i, s.sc.data() + (r * nb + i) * kSubs);
      }
    }
    for (int t = 0; t < nc; ++t) {
      const auto* at = reinterpret_cast<const BlockQ8_K*>(a + t * as);
      float* ct = c + t * ldc + r0;
      switch (rr) {
        case 4: dot_rows<U, 4>(nb, s, n, at, ct); break;
        case 3: dot_rows<U, 3>(nb, s, n, at, ct); break;
        case 2: dot_rows<U, 2>(nb, s, n, at, ct); break;
        default: dot_rows<U, 1>(nb, s, n, at, ct); break;
      }
    }
  }
  static_assert(kScratchRows == 4);
}

// Tiles of up to kDirectTokens activation rows decode in registers.
constexpr int kDirectTokens = 4;

template <class U>
void gemm_tile(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc, float* c,
               size_t ldc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t nb = n / kQKK;
  switch (nc) {
    case 1: return gemm_direct<U, 1>(nb, wb, ws, nr, ab, as, c, ldc);
    case 2: return gemm_direct<U, 2>(nb, wb, ws, nr, ab, as, c, ldc);
    case 3: return gemm_direct<U, 3>(nb, wb, ws, nr, ab, as, c, ldc);
    case 4: return gemm_direct<U, 4>(nb, wb, ws, nr, ab, as, c, ldc);
    default: return gemm_scratch<U>(n, wb, ws, nr, ab, as, nc, c, ldc);
  }
  static_assert(kDirectTokens == 4);
}

template <class U>
float vec_dot(int64_t n, const void* w, const void* a) {
  float c;
  gemm_direct<U, 1>(n / kQKK, static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a), 0, &c, 1);
  return c;
}

#if defined(__AVX512BW__)
// ---- TQ1_0 on AVX-512: digits in their bytes' order -----------------------
// FastTQ1_0::levels5 gets a block's 256 digits from one register of its 52
// bytes and four multiples of it, so digit n of byte j sits in lane j of
// register n: for j < 32 weight 32 n + j, for j < 48 weight 160 + 16 n +
// (j - 32), for j < 52 (n < 4) weight 240 + 4 n + (j - 48). The activations
// are laid out once per call to match (5 registers, unused lanes 0), with
// each 32-bit lane's sum of them, which takes off the digits' + 1. Every
// token count goes through tq1_dot on the same lanes: batch-invariant.
constexpr size_t kTq1Act = 6 * 64;  // bytes per block of laid-out activations: 5 registers and the lane sums

inline void tq1_arrange(const BlockQ8_K* a, int64_t nb, int8_t* out) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* x = a[i].qs;
    int8_t* o = out + kTq1Act * i;
    __m512i sum = _mm512_setzero_si512();
    SPOOL_UNROLL for (int n = 0; n < 5; ++n) {
      __m512i v = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)(x + 32 * n)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(x + 160 + 16 * n)), 2);
      if (n < 4) v = _mm512_inserti32x4(v, _mm_cvtsi32_si128((int)load32((const uint8_t*)x + 240 + 4 * n)), 3);
      _mm512_storeu_si512(o + 64 * n, v);
      sum = _mm512_dpbusd_epi32(sum, ones, v);
    }
    _mm512_storeu_si512(o + 320, sum);
  }
}

// acc + one block's (levels l) products with one token's laid-out activations.
inline Acc tq1_dot(const __m512i l[5], const int8_t* xr, float dw, float da, Acc acc) {
  const __m512i z = _mm512_setzero_si512();
  __m512i s0 = _mm512_dpbusd_epi32(z, l[0], _mm512_loadu_si512(xr));
  __m512i s1 = _mm512_dpbusd_epi32(z, l[1], _mm512_loadu_si512(xr + 64));
  s0 = _mm512_dpbusd_epi32(s0, l[2], _mm512_loadu_si512(xr + 128));
  s1 = _mm512_dpbusd_epi32(s1, l[3], _mm512_loadu_si512(xr + 192));
  s0 = _mm512_dpbusd_epi32(s0, l[4], _mm512_loadu_si512(xr + 256));
  const __m512i q = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_loadu_si512(xr + 320));
  return _mm512_fmadd_ps(_mm512_set1_ps(dw * da), _mm512_cvtepi32_ps(q), acc);
}

template <int C>
void tq1_direct(int64_t nb, const uint8_t* w, size_t ws, int nr, const BlockQ8_K* const* at, const int8_t* xa,
                float* c, size_t ldc) {
  for (int r = 0; r < nr; ++r) {
    const auto* b = reinterpret_cast<const BlockTQ1_0*>(w + r * ws);
    Acc acc[C];
    SPOOL_UNROLL for (int t = 0; t < C; ++t) acc[t] = acc_zero();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_ahead(b + i);
      __m512i l[5];
      FastTQ1_0::levels5(b[i], l);
      const float dw = _cvtsh_ss(b[i].d);
      SPOOL_UNROLL for (int t = 0; t < C; ++t) acc[t] = tq1_dot(l, xa + kTq1Act * (t * nb + i), dw, at[t][i].d, acc[t]);
    }
    SPOOL_UNROLL for (int t = 0; t < C; ++t) c[t * ldc + r] = hsum(acc[t]);
  }
}

void tq1_tile(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc, float* c, size_t ldc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t nb = n / kQKK;
  thread_local std::vector<int8_t> xa;
  thread_local std::vector<const BlockQ8_K*> at;
  xa.resize(nc * nb * kTq1Act);
  at.resize(nc);
  for (int t = 0; t < nc; ++t) {
    at[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a) + t * as);
    tq1_arrange(at[t], nb, xa.data() + kTq1Act * nb * t);
  }
  switch (nc) {
    case 1: return tq1_direct<1>(nb, wb, ws, nr, at.data(), xa.data(), c, ldc);
    case 2: return tq1_direct<2>(nb, wb, ws, nr, at.data(), xa.data(), c, ldc);
    case 3: return tq1_direct<3>(nb, wb, ws, nr, at.data(), xa.data(), c, ldc);
    case 4: return tq1_direct<4>(nb, wb, ws, nr, at.data(), xa.data(), c, ldc);
    default: break;
  }
  // Prefill: kScratchRows rows' levels decoded once into L1, then every token.
  thread_local std::vector<__m512i> lv;
  thread_local std::vector<float> dw;
  lv.resize(kScratchRows * nb * 5);
  dw.resize(kScratchRows * nb);
  for (int r0 = 0; r0 < nr; r0 += kScratchRows) {
    const int rr = std::min(kScratchRows, nr - r0);
    for (int r = 0; r < rr; ++r) {
      const auto* b = reinterpret_cast<const BlockTQ1_0*>(wb + (r0 + r) * ws);
      for (int64_t i = 0; i < nb; ++i) {
        prefetch_ahead(b + i);
        FastTQ1_0::levels5(b[i], &lv[(r * nb + i) * 5]);
        dw[r * nb + i] = _cvtsh_ss(b[i].d);
      }
    }
    for (int t = 0; t < nc; ++t) {
      Acc acc[kScratchRows];
      for (int r = 0; r < rr; ++r) acc[r] = acc_zero();
      for (int64_t i = 0; i < nb; ++i) {
        const int8_t* xr = xa.data() + kTq1Act * (t * nb + i);
        for (int r = 0; r < rr; ++r) acc[r] = tq1_dot(&lv[(r * nb + i) * 5], xr, dw[r * nb + i], at[t][i].d, acc[r]);
      }
      for (int r = 0; r < rr; ++r) c[t * ldc + r0 + r] = hsum(acc[r]);
    }
  }
}

float tq1_vec_dot(int64_t n, const void* w, const void* a) {
  float c;
  tq1_tile(n, w, 0, 1, a, 0, 1, &c, 1);
  return c;
}
#endif

template <class U>
void set(KernelTable& t, DType type) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.vec_dot = vec_dot<U>;
  k.gemm_tile = gemm_tile<U>;
}

}  // namespace

inline void fill_iq_kernels(KernelTable& t) {
  set<FastIQ2_XXS>(t, DType::IQ2_XXS);
  set<FastIQ2_XS>(t, DType::IQ2_XS);
  set<FastIQ2_S>(t, DType::IQ2_S);
  set<FastIQ3_XXS>(t, DType::IQ3_XXS);
  set<FastIQ3_S>(t, DType::IQ3_S);
  set<FastIQ1_S>(t, DType::IQ1_S);
  set<FastIQ1_M>(t, DType::IQ1_M);
  set<FastIQ4_XS>(t, DType::IQ4_XS);
#if defined(__AVX512BW__)
  t.types[(uint32_t)DType::TQ1_0].vec_dot = tq1_vec_dot;
  t.types[(uint32_t)DType::TQ1_0].gemm_tile = tq1_tile;
#else
  set<FastTQ1_0>(t, DType::TQ1_0);
#endif
  set<FastTQ2_0>(t, DType::TQ2_0);
}

}  // namespace spool::detail::SPOOL_X86_ISA
