// AVX2 row kernels for attention (RowKernels in kernels.h), the 8-float
// counterpart of x86/rows_avx512.cpp: dots and weighted sums over strided
// cached rows (F32 or F16) for up to 4 query heads per pass, exp with a
// running sum for the softmax, and SwiGLU. F32 tails use masked loads; F16
// tails a zero-padded copy (AVX2 has no 16-bit masked load).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/fill.h"

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

namespace spool::detail {
namespace {

// The first `left` (0..8) lanes set: a window into -1 x 8, 0 x 8.
alignas(32) constexpr int32_t kMaskBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
inline __m256i tail_mask(int64_t left) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskBits + 8 - std::min<int64_t>(left, 8)));
}

// 8 cached elements as floats: F32 rows, or F16 rows (IEEE half).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// The first `left` (< 8) elements, the other lanes 0; m = tail_mask(left).
inline __m256 load_part(const float* p, __m256i m, int64_t) { return _mm256_maskload_ps(p, m); }
inline __m256 load_part(const uint16_t* p, __m256i, int64_t left) {
  alignas(16) uint16_t buf[8] = {};
  std::memcpy(buf, p, left * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// The four horizontal sums in lanes 0..3, sharing the shuffles.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Cached rows of a step's earlier tokens are rarely still in cache and are
// strided (one row per position), which the hardware prefetcher follows
// poorly: prefetch the row kRowsAhead positions on.
constexpr int64_t kRowsAhead = 6;
template <class T>
inline void prefetch_row(const T* r, int64_t d) {
  for (int64_t i = 0; i < d; i += 64 / sizeof(T)) _mm_prefetch(reinterpret_cast<const char*>(r + i), _MM_HINT_T0);
}

// Up to 4 queries per pass over the rows: each 8-float slice of a row is
// loaded once and multiplied into every query's accumulators (the queries'
// slices come from L1), so the rows are read ceil(n_q / 4) times instead of
// n_q times. Two accumulators per query, so 4 queries keep 8 FMA chains going.
template <int H, class T>
void dot_rows_heads(int64_t d, const float* q, const T* k, size_t stride, int64_t n, float* out, size_t out_stride) {
  const int64_t d16 = d & ~int64_t{15}, d8 = d & ~int64_t{7};
  const __m256i m = tail_mask(d - d8);
  for (int64_t p = 0; p < n; ++p) {
    const T* kp = k + p * stride;
    if (p + kRowsAhead < n) prefetch_row(kp + kRowsAhead * stride, d);
    __m256 a0[H], a1[H];
    SPOOL_UNROLL for (int h = 0; h < H; ++h) a0[h] = a1[h] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d16; i += 16) {
      const __m256 k0 = load8(kp + i), k1 = load8(kp + i + 8);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) {
        a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + i), k0, a0[h]);
        a1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + i + 8), k1, a1[h]);
      }
    }
    if (d8 > d16) {
      const __m256 k0 = load8(kp + d16);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + d16), k0, a0[h]);
    }
    if (d > d8) {  // the query's masked load zeroes the lanes past d
      const __m256 k0 = load_part(kp + d8, m, d - d8);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) a1[h] = _mm256_fmadd_ps(_mm256_maskload_ps(q + h * d + d8, m), k0, a1[h]);
    }
    __m256 s[4];
    SPOOL_UNROLL for (int h = 0; h < 4; ++h) s[h] = h < H ? _mm256_add_ps(a0[h], a1[h]) : _mm256_setzero_ps();
    alignas(16) float r[4];
    _mm_store_ps(r, hsum4(s[0], s[1], s[2], s[3]));
    SPOOL_UNROLL for (int h = 0; h < H; ++h) out[h * out_stride + p] = r[h];
  }
}

void dot_rows(int64_t d, const float* q, const float* k, size_t stride, int64_t n, float* out) {
  if (d != 64) return dot_rows_heads<1>(d, q, k, stride, n, out, 1);
  __m256 qv[8];  // the common head size: the query stays in registers
  SPOOL_UNROLL for (int c = 0; c < 8; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  for (int64_t p = 0; p < n; ++p) {
    const float* kp = k + p * stride;
    if (p + kRowsAhead < n) prefetch_row(kp + kRowsAhead * stride, 64);
    __m256 a[4];
    SPOOL_UNROLL for (int c = 0; c < 4; ++c) a[c] = _mm256_mul_ps(qv[c], _mm256_loadu_ps(kp + 8 * c));
    SPOOL_UNROLL for (int c = 4; c < 8; ++c) a[c - 4] = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(kp + 8 * c), a[c - 4]);
    out[p] = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  }
}

