// Scalar reference kernels for the K-quants (256-element super-blocks with
// 6- or 4-bit sub-block scales): quantize with a weighted scale search,
// dequantize, and dot against Q8_K. Each dot first unpacks a block to plain
// int8 values and integer sub-block scales, then does the integer dot; SIMD
// kernels fuse these steps but must give the same numbers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/fill.h"
#include "kernels/ref/kquant_search.h"

namespace spool::detail {
namespace {

// Importance of each element for the scale search: big values matter more,
// but not so much that small ones are flattened to zero.
void importance(const float* x, int n, float* w) {
  float sum2 = 0;
  for (int i = 0; i < n; ++i) sum2 += x[i] * x[i];
  const float av = std::sqrt(sum2 / n);
  for (int i = 0; i < n; ++i) w[i] = av + std::fabs(x[i]);
}

// Quantizes a list of non-negative floats to n-bit integers against the
// largest; returns the step (the float per integer unit).
float quantize_scales_unsigned(const float* v, int n, int nmax, uint8_t* out) {
  const float vmax = *std::max_element(v, v + n);
  const float inv = vmax > 0 ? nmax / vmax : 0.0f;
  for (int i = 0; i < n; ++i) out[i] = (uint8_t)std::min(nmax, nearest_int(inv * v[i]));
  return vmax / nmax;
}

// ---- Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scale and min ------------------

void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
      q[j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fills d, dmin, scales and the
// final levels L[256] computed with the rounded scales.
void quantize_k4_levels(const float* x, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* scales,
                        uint8_t* L) {
  float w[32], sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    importance(x + 32 * j, 32, w);
    sc[j] = search_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j]);
  }
  uint8_t ls[8], lm[8];
  *d = fp32_to_fp16(quantize_scales_unsigned(sc, 8, 63, ls));
  *dmin = fp32_to_fp16(quantize_scales_unsigned(mn, 8, 63, lm));
  pack_scale_min_k4(ls, lm, scales);
  const float df = fp16_to_fp32(*d), mf = fp16_to_fp32(*dmin);
  for (int j = 0; j < 8; ++j) {
    const float step = df * ls[j], offset = mf * lm[j];
    for (int i = 0; i < 32; ++i) {
      const int l = step > 0 ? nearest_int((x[32 * j + i] + offset) / step) : 0;
      L[32 * j + i] = (uint8_t)std::clamp(l, 0, nmax);
    }
  }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_k4_levels(src + i * kQKK, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    // Each 64-element chunk: first 32 in low nibbles, next 32 in high.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_k4_levels(src + i * kQKK, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    // Chunk c's fifth bits go to bits 2c (first 32) and 2c+1 (next 32) of qh.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int l0 = L[64 * c + l], l1 = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = (uint8_t)((l0 & 0xF) | ((l1 & 0xF) << 4));
        y[i].qh[l] |= (uint8_t)(((l0 >> 4) << (2 * c)) | ((l1 >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Unpacks to levels (0..nmax) and per-32 integer scales and mins.
void unpack_q4_k(const BlockQ4_K& b, uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, b.scales, &sc[j], &m[j]);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = b.qs[32 * c + l] & 0xF;
      q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
    }
  }
}
void unpack_q5_k(const BlockQ5_K& b, uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, b.scales, &sc[j], &m[j]);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = (uint8_t)((b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4));
      q[64 * c + 32 + l] = (uint8_t)((b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
    }
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ4_K*>(src);
  uint8_t q[kQKK], sc[8], m[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q4_k(x[i], q, sc, m);
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int k = 0; k < kQKK; ++k) dst[i * kQKK + k] = d * sc[k / 32] * q[k] - dmin * m[k / 32];
  }
}
void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ5_K*>(src);
  uint8_t q[kQKK], sc[8], m[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q5_k(x[i], q, sc, m);
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int k = 0; k < kQKK; ++k) dst[i * kQKK + k] = d * sc[k / 32] * q[k] - dmin * m[k / 32];
  }
}

// sum over sub-blocks of 32: sc * dot(q, a); the mins pair with bsums.
float dot_k4_block(const uint8_t* q, const uint8_t* sc, const uint8_t* m, float d, float dmin,
                   const BlockQ8_K& y) {
  int acc = 0, accm = 0;
  for (int j = 0; j < 8; ++j) {
    int s = 0;
    for (int l = 0; l < 32; ++l) s += q[32 * j + l] * y.qs[32 * j + l];
    acc += sc[j] * s;
    accm += m[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return y.d * (d * acc - dmin * accm);
}

float vec_dot_q4_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ4_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK], sc[8], m[8];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q4_k(x[i], q, sc, m);
    sum += dot_k4_block(q, sc, m, fp16_to_fp32(x[i].d), fp16_to_fp32(x[i].dmin), y[i]);
  }
  return sum;
}
float vec_dot_q5_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ5_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK], sc[8], m[8];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q5_k(x[i], q, sc, m);
    sum += dot_k4_block(q, sc, m, fp16_to_fp32(x[i].d), fp16_to_fp32(x[i].dmin), y[i]);
  }
  return sum;
}

