// The low-bit GGUF types (IQ1-IQ4, TQ, Q1_0/Q2_0) as one unpack() each: a
// block becomes integer levels and one float scale per group of weights, so
// that weight i is scale[i / kGroup] * level[i] exactly as the format defines
// it (IQ1's +-1/8 delta becomes levels 8 * point +- 1 under scale / 8, which
// rounds the same). The scalar reference (ref/iq.cpp) is written over these;
// the SIMD tables use them for the types they have no vector unpack of.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"

namespace spool::detail::iq {
// Included by files compiled for different instruction sets: internal linkage.
namespace {

// Signed grid levels of 8 weights: grid point p, sign pattern byte s.
inline void signed_points(int8_t* q, const uint8_t* p, uint8_t s, int n = 8) {
  for (int j = 0; j < n; ++j) q[j] = (int8_t)((s >> j) & 1 ? -(int)p[j] : (int)p[j]);
}

// IQ2's 4-bit scale code l: d * (l + 1/2) / 4, evaluated in the format's order.
inline float iq2_scale(float d, int l) { return d * (0.5f + (float)l) * 0.25f; }

struct IQ2_XXS {
  using Block = BlockIQ2_XXS;
  static constexpr int kBlock = kQKK, kGroup = 32;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < kQKK / 32; ++g) {
      uint32_t idx, meta;  // four grid indices, then 4 x 7 sign bits and the 4-bit scale
      std::memcpy(&idx, b.qs + 4 * g, 4);
      std::memcpy(&meta, b.qs + 4 * g + 2, 4);
      s[g] = iq2_scale(d, (int)(meta >> 28));
      for (int l = 0; l < 4; ++l)
        signed_points(q + 32 * g + 8 * l, cb.iq2xxs[(idx >> (8 * l)) & 0xff], cb.signs[(meta >> (7 * l)) & 127]);
    }
  }
};

struct IQ2_XS {
  using Block = BlockIQ2_XS;
  static constexpr int kBlock = kQKK, kGroup = 16;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < kQKK / 32; ++g) {
      s[2 * g] = iq2_scale(d, b.scales[g] & 0xf);
      s[2 * g + 1] = iq2_scale(d, b.scales[g] >> 4);
      for (int l = 0; l < 4; ++l) {
        const uint16_t v = b.qs[4 * g + l];
        signed_points(q + 32 * g + 8 * l, cb.iq2xs[v & 511], cb.signs[v >> 9]);
      }
    }
  }
};

struct IQ2_S {
  using Block = BlockIQ2_S;
  static constexpr int kBlock = kQKK, kGroup = 16;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    const uint8_t* signs = b.qs + kQKK / 8;
    for (int g = 0; g < kQKK / 32; ++g) {
      s[2 * g] = iq2_scale(d, b.scales[g] & 0xf);
      s[2 * g + 1] = iq2_scale(d, b.scales[g] >> 4);
      for (int l = 0; l < 4; ++l) {
        const int idx = b.qs[4 * g + l] | ((b.qh[g] << (8 - 2 * l)) & 0x300);
        signed_points(q + 32 * g + 8 * l, cb.iq2s[idx], signs[4 * g + l]);
      }
    }
  }
};

struct IQ3_XXS {
  using Block = BlockIQ3_XXS;
  static constexpr int kBlock = kQKK, kGroup = 32;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    const uint8_t* meta_bytes = b.qs + kQKK / 4;
    for (int g = 0; g < kQKK / 32; ++g) {
      uint32_t meta;
      std::memcpy(&meta, meta_bytes + 4 * g, 4);
      s[g] = d * (0.5f + (float)(meta >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t sg = cb.signs[(meta >> (7 * l)) & 127];
        int8_t* out = q + 32 * g + 8 * l;
        signed_points(out, cb.iq3xxs[b.qs[8 * g + 2 * l]], sg, 4);
        signed_points(out + 4, cb.iq3xxs[b.qs[8 * g + 2 * l + 1]], (uint8_t)(sg >> 4), 4);
      }
    }
  }
};

struct IQ3_S {
  using Block = BlockIQ3_S;
  static constexpr int kBlock = kQKK, kGroup = 32;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < kQKK / 32; ++g) {
      const int sc = (b.scales[g / 2] >> (4 * (g % 2))) & 0xf;
      s[g] = d * (float)(1 + 2 * sc);
      const uint8_t* qs = b.qs + 8 * g;
      const uint8_t qh = b.qh[g];
      for (int l = 0; l < 4; ++l) {
        const uint8_t sg = b.signs[4 * g + l];
        int8_t* out = q + 32 * g + 8 * l;
        signed_points(out, cb.iq3s[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)], sg, 4);
        signed_points(out + 4, cb.iq3s[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], (uint8_t)(sg >> 4), 4);
      }
    }
  }
};

// Levels 8 * point + (delta < 0 ? -1 : 1) under scale dl / 8 (see the file comment).
inline void iq1_points(int8_t* q, const int8_t* p, bool negative_delta) {
  for (int j = 0; j < 8; ++j) q[j] = (int8_t)(8 * p[j] + (negative_delta ? -1 : 1));
}