template <class T>
void dot_rows_multi_t(int64_t d, const float* q, int n_q, const T* k, size_t stride, int64_t n, float* out,
                      size_t out_stride) {
  for (int h0 = 0; h0 < n_q; h0 += 4) {
    const float* qh = q + h0 * d;
    float* oh = out + h0 * out_stride;
    switch (std::min(4, n_q - h0)) {
      case 4: dot_rows_heads<4>(d, qh, k, stride, n, oh, out_stride); break;
      case 3: dot_rows_heads<3>(d, qh, k, stride, n, oh, out_stride); break;
      case 2: dot_rows_heads<2>(d, qh, k, stride, n, oh, out_stride); break;
      default: dot_rows_heads<1>(d, qh, k, stride, n, oh, out_stride); break;
    }
  }
}

void dot_rows_multi(int64_t d, const float* q, int n_q, const float* k, size_t stride, int64_t n, float* out,
                    size_t out_stride) {
  dot_rows_multi_t(d, q, n_q, k, stride, n, out, out_stride);
}
void dot_rows_multi_f16(int64_t d, const float* q, int n_q, const uint16_t* k, size_t stride, int64_t n, float* out,
                        size_t out_stride) {
  dot_rows_multi_t(d, q, n_q, k, stride, n, out, out_stride);
}

// A weighted sum's rows and outputs. H outputs of d floats may need more
// accumulators than there are registers, so the rows are taken in blocks of
// kBlockRows and each block in several passes of C slices of 8 floats: each
// row comes from memory once, the later passes find it in L1.
template <class T>
struct AxpyJob {
  int64_t d;
  const float* w;
  size_t w_stride;
  const T* v;
  size_t stride;
  int64_t n;
  float* out;
};

// One pass over rows [p0, p1) for H outputs x C slices from i0, the
// accumulators in registers; each slice of a value row is loaded once for
// all H outputs. Full: all C * 8 elements lie inside d; otherwise C == 1 and
// the last d - i0 (< 8) elements go through masks. The block's first pass
// prefetches whole rows, kRowsAhead on.
template <int H, int C, bool Full, class T>
void axpy_pass(const AxpyJob<T>& j, int64_t p0, int64_t p1, int64_t i0) {
  static_assert(Full || C == 1);
  const int64_t d = j.d, left = Full ? 8 * C : d - i0;
  const __m256i m = tail_mask(left);
  __m256 acc[H][C];
  SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int c = 0; c < C; ++c) {
    float* o = j.out + h * d + i0 + 8 * c;
    acc[h][c] = Full ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, m);
  }
  for (int64_t p = p0; p < p1; ++p) {
    const T* vp = j.v + p * j.stride + i0;
    if (i0 == 0 && p + kRowsAhead < j.n) prefetch_row(j.v + (p + kRowsAhead) * j.stride, d);
    __m256 vv[C];
    SPOOL_UNROLL for (int c = 0; c < C; ++c) vv[c] = Full ? load8(vp + 8 * c) : load_part(vp, m, left);
    SPOOL_UNROLL for (int h = 0; h < H; ++h) {
      const __m256 wp = _mm256_set1_ps(j.w[h * j.w_stride + p]);
      SPOOL_UNROLL for (int c = 0; c < C; ++c) acc[h][c] = _mm256_fmadd_ps(wp, vv[c], acc[h][c]);
    }
  }
  SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int c = 0; c < C; ++c) {
    float* o = j.out + h * d + i0 + 8 * c;
    if (Full) _mm256_storeu_ps(o, acc[h][c]);
    else _mm256_maskstore_ps(o, m, acc[h][c]);
  }
}

// Slices per pass, so that H x C accumulators, C row slices and a broadcast
// weight fit the 16 ymm registers (64 floats for one output, 16 for four).
template <int H>
constexpr int kAxpySlices = H == 1 ? 8 : H == 2 ? 4 : H == 3 ? 3 : 2;
// 8 rows stay in even an 8-way L1 when their stride is a multiple of 4 KiB
// (each row's slice then maps to the same set). Measured at d=64, 4 heads:
// 1.3-1.7x faster than passes over all n rows when the rows come from L3,
// 10-15% slower when all of them sit in L2.
constexpr int64_t kBlockRows = 8;