// ---- Q6_K: 16 sub-blocks of 16, int8 scales, 6-bit levels ---------------------

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float w[kQKK], sc[16];
    int8_t L[kQKK];
    for (int k = 0; k < kQKK; ++k) w[k] = x[k] * x[k];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = search_scale_symmetric(16, 32, x + 16 * j, w + 16 * j, L + 16 * j);
      if (std::fabs(sc[j]) > amax) { amax = std::fabs(sc[j]); max_scale = sc[j]; }
    }
    // The scale of largest magnitude maps to -128, the int8 end with room.
    const float iscale = amax > 0 ? -128.0f / max_scale : 0.0f;
    y[i].d = fp32_to_fp16(amax > 0 ? 1.0f / iscale : 0.0f);
    const float d = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = (int8_t)std::min(127, nearest_int(iscale * sc[j]));
      const float step = d * y[i].scales[j];
      for (int l = 0; l < 16; ++l) {
        const int q = step != 0 ? nearest_int(x[16 * j + l] / step) : 0;
        L[16 * j + l] = (int8_t)(std::clamp(q, -32, 31) + 32);
      }
    }
    // Each half of 128: ql low nibbles hold 0-31 / 32-63, high nibbles
    // 64-95 / 96-127; qh packs the top 2 bits of all four quarters.
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                          ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

void unpack_q6_k(const BlockQ6_K& b, int8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* o = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ6_K*>(src);
  int8_t q[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q6_k(x[i], q);
    const float d = fp16_to_fp32(x[i].d);
    for (int k = 0; k < kQKK; ++k) dst[i * kQKK + k] = d * x[i].scales[k / 16] * q[k];
  }
}

// Dot of signed levels with per-16 integer scales (Q6_K, Q3_K).
int dot_signed_16(const int8_t* q, const int8_t* sc, const BlockQ8_K& y) {
  int acc = 0;
  for (int j = 0; j < 16; ++j) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += q[16 * j + l] * y.qs[16 * j + l];
    acc += sc[j] * s;
  }
  return acc;
}

float vec_dot_q6_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ6_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q6_k(x[i], q);
    sum += y[i].d * fp16_to_fp32(x[i].d) * dot_signed_16(q, x[i].scales, y[i]);
  }
  return sum;
}

// ---- Q3_K: 16 sub-blocks of 16, 6-bit signed scales, 3-bit levels -----------

void pack_scales_q3_k(const int8_t* ls, uint8_t* packed) {  // ls in 0..63
  std::memset(packed, 0, 12);
  for (int j = 0; j < 16; ++j) {
    if (j < 8) packed[j] = (uint8_t)(ls[j] & 0xF);
    else packed[j - 8] |= (uint8_t)((ls[j] & 0xF) << 4);
    packed[8 + j % 4] |= (uint8_t)((ls[j] >> 4) << (2 * (j / 4)));
  }
}

void quantize_q3_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float w[kQKK], sc[16];
    int8_t L[kQKK], ls[16];
    for (int k = 0; k < kQKK; ++k) w[k] = x[k] * x[k];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = search_scale_symmetric(16, 4, x + 16 * j, w + 16 * j, L + 16 * j);
      if (std::fabs(sc[j]) > amax) { amax = std::fabs(sc[j]); max_scale = sc[j]; }
    }
    const float iscale = amax > 0 ? -32.0f / max_scale : 0.0f;
    for (int j = 0; j < 16; ++j) ls[j] = (int8_t)(std::clamp(nearest_int(iscale * sc[j]), -32, 31) + 32);
    pack_scales_q3_k(ls, y[i].scales);
    y[i].d = fp32_to_fp16(amax > 0 ? 1.0f / iscale : 0.0f);
    const float d = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float step = d * (ls[j] - 32);
      for (int l = 0; l < 16; ++l) {
        const int q = step != 0 ? nearest_int(x[16 * j + l] / step) : 0;
        L[16 * j + l] = (int8_t)(std::clamp(q, -4, 3) + 4);
      }
    }
    // Bit k/32 of hmask[k % 32] is set when level k is >= 0 (stored +4 >= 4);
    // the low two bits of level 128h + 32c + l sit at bits 2c of qs[32h + l].
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int k = 0; k < kQKK; ++k) {
      int l = L[k];
      if (l > 3) {
        y[i].hmask[k % 32] |= (uint8_t)(1 << (k / 32));
        l -= 4;
      }
      const int h = k / 128, c = (k % 128) / 32, p = k % 32;
      y[i].qs[32 * h + p] |= (uint8_t)(l << (2 * c));
    }
  }
}

void unpack_q3_k(const BlockQ3_K& b, int8_t* q, int8_t* sc) {
  unpack_scales_q3_k(b.scales, sc);
  for (int j = 0; j < 16; ++j) sc[j] = (int8_t)(sc[j] - 32);
  for (int k = 0; k < kQKK; ++k) {
    const int h = k / 128, c = (k % 128) / 32, p = k % 32;
    const int low = (b.qs[32 * h + p] >> (2 * c)) & 3;
    q[k] = (int8_t)(low - ((b.hmask[p] >> (k / 32)) & 1 ? 0 : 4));
  }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ3_K*>(src);
  int8_t q[kQKK], sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q3_k(x[i], q, sc);
    const float d = fp16_to_fp32(x[i].d);
    for (int k = 0; k < kQKK; ++k) dst[i * kQKK + k] = d * sc[k / 16] * q[k];
  }
}

