// Reference quantizers of the low-bit types (iq_blocks.h): plain
// nearest-point searches, not llama.cpp's importance-weighted ones. They make
// valid blocks for `spool synth` (which quantizes a pool of blocks once) and
// for tests; a real model is better quantized by llama.cpp's llama-quantize
// with an importance matrix. Each group's scale is chosen from a few
// candidates by its squared error, then the block scale is fixed and every
// group is searched again under its final, quantized scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"
#include "kernels/fill.h"

namespace spool {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float amax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// The grid point (of width w) nearest to target magnitudes t under scale s.
int nearest_point(const uint8_t* points, int n_points, int w, const float* t, float s, float* err) {
  int best = 0;
  float best_err = kInf;
  for (int p = 0; p < n_points; ++p) {
    float e = 0;
    for (int j = 0; j < w; ++j) {
      const float d = t[j] - s * (float)points[p * w + j];
      e += d * d;
    }
    if (e < best_err) best_err = e, best = p;
  }
  *err += best_err;
  return best;
}

// Signs of 8 weights with even parity (IQ2_XXS, IQ2_XS, IQ3_XXS store 7 sign
// bits and imply the 8th): an odd count flips the smallest weight, whose
// target magnitude then becomes negative (it is best served by a small level).
uint8_t even_signs(const float* x, float* t) {
  uint8_t s = 0;
  int smallest = 0;
  for (int j = 0; j < 8; ++j) {
    if (x[j] < 0) s |= (uint8_t)(1 << j);
    t[j] = std::fabs(x[j]);
    if (t[j] < t[smallest]) smallest = j;
  }
  if (__builtin_popcount(s) & 1) {
    s ^= (uint8_t)(1 << smallest);
    t[smallest] = -t[smallest];
  }
  return s;
}

uint8_t plain_signs(const float* x, float* t) {
  uint8_t s = 0;
  for (int j = 0; j < 8; ++j) {
    if (x[j] < 0) s |= (uint8_t)(1 << j);
    t[j] = std::fabs(x[j]);
  }
  return s;
}

// A group of n weights (n a multiple of 8) as signed points of `grid` under
// scale s: returns the squared error; idx receives one index per w weights,
// signs one byte per 8 weights.
float grid_group(const float* x, int n, const uint8_t* grid, int n_points, int w, bool parity, float s, int* idx,
                 uint8_t* signs) {
  float err = 0;
  for (int k = 0; k < n / 8; ++k) {
    float t[8];
    signs[k] = parity ? even_signs(x + 8 * k, t) : plain_signs(x + 8 * k, t);
    for (int h = 0; h < 8 / w; ++h) idx[k * (8 / w) + h] = nearest_point(grid, n_points, w, t + h * w, s, &err);
  }
  return err;
}

// The best float scale for a group among candidates around amax / top level.
template <class ErrFn>
float best_scale(float top_scale, ErrFn err_of) {
  float best = top_scale, best_err = kInf;
  for (float f = 0.6f; f <= 1.21f; f += 0.1f) {
    const float e = err_of(top_scale * f);
    if (e < best_err) best_err = e, best = top_scale * f;
  }
  return best;
}

// ---- IQ2 / IQ3 grid types --------------------------------------------------------------------

struct GridType {
  const uint8_t* grid;
  int n_points, width;
  bool parity;
  int group;          // weights per scale
  int top_level;      // the grid's largest level
  float step;         // scale = d * (bias + l) * step, l in 0..15 (IQ3_S: d * (1 + 2l))
  float bias;
};

// Chooses per-group float scales, then d and the 4-bit scale codes l[g];
// fills idx/signs for every 8-weight sub-group of the 256-weight block.
float grid_block(const float* x, const GridType& gt, int* l, int* idx, uint8_t* signs) {
  const int n_groups = kQKK / gt.group;
  float s[kQKK / 16];
  int tmp_idx[kQKK / 4];
  uint8_t tmp_signs[kQKK / 8];
  float max_s = 0;
  for (int g = 0; g < n_groups; ++g) {
    const float* xg = x + g * gt.group;
    const float top = amax(xg, gt.group) / (float)gt.top_level;
    s[g] = top == 0 ? 0 : best_scale(top, [&](float sc) {
      return grid_group(xg, gt.group, gt.grid, gt.n_points, gt.width, gt.parity, sc, tmp_idx, tmp_signs);
    });
    max_s = std::max(max_s, s[g]);
  }
  const float d = max_s / ((gt.bias + 15.0f) * gt.step);
  const float d16 = fp16_to_fp32(fp32_to_fp16(d));
  for (int g = 0; g < n_groups; ++g) {
    l[g] = d16 == 0 ? 0 : std::clamp((int)std::lround(s[g] / (d16 * gt.step) - gt.bias), 0, 15);
    const float sq = d16 * (gt.bias + (float)l[g]) * gt.step;
    grid_group(x + g * gt.group, gt.group, gt.grid, gt.n_points, gt.width, gt.parity, sq,
               idx + g * gt.group / gt.width, signs + g * gt.group / 8);
  }
  return d;
}

void quantize_iq2_xxs(const float* src, void* dst, int64_t n) {
  const IqCodebooks& cb = iq_codebooks();
  const GridType gt{&cb.iq2xxs[0][0], 256, 8, true, 32, 43, 0.25f, 0.5f};
  auto* y = static_cast<BlockIQ2_XXS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int l[8], idx[32];
    uint8_t signs[32];
    y[i].d = fp32_to_fp16(grid_block(src + i * kQKK, gt, l, idx, signs));
    for (int g = 0; g < 8; ++g) {
      uint32_t points = 0, meta = (uint32_t)l[g] << 28;
      for (int k = 0; k < 4; ++k) {
        points |= (uint32_t)idx[4 * g + k] << (8 * k);
        meta |= (uint32_t)(signs[4 * g + k] & 127) << (7 * k);
      }
      std::memcpy(y[i].qs + 4 * g, &points, 4);
      std::memcpy(y[i].qs + 4 * g + 2, &meta, 4);
    }
  }
}