// Per block: full-width passes, then narrower ones for what is left of d
// (at most three, widths 32/16/8), then the masked tail. Every element still
// sums its rows in order, as the reference does.
template <int H, class T>
void axpy_rows_heads(int64_t d, const float* w, size_t w_stride, const T* v, size_t stride, int64_t n, float* out) {
  constexpr int C = kAxpySlices<H>;
  const AxpyJob<T> j{d, w, w_stride, v, stride, n, out};
  for (int64_t p0 = 0; p0 < n; p0 += kBlockRows) {
    const int64_t p1 = std::min(n, p0 + kBlockRows);
    int64_t i0 = 0;
    for (; i0 + 8 * C <= d; i0 += 8 * C) axpy_pass<H, C, true>(j, p0, p1, i0);
    if constexpr (C > 4) {
      if (d - i0 >= 32) axpy_pass<H, 4, true>(j, p0, p1, i0), i0 += 32;
    }
    if constexpr (C > 2) {
      if (d - i0 >= 16) axpy_pass<H, 2, true>(j, p0, p1, i0), i0 += 16;
    }
    if constexpr (C > 1) {
      if (d - i0 >= 8) axpy_pass<H, 1, true>(j, p0, p1, i0), i0 += 8;
    }
    if (i0 < d) axpy_pass<H, 1, false>(j, p0, p1, i0);
  }
}

void axpy_rows(int64_t d, const float* w, const float* v, size_t stride, int64_t n, float* out) {
  axpy_rows_heads<1>(d, w, 0, v, stride, n, out);
}

template <class T>
void axpy_rows_multi_t(int64_t d, const float* w, size_t w_stride, int n_q, const T* v, size_t stride, int64_t n,
                       float* out) {
  for (int h0 = 0; h0 < n_q; h0 += 4) {
    const float* wh = w + h0 * w_stride;
    float* oh = out + h0 * d;
    switch (std::min(4, n_q - h0)) {
      case 4: axpy_rows_heads<4>(d, wh, w_stride, v, stride, n, oh); break;
      case 3: axpy_rows_heads<3>(d, wh, w_stride, v, stride, n, oh); break;
      case 2: axpy_rows_heads<2>(d, wh, w_stride, v, stride, n, oh); break;
      default: axpy_rows_heads<1>(d, wh, w_stride, v, stride, n, oh); break;
    }
  }
}

void axpy_rows_multi(int64_t d, const float* w, size_t w_stride, int n_q, const float* v, size_t stride, int64_t n,
                     float* out) {
  axpy_rows_multi_t(d, w, w_stride, n_q, v, stride, n, out);
}
void axpy_rows_multi_f16(int64_t d, const float* w, size_t w_stride, int n_q, const uint16_t* v, size_t stride,
                         int64_t n, float* out) {
  axpy_rows_multi_t(d, w, w_stride, n_q, v, stride, n, out);
}

// exp(x) for x <= 0 (it stays right up to the float overflow). x = t ln2 + r
// with t an integer and |r| <= ln2/2 (ln2 in two parts, so t ln2 is exact),
// exp(r) by its degree-6 Taylor polynomial, then 2^t in two halves: the first
// added to the polynomial's exponent field (exact, the result stays normal),
// the second a multiply, which rounds correctly into the subnormals. Inputs
// below -104 (-inf included) give 0, as expf does; NaN stays NaN.
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));  // NaN: x (2nd operand)
  const __m256 t = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(t, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(t, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_cvtps_epi32(t);  // -150 .. 128
  const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(n1, 23)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(p1, s2);
}

float exp_sum(float* x, int64_t n, float max) {
  const __m256 mx = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx));
    _mm256_maskstore_ps(x + i, m, e);
    sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(m)));  // lanes past n are exp(-max)
  }
  return hsum(sum);
}

// silu(x) = x * sigmoid(x), sigmoid from e = exp(-|x|) (never overflows):
// 1/(1+e) for x >= 0, e/(1+e) below.
void swiglu(float* g, const float* u, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask(n - i);
    const __m256 x = _mm256_maskload_ps(g + i, m);
    const __m256 e = exp_avx2(_mm256_or_ps(x, sign));
    const __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
    _mm256_maskstore_ps(g + i, m, _mm256_mul_ps(_mm256_mul_ps(x, sig), _mm256_maskload_ps(u + i, m)));
  }
}

}  // namespace

void fill_rows_avx2_kernels(KernelTable& t) {
  t.rows = {dot_rows, axpy_rows, exp_sum, swiglu, dot_rows_multi, axpy_rows_multi, dot_rows_multi_f16,
            axpy_rows_multi_f16};
}

}  // namespace spool::detail