float vec_dot_q3_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ3_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK], sc[16];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q3_k(x[i], q, sc);
    sum += y[i].d * fp16_to_fp32(x[i].d) * dot_signed_16(q, sc, y[i]);
  }
  return sum;
}

// ---- Q2_K: 16 sub-blocks of 16, 4-bit scale and min, 2-bit levels -------------

void quantize_q2_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float w[16], sc[16], mn[16];
    uint8_t L[kQKK], ls[16], lm[16];
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      sc[j] = search_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mn[j]);
    }
    y[i].d = fp32_to_fp16(quantize_scales_unsigned(sc, 16, 15, ls));
    y[i].dmin = fp32_to_fp16(quantize_scales_unsigned(mn, 16, 15, lm));
    const float d = fp16_to_fp32(y[i].d), dmin = fp16_to_fp32(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = (uint8_t)(ls[j] | (lm[j] << 4));
      const float step = d * ls[j], offset = dmin * lm[j];
      for (int l = 0; l < 16; ++l) {
        const int q = step > 0 ? nearest_int((x[16 * j + l] + offset) / step) : 0;
        L[16 * j + l] = (uint8_t)std::clamp(q, 0, 3);
      }
    }
    // Level 128h + 32c + l sits at bits 2c of qs[32h + l].
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int k = 0; k < kQKK; ++k) {
      const int h = k / 128, c = (k % 128) / 32, p = k % 32;
      y[i].qs[32 * h + p] |= (uint8_t)(L[k] << (2 * c));
    }
  }
}

void unpack_q2_k(const BlockQ2_K& b, uint8_t* q) {
  for (int k = 0; k < kQKK; ++k) {
    const int h = k / 128, c = (k % 128) / 32, p = k % 32;
    q[k] = (b.qs[32 * h + p] >> (2 * c)) & 3;
  }
}

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ2_K*>(src);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q2_k(x[i], q);
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int k = 0; k < kQKK; ++k) {
      const uint8_t s = x[i].scales[k / 16];
      dst[i * kQKK + k] = d * (s & 0xF) * q[k] - dmin * (s >> 4);
    }
  }
}

float vec_dot_q2_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ2_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    unpack_q2_k(x[i], q);
    int acc = 0, accm = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * j + l] * y[i].qs[16 * j + l];
      acc += (x[i].scales[j] & 0xF) * s;
      accm += (x[i].scales[j] >> 4) * y[i].bsums[j];
    }
    sum += y[i].d * (fp16_to_fp32(x[i].d) * acc - fp16_to_fp32(x[i].dmin) * accm);
  }
  return sum;
}

// ---- Q8_K: the activation type ----------------------------------------------

void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float amax = 0, max = 0;
    for (int k = 0; k < kQKK; ++k) {
      if (std::fabs(x[k]) > amax) { amax = std::fabs(x[k]); max = x[k]; }
    }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int k = 0; k < kQKK; ++k) y[i].qs[k] = (int8_t)std::min(127, nearest_int(iscale * x[k]));
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += y[i].qs[16 * j + l];
      y[i].bsums[j] = (int16_t)s;
    }
    y[i].d = 1.0f / iscale;
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int k = 0; k < kQKK; ++k) dst[i * kQKK + k] = x[i].d * x[i].qs[k];
  }
}

float vec_dot_q8_k(int64_t n, const void* w, const void* a) {
  auto* x = static_cast<const BlockQ8_K*>(w);
  auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int s = 0;
    for (int k = 0; k < kQKK; ++k) s += x[i].qs[k] * y[i].qs[k];
    sum += x[i].d * y[i].d * s;
  }
  return sum;
}

}  // namespace

void fill_ref_kquant_kernels(KernelTable& t) {
  auto set = [&](DType type, QuantizeRowFn q, DequantizeRowFn dq, VecDotFn dot) {
    TypeKernels& k = t.types[(uint32_t)type];
    k.quantize = q;
    k.dequantize = dq;
    k.vec_dot = dot;
  };
  set(DType::Q2_K, quantize_q2_k, dequantize_q2_k, vec_dot_q2_k);
  set(DType::Q3_K, quantize_q3_k, dequantize_q3_k, vec_dot_q3_k);
  set(DType::Q4_K, quantize_q4_k, dequantize_q4_k, vec_dot_q4_k);
  set(DType::Q5_K, quantize_q5_k, dequantize_q5_k, vec_dot_q5_k);
  set(DType::Q6_K, quantize_q6_k, dequantize_q6_k, vec_dot_q6_k);
  set(DType::Q8_K, quantize_q8_k, dequantize_q8_k, vec_dot_q8_k);
}

}  // namespace spool::detail