struct IQ1_S {
  using Block = BlockIQ1_S;
  static constexpr int kBlock = kQKK, kGroup = 32;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < kQKK / 32; ++g) {
      const uint16_t h = b.qh[g];
      s[g] = d * (float)(2 * ((h >> 12) & 7) + 1) * 0.125f;
      for (int l = 0; l < 4; ++l)
        iq1_points(q + 32 * g + 8 * l, cb.iq1s[b.qs[4 * g + l] | (((h >> (3 * l)) & 7) << 8)], (h & 0x8000) != 0);
    }
  }
};

struct IQ1_M {
  using Block = BlockIQ1_M;
  static constexpr int kBlock = kQKK, kGroup = 16;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof sc);
    const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    const float d = fp16_to_fp32(d16);
    for (int g = 0; g < kQKK / 32; ++g) {
      const int shift = 6 * (g % 2);
      s[2 * g] = d * (float)(2 * ((sc[g / 2] >> shift) & 7) + 1) * 0.125f;
      s[2 * g + 1] = d * (float)(2 * ((sc[g / 2] >> (shift + 3)) & 7) + 1) * 0.125f;
      const uint8_t* qs = b.qs + 4 * g;
      const uint8_t* qh = b.qh + 2 * g;
      for (int l = 0; l < 4; ++l) {
        const uint8_t h = qh[l / 2] >> (4 * (l % 2));  // 3 index bits, then the delta's sign
        iq1_points(q + 32 * g + 8 * l, cb.iq1s[qs[l] | ((h & 7) << 8)], (h & 8) != 0);
      }
    }
  }
};

struct IQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr int kBlock = kQK4NL, kGroup = kQK4NL;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    s[0] = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK4NL / 2; ++j) {
      q[j] = cb.iq4nl[b.qs[j] & 0xf];
      q[j + kQK4NL / 2] = cb.iq4nl[b.qs[j] >> 4];
    }
  }
};

struct IQ4_XS {
  using Block = BlockIQ4_XS;
  static constexpr int kBlock = kQKK, kGroup = 32;
  static void unpack(const Block& b, int8_t* q, float* s) {
    const IqCodebooks& cb = iq_codebooks();
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < kQKK / 32; ++g) {
      const int ls = ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | (((b.scales_h >> (2 * g)) & 3) << 4);
      s[g] = d * (float)(ls - 32);
      for (int j = 0; j < 16; ++j) {
        q[32 * g + j] = cb.iq4nl[b.qs[16 * g + j] & 0xf];
        q[32 * g + j + 16] = cb.iq4nl[b.qs[16 * g + j] >> 4];
      }
    }
  }
};

// A base-3 digit stored as a byte scaled to 256 / 243 (TQ1_0): the top digit
// of x * 3^n is (x * 3^n mod 256) * 3 / 256.
inline int ternary_digit(uint8_t x, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t v = (uint8_t)(x * kPow3[n]);
  return ((int)v * 3) >> 8;
}

struct TQ1_0 {
  using Block = BlockTQ1_0;
  static constexpr int kBlock = kQKK, kGroup = kQKK;
  static void unpack(const Block& b, int8_t* q, float* s) {
    s[0] = fp16_to_fp32(b.d);
    constexpr int kQs = (int)sizeof(b.qs);  // 48: one run of 32 bytes, one of 16
    int out = 0;
    for (int start = 0; start < kQs;) {
      const int run = kQs - start >= 32 ? 32 : 16;
      for (int n = 0; n < 5; ++n)
        for (int m = 0; m < run; ++m) q[out++] = (int8_t)(ternary_digit(b.qs[start + m], n) - 1);
      start += run;
    }
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < (int)sizeof(b.qh); ++j) q[out++] = (int8_t)(ternary_digit(b.qh[j], n) - 1);
  }
};

struct TQ2_0 {
  using Block = BlockTQ2_0;
  static constexpr int kBlock = kQKK, kGroup = kQKK;
  static void unpack(const Block& b, int8_t* q, float* s) {
    s[0] = fp16_to_fp32(b.d);
    for (int j = 0; j < kQKK / 4; j += 32)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m) *q++ = (int8_t)(((b.qs[j + m] >> (2 * l)) & 3) - 1);
  }
};

struct Q1_0 {
  using Block = BlockQ1_0;
  static constexpr int kBlock = kQK1_0, kGroup = kQK1_0;
  static void unpack(const Block& b, int8_t* q, float* s) {
    s[0] = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK1_0; ++j) q[j] = (int8_t)((b.qs[j / 8] >> (j % 8)) & 1 ? 1 : -1);
  }
};

struct Q2_0 {
  using Block = BlockQ2_0;
  static constexpr int kBlock = kQK2_0, kGroup = kQK2_0;
  static void unpack(const Block& b, int8_t* q, float* s) {
    s[0] = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK2_0; ++j) q[j] = (int8_t)(((b.qs[j / 4] >> (2 * (j % 4))) & 3) - 1);
  }
};

}  // namespace
}  // namespace spool::detail::iq
