// NEON row kernels for attention (RowKernels in kernels.h), the 4-float
// counterpart of x86/rows_avx512.cpp: dots and weighted sums over strided
// cached rows (F32 or F16) for up to 4 query heads per pass, exp with a
// running sum for the softmax, and SwiGLU. Tails shorter than a vector are
// scalar (NEON has no masked loads).
#include <algorithm>

#include "kernels/neon/common.h"

namespace spool::detail {
namespace {

// 4 cached elements as floats: F32 rows, or F16 rows (IEEE half).
inline float32x4_t load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t load4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float to_float(float x) { return x; }
inline float to_float(uint16_t h) { return neon_h2f(h); }

// Cached rows of a step's earlier tokens are rarely still in cache and are
// strided (one row per position), which the hardware prefetcher follows
// poorly: prefetch the row kRowsAhead positions on.
constexpr int64_t kRowsAhead = 6;
template <class T>
inline void prefetch_row(const T* r, int64_t d) {
  for (int64_t i = 0; i < d; i += 64 / sizeof(T)) __builtin_prefetch(r + i, 0, 3);
}

// Up to 4 queries per pass over the rows: each 4-float slice of a row is
// loaded once and multiplied into every query's accumulators (the queries'
// slices come from L1), so the rows are read ceil(n_q / 4) times instead of
// n_q times. A accumulators per query keep at least 8 FMA chains going.
template <int H, class T>
void dot_rows_heads(int64_t d, const float* q, const T* k, size_t stride, int64_t n, float* out, size_t out_stride) {
  constexpr int A = H <= 2 ? 4 : 2;
  const int64_t d16 = d & ~int64_t{15}, d4 = d & ~int64_t{3};
  for (int64_t p = 0; p < n; ++p) {
    const T* kp = k + p * stride;
    if (p + kRowsAhead < n) prefetch_row(kp + kRowsAhead * stride, d);
    float32x4_t acc[H][A];
    SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int a = 0; a < A; ++a) acc[h][a] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i < d16; i += 16) {
      float32x4_t kv[4];
      SPOOL_UNROLL for (int c = 0; c < 4; ++c) kv[c] = load4(kp + i + 4 * c);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int c = 0; c < 4; ++c) {
        acc[h][c % A] = vfmaq_f32(acc[h][c % A], vld1q_f32(q + h * d + i + 4 * c), kv[c]);
      }
    }
    for (; i < d4; i += 4) {
      const float32x4_t kv = load4(kp + i);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) acc[h][0] = vfmaq_f32(acc[h][0], vld1q_f32(q + h * d + i), kv);
    }
    float s[H];
    SPOOL_UNROLL for (int h = 0; h < H; ++h) {
      SPOOL_UNROLL for (int a = 1; a < A; ++a) acc[h][0] = vaddq_f32(acc[h][0], acc[h][a]);
      s[h] = vaddvq_f32(acc[h][0]);
    }
    for (; i < d; ++i) {
      const float kf = to_float(kp[i]);
      SPOOL_UNROLL for (int h = 0; h < H; ++h) s[h] += q[h * d + i] * kf;
    }
    SPOOL_UNROLL for (int h = 0; h < H; ++h) out[h * out_stride + p] = s[h];
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

void dot_rows(int64_t d, const float* q, const float* k, size_t stride, int64_t n, float* out) {
  dot_rows_heads<1>(d, q, k, stride, n, out, 1);
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
// kBlockRows and each block in several passes of C slices of 4 floats: each
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

// One pass over rows [p0, p1) for H outputs x C slices from i0 (all inside
// d), the accumulators in registers; each slice of a value row is loaded
// once for all H outputs. The block's first pass prefetches whole rows,
// kRowsAhead on.
template <int H, int C, class T>
void axpy_pass(const AxpyJob<T>& j, int64_t p0, int64_t p1, int64_t i0) {
  const int64_t d = j.d;
  float32x4_t acc[H][C];
  SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int c = 0; c < C; ++c) {
    acc[h][c] = vld1q_f32(j.out + h * d + i0 + 4 * c);
  }
  for (int64_t p = p0; p < p1; ++p) {
    const T* vp = j.v + p * j.stride + i0;
    if (i0 == 0 && p + kRowsAhead < j.n) prefetch_row(j.v + (p + kRowsAhead) * j.stride, d);
    float32x4_t vv[C];
    SPOOL_UNROLL for (int c = 0; c < C; ++c) vv[c] = load4(vp + 4 * c);
    SPOOL_UNROLL for (int h = 0; h < H; ++h) {
      const float wp = j.w[h * j.w_stride + p];
      SPOOL_UNROLL for (int c = 0; c < C; ++c) acc[h][c] = vfmaq_n_f32(acc[h][c], vv[c], wp);
    }
  }
  SPOOL_UNROLL for (int h = 0; h < H; ++h) SPOOL_UNROLL for (int c = 0; c < C; ++c) {
    vst1q_f32(j.out + h * d + i0 + 4 * c, acc[h][c]);
  }
}

