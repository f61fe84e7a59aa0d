// NEON kernels of the float weight types (F32, F16, BF16) against float
// activations: conversions to and from F16/BF16, dots with four independent
// accumulators, and 4x4 gemm tiles (16 fused multiply-add chains per step).
// F16 converts through the FPU's fcvt; BF16 is a 16-bit shift.
#include "kernels/neon/common.h"

namespace spool::detail {
namespace {

// Loads 4 weights as floats.
struct LoadF32 {
  using T = float;
  static float32x4_t load4(const float* p) { return vld1q_f32(p); }
  static float one(const float* p) { return *p; }
};
struct LoadF16 {
  using T = uint16_t;
  static float32x4_t load4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static float one(const uint16_t* p) { return neon_h2f(*p); }
};
struct LoadBF16 {
  using T = uint16_t;
  static float32x4_t load4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static float one(const uint16_t* p) {
    const uint32_t bits = (uint32_t)*p << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class L>
struct FloatKernel {
  using T = typename L::T;

  // Every width, 1 x 1 included, computes a pair the same way (one vector
  // accumulator, then the lanes and the tail), so a row's result never
  // depends on the tile it went through; vec_dot alone uses dot() below.
  template <int R, int C>
  static void tile(SPOOL_NEON_TILE_ARGS) {
    {
      const T* wr[R];
      const float* ar[C];
      SPOOL_UNROLL for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const T*>(w + r * w_stride);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) ar[j] = reinterpret_cast<const float*>(a + j * a_stride);
      float32x4_t acc[R][C];
      SPOOL_UNROLL for (int r = 0; r < R; ++r)
        SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[r][j] = vdupq_n_f32(0.0f);
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        float32x4_t wv[R];
        SPOOL_UNROLL for (int r = 0; r < R; ++r) wv[r] = L::load4(wr[r] + i);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const float32x4_t av = vld1q_f32(ar[j] + i);
          SPOOL_UNROLL for (int r = 0; r < R; ++r) acc[r][j] = vfmaq_f32(acc[r][j], wv[r], av);
        }
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        SPOOL_UNROLL for (int r = 0; r < R; ++r) {
          float s = vaddvq_f32(acc[r][j]);
          for (int64_t k = i; k < n; ++k) s += L::one(wr[r] + k) * ar[j][k];
          c[j * ldc + r] = s;
        }
      }
    }
  }

  // One row pair: four accumulators hide the latency of the FMA chain.
  static float dot(int64_t n, const T* x, const float* y) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = vfmaq_f32(s0, L::load4(x + i), vld1q_f32(y + i));
      s1 = vfmaq_f32(s1, L::load4(x + i + 4), vld1q_f32(y + i + 4));
      s2 = vfmaq_f32(s2, L::load4(x + i + 8), vld1q_f32(y + i + 8));
      s3 = vfmaq_f32(s3, L::load4(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, L::load4(x + i), vld1q_f32(y + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; ++i) s += L::one(x + i) * y[i];
    return s;
  }
};

// vec_dot of a float type: the four-accumulator dot (not a tile; the tiles
// keep one accumulator per pair so that every width agrees).
template <class L>
float float_vec_dot(int64_t n, const void* w, const void* a) {
  return FloatKernel<L>::dot(n, static_cast<const typename L::T*>(w), static_cast<const float*>(a));
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vcombine_f16(vcvt_f16_f32(vld1q_f32(src + i)), vcvt_f16_f32(vld1q_f32(src + i + 4)));
    vst1q_u16(d + i, vreinterpretq_u16_f16(h));
  }
  for (; i < n; ++i) d[i] = neon_f2h(src[i]);
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(s + i));
    vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
  }
  for (; i < n; ++i) dst[i] = neon_h2f(s[i]);
}

// Round to nearest even on the upper 16 bits; NaNs stay NaN (quiet bit set),
// exactly as fp32_to_bf16.
uint16x4_t bf16_round4(float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb);
  const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  const uint32x4_t quiet = vorrq_u32(u, vdupq_n_u32(0x400000));
  return vshrn_n_u32(vbslq_u32(nan, quiet, rounded), 16);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_u16(d + i, vcombine_u16(bf16_round4(vld1q_f32(src + i)), bf16_round4(vld1q_f32(src + i + 4))));
  }
  for (; i < n; ++i) {
    d[i] = vget_lane_u16(bf16_round4(vdupq_n_f32(src[i])), 0);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint16x8_t h = vld1q_u16(s + i);
    vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
    vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
  }
  for (; i < n; ++i) dst[i] = LoadBF16::one(s + i);
}

}  // namespace

void fill_neon_float_kernels(KernelTable& t) {
  neon_set<FloatKernel<LoadF32>, 4, 4>(t, DType::F32);
  neon_set<FloatKernel<LoadF16>, 4, 4>(t, DType::F16);
  neon_set<FloatKernel<LoadBF16>, 4, 4>(t, DType::BF16);
  t.types[(uint32_t)DType::F32].vec_dot = float_vec_dot<LoadF32>;
  t.types[(uint32_t)DType::F16].vec_dot = float_vec_dot<LoadF16>;
  t.types[(uint32_t)DType::BF16].vec_dot = float_vec_dot<LoadBF16>;
  t.types[(uint32_t)DType::F16].quantize = quantize_f16;
  t.types[(uint32_t)DType::F16].dequantize = dequantize_f16;
  t.types[(uint32_t)DType::BF16].quantize = quantize_bf16;
  t.types[(uint32_t)DType::BF16].dequantize = dequantize_bf16;
}

}  // namespace spool::detail
