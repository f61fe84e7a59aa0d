// Scalar reference kernels for the float types (F32, F16, BF16) and the
// legacy 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1). They
// define what every SIMD kernel must compute: integer dot per block, times
// the product of the two blocks' scales, as ggml does.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/fill.h"

namespace spool::detail {
namespace {

// ---- float types ------------------------------------------------------------

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
}
void dequantize_f16(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
}
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
}

// Float dots accumulate in double: the reference should be the most exact
// thing the tests can compare against.
float vec_dot_f32(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const float*>(w);
  auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (double)x[i] * y[i];
  return (float)sum;
}
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const uint16_t*>(w);
  auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (double)fp16_to_fp32(x[i]) * y[i];
  return (float)sum;
}
float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const uint16_t*>(w);
  auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (double)bf16_to_fp32(x[i]) * y[i];
  return (float)sum;
}

// ---- legacy block types -----------------------------------------------------

// Signed value of largest magnitude; symmetric types map it to -2^(bits-1) so
// the full negative range is used.
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
  }
  return max;
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, (int)(x[j] * id + 8.5f));
      const int q1 = std::min(15, (int)(x[j + 16] * id + 8.5f));
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}
void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[i * kQK + j] = ((x[i].qs[j] & 0xF) - 8) * d;
      dst[i * kQK + j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float mn = *std::min_element(x, x + kQK), mx = *std::max_element(x, x + kQK);
    const float d = (mx - mn) / 15.0f, id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::clamp((int)((x[j] - mn) * id + 0.5f), 0, 15);
      const int q1 = std::clamp((int)((x[j + 16] - mn) * id + 0.5f), 0, 15);
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}
void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[i * kQK + j] = (x[i].qs[j] & 0xF) * d + m;
      dst[i * kQK + j + 16] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q5 types: the fifth bit of element j lives in bit j of the 32-bit qh.
void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, (int)(x[j] * id + 16.5f));
      const int q1 = std::min(31, (int)(x[j + 16] * id + 16.5f));
      y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}
void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[i * kQK + j] = (q0 - 16) * d;
      dst[i * kQK + j + 16] = (q1 - 16) * d;
    }
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float mn = *std::min_element(x, x + kQK), mx = *std::max_element(x, x + kQK);
    const float d = (mx - mn) / 31.0f, id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::clamp((int)((x[j] - mn) * id + 0.5f), 0, 31);
      const int q1 = std::clamp((int)((x[j + 16] - mn) * id + 0.5f), 0, 31);
      y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}
void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[i * kQK + j] = q0 * d + m;
      dst[i * kQK + j + 16] = q1 * d + m;
    }
  }
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
  }
}
void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = x[i].qs[j] * d;
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
      sum += y[i].qs[j];
    }
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * (float)sum);
  }
}
void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = x[i].qs[j] * d;
  }
}

// ---- dots against Q8_0 / Q8_1 -------------------------------------------------

float vec_dot_q4_0(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ4_0*>(w);
  auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    }
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

// Offset types: sum((q d + m) a) = d da sum(q qa) + m * (da sum(qa)), and the
// second factor is Q8_1's precomputed s.
float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ4_1*>(w);
  auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    }
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

float vec_dot_q5_0(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ5_0*>(w);
  auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = ((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
    }
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ5_1*>(w);
  auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
    }
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ8_0*>(w);
  auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

// Q8_1 as a weight type is unusual but harmless: dot it against Q8_1.
float vec_dot_q8_1(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ8_1*>(w);
  auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += sumi * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

void set(KernelTable& t, DType type, QuantizeRowFn q, DequantizeRowFn dq, VecDotFn dot) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.quantize = q;
  k.dequantize = dq;
  k.vec_dot = dot;
}

}  // namespace

namespace {

// Attention row kernels (RowKernels).
void dot_rows(int64_t d, const float* q, const float* k, size_t stride, int64_t n, float* out) {
  for (int64_t p = 0; p < n; ++p) {
    float s = 0;
    for (int64_t i = 0; i < d; ++i) s += q[i] * k[p * stride + i];
    out[p] = s;
  }
}

void axpy_rows(int64_t d, const float* w, const float* v, size_t stride, int64_t n, float* out) {
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < d; ++i) out[i] += w[p] * v[p * stride + i];
}

void dot_rows_multi(int64_t d, const float* q, int n_q, const float* k, size_t stride, int64_t n, float* out,
                    size_t out_stride) {
  for (int h = 0; h < n_q; ++h) dot_rows(d, q + h * d, k, stride, n, out + h * out_stride);
}

void axpy_rows_multi(int64_t d, const float* w, size_t w_stride, int n_q, const float* v, size_t stride, int64_t n,
                     float* out) {
  for (int h = 0; h < n_q; ++h) axpy_rows(d, w + h * w_stride, v, stride, n, out + h * d);
}

void dot_rows_multi_f16(int64_t d, const float* q, int n_q, const uint16_t* k, size_t stride, int64_t n, float* out,
                        size_t out_stride) {
  for (int h = 0; h < n_q; ++h)
    for (int64_t p = 0; p < n; ++p) {
      float s = 0;
      for (int64_t i = 0; i < d; ++i) s += q[h * d + i] * fp16_to_fp32(k[p * stride + i]);
      out[h * out_stride + p] = s;
    }
}

void axpy_rows_multi_f16(int64_t d, const float* w, size_t w_stride, int n_q, const uint16_t* v, size_t stride,
                         int64_t n, float* out) {
  for (int h = 0; h < n_q; ++h)
    for (int64_t p = 0; p < n; ++p)
      for (int64_t i = 0; i < d; ++i) out[h * d + i] += w[h * w_stride + p] * fp16_to_fp32(v[p * stride + i]);
}

float exp_sum(float* x, int64_t n, float max) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - max));
  return sum;
}

void swiglu(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace

void fill_ref_float_kernels(KernelTable& t) {
  t.rows = {dot_rows, axpy_rows, exp_sum, swiglu, dot_rows_multi, axpy_rows_multi, dot_rows_multi_f16,
            axpy_rows_multi_f16};
  set(t, DType::F32, quantize_f32, dequantize_f32, vec_dot_f32);
  set(t, DType::F16, quantize_f16, dequantize_f16, vec_dot_f16);
  set(t, DType::BF16, quantize_bf16, dequantize_bf16, vec_dot_bf16);
}

void fill_ref_legacy_kernels(KernelTable& t) {
  set(t, DType::Q4_0, quantize_q4_0, dequantize_q4_0, vec_dot_q4_0);
  set(t, DType::Q4_1, quantize_q4_1, dequantize_q4_1, vec_dot_q4_1);
  set(t, DType::Q5_0, quantize_q5_0, dequantize_q5_0, vec_dot_q5_0);
  set(t, DType::Q5_1, quantize_q5_1, dequantize_q5_1, vec_dot_q5_1);
  set(t, DType::Q8_0, quantize_q8_0, dequantize_q8_0, vec_dot_q8_0);
  set(t, DType::Q8_1, quantize_q8_1, dequantize_q8_1, vec_dot_q8_1);
}

}  // namespace spool::detail
