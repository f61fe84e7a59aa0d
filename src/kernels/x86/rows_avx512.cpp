// AVX-512 row kernels for attention (RowKernels in kernels.h): dots of a
// query with strided cached keys, weighted sums of strided cached values,
// both also for several query heads sharing the rows (GQA), exp with a
// running sum for the softmax (range reduction to [-ln2/2, ln2/2], a
// degree-6 polynomial, then vscalefps for the 2^n), and SwiGLU.
#include <immintrin.h>

#include <algorithm>

#include "kernels/fill.h"

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

namespace spool::detail {
namespace {

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

void dot_rows(int64_t d, const float* q, const float* k, size_t stride, int64_t n, float* out) {
  if (d == 64) {  // the common head size: the query stays in registers
    const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16);
    const __m512 q2 = _mm512_loadu_ps(q + 32), q3 = _mm512_loadu_ps(q + 48);
    for (int64_t p = 0; p < n; ++p) {
      const float* kp = k + p * stride;
      __m512 a = _mm512_mul_ps(q0, _mm512_loadu_ps(kp));
      __m512 b = _mm512_mul_ps(q1, _mm512_loadu_ps(kp + 16));
      a = _mm512_fmadd_ps(q2, _mm512_loadu_ps(kp + 32), a);
      b = _mm512_fmadd_ps(q3, _mm512_loadu_ps(kp + 48), b);
      out[p] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
    return;
  }
  for (int64_t p = 0; p < n; ++p) {
    const float* kp = k + p * stride;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = tail_mask(d - i);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, kp + i), acc);
    }
    out[p] = _mm512_reduce_add_ps(acc);
  }
}

void axpy_rows(int64_t d, const float* w, const float* v, size_t stride, int64_t n, float* out) {
  for (int64_t i0 = 0; i0 < d; i0 += 64) {  // 4 accumulators of 16 per pass
    __mmask16 m[4];
    __m512 acc[4];
    for (int c = 0; c < 4; ++c) {
      m[c] = i0 + 16 * c < d ? tail_mask(d - i0 - 16 * c) : (__mmask16)0;
      acc[c] = _mm512_maskz_loadu_ps(m[c], out + i0 + 16 * c);
    }
    for (int64_t p = 0; p < n; ++p) {
      const __m512 wp = _mm512_set1_ps(w[p]);
      const float* vp = v + p * stride + i0;
      for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(wp, _mm512_maskz_loadu_ps(m[c], vp + 16 * c), acc[c]);
    }
    for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(out + i0 + 16 * c, m[c], acc[c]);
  }
}

// Cached rows of a step's earlier tokens are rarely still in cache and are
// strided (one row per position), which the hardware prefetcher follows
// poorly: prefetch the row kRowsAhead positions on.
constexpr int64_t kRowsAhead = 6;
template <class T>
inline void prefetch_row(const T* r, int64_t d) {
  for (int64_t i = 0; i < d; i += 64 / sizeof(T)) _mm_prefetch(reinterpret_cast<const char*>(r + i), _MM_HINT_T0);
}

// 16 cached elements as floats: F32 rows, or F16 rows (IEEE half).
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

// Up to 4 queries per pass over the rows: each 16-float slice of a row is
// loaded once and multiplied into every query's accumulator (the queries'
// slices come from L1), so the rows, usually far from the core, are read
// ceil(n_q / 4) times instead of n_q times.
template <int H, class T>
void dot_rows_heads(int64_t d, const float* q, const T* k, size_t stride, int64_t n, float* out, size_t out_stride) {
  for (int64_t p = 0; p < n; ++p) {
    const T* kp = k + p * stride;
    if (p + kRowsAhead < n) prefetch_row(kp + kRowsAhead * stride, d);
    __m512 acc[H];
    SPOOL_UNROLL for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = tail_mask(d - i);
      const __m512 kv = load16(kp + i, m);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + h * d + i), kv, acc[h]);
    }
    SPOOL_UNROLL for (int h = 0; h < H; ++h) out[h * out_stride + p] = _mm512_reduce_add_ps(acc[h]);
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

// Up to 4 outputs x 64 floats of accumulators in registers; each 64-float
// slice of a value row is loaded once for all of them.
template <int H, class T>
void axpy_rows_heads(int64_t d, const float* w, size_t w_stride, const T* v, size_t stride, int64_t n, float* out) {
  for (int64_t i0 = 0; i0 < d; i0 += 64) {
    __mmask16 m[4];
    __m512 acc[H][4];
    for (int c = 0; c < 4; ++c) m[c] = i0 + 16 * c < d ? tail_mask(d - i0 - 16 * c) : (__mmask16)0;
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_maskz_loadu_ps(m[c], out + h * d + i0 + 16 * c);
    for (int64_t p = 0; p < n; ++p) {
      const T* vp = v + p * stride + i0;
      if (p + kRowsAhead < n) prefetch_row(vp + kRowsAhead * stride, std::min<int64_t>(64, d - i0));
      __m512 vv[4];
      SPOOL_UNROLL for (int c = 0; c < 4; ++c) vv[c] = load16(vp + 16 * c, m[c]);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) {
        const __m512 wp = _mm512_set1_ps(w[h * w_stride + p]);
        SPOOL_UNROLL for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_fmadd_ps(wp, vv[c], acc[h][c]);
      }
    }
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(out + h * d + i0 + 16 * c, m[c], acc[h][c]);
  }
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

// exp(x) for x <= 0 (large negative flushes to 0: below -104 the result is
// under half the smallest subnormal, and vscalefps rounds it to 0, -inf too).
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);  // ln2 split in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

float exp_sum(float* x, int64_t n, float max) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 mx = _mm512_set1_ps(max);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// silu(x) = x * sigmoid(x), sigmoid from e = exp(-|x|): 1/(1+e) for x >= 0,
// e/(1+e) below.
void swiglu(float* g, const float* u, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), one, e);
    const __m512 sig = _mm512_div_ps(num, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

}  // namespace

void fill_rows_avx512_kernels(KernelTable& t) {
  t.rows = {dot_rows, axpy_rows, exp_sum, swiglu, dot_rows_multi, axpy_rows_multi, dot_rows_multi_f16,
            axpy_rows_multi_f16};
}

}  // namespace spool::detail