void quantize_iq2_xs(const float* src, void* dst, int64_t n) {
  const IqCodebooks& cb = iq_codebooks();
  const GridType gt{&cb.iq2xs[0][0], 512, 8, true, 16, 43, 0.25f, 0.5f};
  auto* y = static_cast<BlockIQ2_XS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int l[16], idx[32];
    uint8_t signs[32];
    y[i].d = fp32_to_fp16(grid_block(src + i * kQKK, gt, l, idx, signs));
    for (int k = 0; k < 32; ++k) y[i].qs[k] = (uint16_t)(idx[k] | ((signs[k] & 127) << 9));
    for (int g = 0; g < 8; ++g) y[i].scales[g] = (uint8_t)(l[2 * g] | (l[2 * g + 1] << 4));
  }
}

void quantize_iq2_s(const float* src, void* dst, int64_t n) {
  const IqCodebooks& cb = iq_codebooks();
  const GridType gt{&cb.iq2s[0][0], 1024, 8, false, 16, 43, 0.25f, 0.5f};
  auto* y = static_cast<BlockIQ2_S*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int l[16], idx[32];
    uint8_t signs[32];
    y[i].d = fp32_to_fp16(grid_block(src + i * kQKK, gt, l, idx, signs));
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int k = 0; k < 32; ++k) {
      y[i].qs[k] = (uint8_t)(idx[k] & 0xff);
      y[i].qh[k / 4] |= (uint8_t)(((idx[k] >> 8) & 3) << (2 * (k % 4)));
      y[i].qs[kQKK / 8 + k] = signs[k];
    }
    for (int g = 0; g < 8; ++g) y[i].scales[g] = (uint8_t)(l[2 * g] | (l[2 * g + 1] << 4));
  }
}

void quantize_iq3_xxs(const float* src, void* dst, int64_t n) {
  const IqCodebooks& cb = iq_codebooks();
  const GridType gt{&cb.iq3xxs[0][0], 256, 4, true, 32, 62, 0.5f, 0.5f};
  auto* y = static_cast<BlockIQ3_XXS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int l[8], idx[64];
    uint8_t signs[32];
    y[i].d = fp32_to_fp16(grid_block(src + i * kQKK, gt, l, idx, signs));
    for (int k = 0; k < 64; ++k) y[i].qs[k] = (uint8_t)idx[k];
    for (int g = 0; g < 8; ++g) {
      uint32_t meta = (uint32_t)l[g] << 28;
      for (int k = 0; k < 4; ++k) meta |= (uint32_t)(signs[4 * g + k] & 127) << (7 * k);
      std::memcpy(y[i].qs + kQKK / 4 + 4 * g, &meta, 4);
    }
  }
}