// The last d - i0 (< 4) elements over rows [p0, p1), in scalar code.
template <int H, class T>
void axpy_tail(const AxpyJob<T>& j, int64_t p0, int64_t p1, int64_t i0) {
  for (int64_t p = p0; p < p1; ++p) {
    const T* vp = j.v + p * j.stride;
    for (int h = 0; h < H; ++h)
      for (int64_t i = i0; i < j.d; ++i) j.out[h * j.d + i] += j.w[h * j.w_stride + p] * to_float(vp[i]);
  }
}

// Slices per pass, so that H x C accumulators, C row slices and the weights
// fit the 32 vector registers (64 floats for one output, 16 for four).
template <int H>
constexpr int kAxpySlices = H == 1 ? 16 : H == 2 ? 8 : 4;
// 8 rows stay in L1 whatever their stride (as in x86/rows_avx2.cpp).
constexpr int64_t kBlockRows = 8;

// Per block: full-width passes, then narrower ones for what is left of d
// (widths 32/16/8/4), then the scalar tail. Every element still sums its
// rows in order, as the reference does.
template <int H, class T>
void axpy_rows_heads(int64_t d, const float* w, size_t w_stride, const T* v, size_t stride, int64_t n, float* out) {
  constexpr int C = kAxpySlices<H>;
  const AxpyJob<T> j{d, w, w_stride, v, stride, n, out};
  for (int64_t p0 = 0; p0 < n; p0 += kBlockRows) {
    const int64_t p1 = std::min(n, p0 + kBlockRows);
    int64_t i0 = 0;
    for (; i0 + 4 * C <= d; i0 += 4 * C) axpy_pass<H, C>(j, p0, p1, i0);
    if constexpr (C > 8) {
      if (d - i0 >= 32) axpy_pass<H, 8>(j, p0, p1, i0), i0 += 32;
    }
    if constexpr (C > 4) {
      if (d - i0 >= 16) axpy_pass<H, 4>(j, p0, p1, i0), i0 += 16;
    }
    if constexpr (C > 2) {
      if (d - i0 >= 8) axpy_pass<H, 2>(j, p0, p1, i0), i0 += 8;
    }
    if constexpr (C > 1) {
      if (d - i0 >= 4) axpy_pass<H, 1>(j, p0, p1, i0), i0 += 4;
    }
    if (i0 < d) axpy_tail<H>(j, p0, p1, i0);
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
// below -104 (-inf included) give 0, as expf does; fmax/fmin keep NaN.
inline float32x4_t exp_neon(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(88.8f));
  const float32x4_t t = vrndnq_f32(vmulq_n_f32(x, 1.44269504f));
  float32x4_t r = vfmsq_f32(x, t, vdupq_n_f32(0.693145752f));
  r = vfmsq_f32(r, t, vdupq_n_f32(1.42860677e-6f));
  float32x4_t p = vdupq_n_f32(1.0f / 720);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t n = vcvtq_s32_f32(t);  // -150 .. 128
  const int32x4_t n1 = vshrq_n_s32(n, 1), n2 = vsubq_s32(n, n1);
  const float32x4_t p1 = vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(n1, 23)));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
  return vmulq_f32(p1, s2);
}

float exp_sum(float* x, int64_t n, float max) {
  const float32x4_t mx = vdupq_n_f32(max);
  float32x4_t sum = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp_neon(vsubq_f32(vld1q_f32(x + i), mx));
    vst1q_f32(x + i, e);
    sum = vaddq_f32(sum, e);
  }
  if (i == n) return vaddvq_f32(sum);
  float buf[4] = {};  // the tail through the same exp, lanes past n unused
  for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
  vst1q_f32(buf, exp_neon(vsubq_f32(vld1q_f32(buf), mx)));
  float s = vaddvq_f32(sum);
  for (int64_t j = i; j < n; ++j) s += (x[j] = buf[j - i]);
  return s;
}

// silu(x) = x * sigmoid(x), sigmoid from e = exp(-|x|) (never overflows):
// 1/(1+e) for x >= 0, e/(1+e) below.
inline float32x4_t swiglu4(float32x4_t x, float32x4_t u) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t e = exp_neon(vnegq_f32(vabsq_f32(x)));
  const float32x4_t num = vbslq_f32(vcltzq_f32(x), e, one);
  return vmulq_f32(vmulq_f32(x, vdivq_f32(num, vaddq_f32(one, e))), u);
}

void swiglu(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(g + i, swiglu4(vld1q_f32(g + i), vld1q_f32(u + i)));
  if (i == n) return;
  float gb[4] = {}, ub[4] = {};
  for (int64_t j = i; j < n; ++j) gb[j - i] = g[j], ub[j - i] = u[j];
  vst1q_f32(gb, swiglu4(vld1q_f32(gb), vld1q_f32(ub)));
  for (int64_t j = i; j < n; ++j) g[j] = gb[j - i];
}

}  // namespace

void fill_rows_neon_kernels(KernelTable& t) {
  t.rows = {dot_rows, axpy_rows, exp_sum, swiglu, dot_rows_multi, axpy_rows_multi, dot_rows_multi_f16,
            axpy_rows_multi_f16};
}

}  // namespace spool::detail