void quantize_iq3_s(const float* src, void* dst, int64_t n) {
  const IqCodebooks& cb = iq_codebooks();
  // scale = d * (1 + 2l) = d * (0.5 + l) * 2
  const GridType gt{&cb.iq3s[0][0], 512, 4, false, 32, 15, 2.0f, 0.5f};
  auto* y = static_cast<BlockIQ3_S*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int l[8], idx[64];
    uint8_t signs[32];
    y[i].d = fp32_to_fp16(grid_block(src + i * kQKK, gt, l, idx, signs));
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int k = 0; k < 64; ++k) {
      y[i].qs[k] = (uint8_t)(idx[k] & 0xff);
      y[i].qh[k / 8] |= (uint8_t)(((idx[k] >> 8) & 1) << (k % 8));
    }
    std::memcpy(y[i].signs, signs, 32);
    for (int g = 0; g < 4; ++g) y[i].scales[g] = (uint8_t)(l[2 * g] | (l[2 * g + 1] << 4));
  }
}

// ---- IQ1: ternary points shifted by +-delta ------------------------------------------------------

// 8 weights as dl * (point + delta): the nearest of the 2048 points. Every
// point's levels are -1, 0 or 1, so the error of each weight at each level is
// computed once and a point's error is 8 table lookups.
int iq1_point(const float* x, float dl, float delta, float* err) {
  const IqCodebooks& cb = iq_codebooks();
  float e[8][3];
  for (int j = 0; j < 8; ++j)
    for (int v = 0; v < 3; ++v) {
      const float d = x[j] - dl * ((float)(v - 1) + delta);
      e[j][v] = d * d;
    }
  int best = 0;
  float best_err = kInf;
  for (int p = 0; p < 2048; ++p) {
    const int8_t* g = cb.iq1s[p];
    const float pe = e[0][g[0] + 1] + e[1][g[1] + 1] + e[2][g[2] + 1] + e[3][g[3] + 1] + e[4][g[4] + 1] +
                     e[5][g[5] + 1] + e[6][g[6] + 1] + e[7][g[7] + 1];
    if (pe < best_err) best_err = pe, best = p;
  }
  *err += best_err;
  return best;
}

// n weights (a multiple of 8) under one scale; both delta signs tried unless
// fixed (>= 0: the sign bit). Returns the error; idx and the sign bit out.
float iq1_group(const float* x, int n, float dl, int fixed_sign, int* idx, int* sign) {
  const float delta = iq_codebooks().iq1_delta;
  float best = kInf;
  for (int sg = 0; sg < 2; ++sg) {
    if (fixed_sign >= 0 && sg != fixed_sign) continue;
    float err = 0;
    int tmp[4];
    for (int k = 0; k < n / 8; ++k) tmp[k] = iq1_point(x + 8 * k, dl, sg ? -delta : delta, &err);
    if (err < best) {
      best = err;
      *sign = sg;
      std::copy(tmp, tmp + n / 8, idx);
    }
  }
  return best;
}

// The 3-bit code l of a group scale s under block scale d: s ~ d * (2l + 1).
int iq1_scale_code(float s, float d) {
  return d == 0 ? 0 : std::clamp((int)std::lround((s / d - 1) / 2), 0, 7);
}

void quantize_iq1_s(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ1_S*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float s[8], max_s = 0;
    for (int g = 0; g < 8; ++g) {
      int idx[4], sign;
      const float top = amax(x + 32 * g, 32) / 1.125f;
      s[g] = top == 0 ? 0 : best_scale(top, [&](float sc) { return iq1_group(x + 32 * g, 32, sc, -1, idx, &sign); });
      max_s = std::max(max_s, s[g]);
    }
    const float d = fp16_to_fp32(fp32_to_fp16(max_s / 15.0f));
    y[i].d = fp32_to_fp16(max_s / 15.0f);
    for (int g = 0; g < 8; ++g) {
      const int l = iq1_scale_code(s[g], d);
      int idx[4], sign = 0;
      iq1_group(x + 32 * g, 32, d * (float)(2 * l + 1), -1, idx, &sign);
      uint16_t h = (uint16_t)((l << 12) | (sign << 15));
      for (int k = 0; k < 4; ++k) {
        y[i].qs[4 * g + k] = (uint8_t)(idx[k] & 0xff);
        h |= (uint16_t)(((idx[k] >> 8) & 7) << (3 * k));
      }
      y[i].qh[g] = h;
    }
  }
}

void quantize_iq1_m(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ1_M*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float s[16], max_s = 0;
    for (int g = 0; g < 16; ++g) {
      const float top = amax(x + 16 * g, 16) / 1.125f;
      s[g] = top == 0 ? 0 : best_scale(top, [&](float sc) {
        float e = 0;
        for (int k = 0; k < 2; ++k) {
          int idx, sign;
          e += iq1_group(x + 16 * g + 8 * k, 8, sc, -1, &idx, &sign);
        }
        return e;
      });
      max_s = std::max(max_s, s[g]);
    }
    const uint16_t d16 = fp32_to_fp16(max_s / 15.0f);
    const float d = fp16_to_fp32(d16);
    uint16_t sc[4] = {0, 0, 0, 0};
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int g = 0; g < 16; ++g) {
      const int l = iq1_scale_code(s[g], d);
      sc[g / 4] |= (uint16_t)(l << (3 * (g % 4)));
      for (int k = 0; k < 2; ++k) {
        const int sub = 2 * g + k;  // 8-weight sub-group 0..31
        int idx, sign = 0;
        iq1_group(x + 8 * sub, 8, d * (float)(2 * l + 1), -1, &idx, &sign);
        y[i].qs[sub] = (uint8_t)(idx & 0xff);
        y[i].qh[sub / 2] |= (uint8_t)((((idx >> 8) & 7) | (sign << 3)) << (4 * (sub % 2)));
      }
    }
    // The block scale's 16 bits go to the top nibbles of the four scale words.
    for (int w = 0; w < 4; ++w) sc[w] |= (uint16_t)(((d16 >> (4 * w)) & 0xf) << 12);
    std::memcpy(y[i].scales, sc, sizeof sc);
  }
}

// ---- IQ4: 16 non-linear levels ------------------------------------------------------------------

int nearest_level(float v) {
  const int8_t* lv = iq_codebooks().iq4nl;
  int best = 0;
  for (int k = 1; k < 16; ++k)
    if (std::fabs(v - lv[k]) < std::fabs(v - lv[best])) best = k;
  return best;
}

float iq4_error(const float* x, int n, float s) {
  const int8_t* lv = iq_codebooks().iq4nl;
  float e = 0;
  for (int j = 0; j < n; ++j) {
    const float d = x[j] - s * (float)lv[s == 0 ? 8 : nearest_level(x[j] / s)];
    e += d * d;
  }
  return e;
}

// The group's scale, signed so that its largest weight meets level -127.
float iq4_scale(const float* x, int n) {
  int m = 0;
  for (int j = 1; j < n; ++j)
    if (std::fabs(x[j]) > std::fabs(x[m])) m = j;
  if (x[m] == 0) return 0;
  return best_scale(x[m] / -127.0f, [&](float s) { return iq4_error(x, n, s); });
}

void iq4_pack(const float* x, float s, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) {
    const int a = s == 0 ? 8 : nearest_level(x[j] / s), b = s == 0 ? 8 : nearest_level(x[j + 16] / s);
    qs[j] = (uint8_t)(a | (b << 4));
  }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK4NL; ++i) {
    const float* x = src + i * kQK4NL;
    y[i].d = fp32_to_fp16(iq4_scale(x, kQK4NL));
    iq4_pack(x, fp16_to_fp32(y[i].d), y[i].qs);
  }
}

void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float s[8], max_abs = 0;
    for (int g = 0; g < 8; ++g) {
      s[g] = iq4_scale(x + 32 * g, 32);
      max_abs = std::max(max_abs, std::fabs(s[g]));
    }
    y[i].d = fp32_to_fp16(max_abs / 32.0f);
    const float d = fp16_to_fp32(y[i].d);
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    for (int g = 0; g < 8; ++g) {
      const int ls = d == 0 ? 32 : std::clamp((int)std::lround(s[g] / d) + 32, 0, 63);
      y[i].scales_l[g / 2] |= (uint8_t)((ls & 0xf) << (4 * (g % 2)));
      y[i].scales_h |= (uint16_t)((ls >> 4) << (2 * g));
      iq4_pack(x + 32 * g, d * (float)(ls - 32), y[i].qs + 16 * g);
    }
  }
}

// ---- ternary and 1/2-bit ----------------------------------------------------------------------

int ternary(float v, float inv) { return std::clamp((int)std::lround(v * inv), -1, 1) + 1; }  // 0, 1, 2

void quantize_tq1_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockTQ1_0*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    const float d = amax(x, kQKK), inv = d == 0 ? 0 : 1 / d;
    y[i].d = fp32_to_fp16(d);
    // Base-3 digits, most significant first, scaled to a byte by ceil(v * 256 / 243).
    const auto pack = [&](const float* e, int stride, int digits) {
      int v = 0;
      for (int k = 0; k < digits; ++k) v = v * 3 + ternary(e[k * stride], inv);
      for (int k = digits; k < 5; ++k) v *= 3;
      return (uint8_t)((v * 256 + 242) / 243);
    };
    for (int m = 0; m < 32; ++m) y[i].qs[m] = pack(x + m, 32, 5);
    for (int m = 0; m < 16; ++m) y[i].qs[32 + m] = pack(x + 160 + m, 16, 5);
    for (int m = 0; m < 4; ++m) y[i].qh[m] = pack(x + 240 + m, 4, 4);
  }
}

void quantize_tq2_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockTQ2_0*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    const float d = amax(x, kQKK), inv = d == 0 ? 0 : 1 / d;
    y[i].d = fp32_to_fp16(d);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int j = 0; j < kQKK / 4; j += 32)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m) y[i].qs[j + m] |= (uint8_t)(ternary(x[4 * j + 32 * l + m], inv) << (2 * l));
  }
}

void quantize_q1_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ1_0*>(dst);
  for (int64_t i = 0; i < n / kQK1_0; ++i) {
    const float* x = src + i * kQK1_0;
    double mean_abs = 0;  // the error-minimising magnitude of +-d
    for (int j = 0; j < kQK1_0; ++j) mean_abs += std::fabs(x[j]);
    y[i].d = fp32_to_fp16((float)(mean_abs / kQK1_0));
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int j = 0; j < kQK1_0; ++j)
      if (x[j] >= 0) y[i].qs[j / 8] |= (uint8_t)(1 << (j % 8));
  }
}

void quantize_q2_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_0*>(dst);
  for (int64_t i = 0; i < n / kQK2_0; ++i) {
    const float* x = src + i * kQK2_0;
    float lo = 0, hi = 0;
    for (int j = 0; j < kQK2_0; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    const auto err = [&](float d) {
      float e = 0;
      for (int j = 0; j < kQK2_0; ++j) {
        const float r = x[j] - d * (float)(std::clamp((int)std::lround(x[j] / d), -1, 2));
        e += r * r;
      }
      return e;
    };
    const float top = std::max(hi / 2, -lo);
    const float d = top == 0 ? 0 : best_scale(top, err);
    y[i].d = fp32_to_fp16(d);
    const float dq = fp16_to_fp32(y[i].d);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int j = 0; j < kQK2_0; ++j) {
      const int q = dq == 0 ? 1 : std::clamp((int)std::lround(x[j] / dq), -1, 2) + 1;
      y[i].qs[j / 4] |= (uint8_t)(q << (2 * (j % 4)));
    }
  }
}

}  // namespace

namespace detail {

void fill_ref_iq_quantizers(KernelTable& t) {
  const auto set = [&](DType type, QuantizeRowFn fn) { t.types[(uint32_t)type].quantize = fn; };
  set(DType::IQ2_XXS, quantize_iq2_xxs);
  set(DType::IQ2_XS, quantize_iq2_xs);
  set(DType::IQ2_S, quantize_iq2_s);
  set(DType::IQ3_XXS, quantize_iq3_xxs);
  set(DType::IQ3_S, quantize_iq3_s);
  set(DType::IQ1_S, quantize_iq1_s);
  set(DType::IQ1_M, quantize_iq1_m);
  set(DType::IQ4_NL, quantize_iq4_nl);
  set(DType::IQ4_XS, quantize_iq4_xs);
  set(DType::TQ1_0, quantize_tq1_0);
  set(DType::TQ2_0, quantize_tq2_0);
  set(DType::Q1_0, quantize_q1_0);
  set(DType::Q2_0, quantize_q2_0);
}

}  // namespace detail
}  // namespace spool
