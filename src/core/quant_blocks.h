// Block layouts of the quantized types, byte-for-byte as GGUF stores them
// (ggml's block_q4_0 ... block_q8_K), so tensors in a GGUF file can be used in
// place. Scales are IEEE half (uint16_t bits) except Q8_K's float. Sizes are
// checked at compile time because a single wrong byte breaks every file.
#pragma once

#include <cstdint>

namespace spool {

constexpr int kQK = 32;         // elements per block of the legacy types
constexpr int kQKK = 256;       // elements per super-block of the K-quants
constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K/Q5_K

// x = (q - 8) * d; qs[j] holds element j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
// x = q * d + m.
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };
// x = (q - 16) * d; bit j of qh is the fifth bit of element j.
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
// s = d * sum(qs), so a dot with an offset type (Q4_1, Q5_1) needs no pass
// over the activations to apply the weight's minimum.
struct BlockQ8_1 { uint16_t d, s; int8_t qs[kQK]; };

// 16 sub-blocks of 16: scales[i] low nibble = scale, high nibble = min.
// x = d * sc * q - dmin * m, q in 0..3.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16 with 6-bit signed (biased by 32) scales packed in 12
// bytes; q = low 2 bits from qs, minus 4 unless the hmask bit is set.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32 with 6-bit scale and min each, packed in 12 bytes.
// x = d * sc * q - dmin * m, q in 0..15.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32), q in 0..63.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// Activation type of the K-quants: bsums[i] = sum of qs[16 i .. 16 i + 15],
// which the dots with offset types (Q2_K, Q4_K, Q5_K) use for the minimums.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// MXFP4 (OCP microscaling FP4, ggml type 39): x = kMxfp4Values[nibble] * 2^(e - 128)
// (the e2m1 values doubled, the e8m0 scale halved); qs as Q4_0 (j low, j+16 high).
struct BlockMXFP4 { uint8_t e; uint8_t qs[kQK / 2]; };
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Unpacks sub-block j's 6-bit scale and min of Q4_K/Q5_K: the first four
// pairs sit in the low 6 bits of bytes 0-7, the last four are split between
// bytes 8-11 (low bits) and the top 2 bits of bytes 0-7.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpacks Q3_K's 16 6-bit scales (still biased by 32) from its 12 bytes:
// low nibbles in bytes 0-7, high 2 bits in bytes 8-11.
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t* out) {
  for (int i = 0; i < 16; ++i) {
    const int low = (i < 8) ? (packed[i] & 0xF) : (packed[i - 8] >> 4);
    const int high = (packed[8 + (i % 4)] >> (2 * (i / 4))) & 3;
    out[i] = (int8_t)(low | (high << 4));
  }
}

// ---- the low-bit types: IQ codebook quants, non-linear 4-bit, ternary, 1/2-bit ----
// (src/kernels/iq_codebooks.h holds the grids their indices point into.)

constexpr int kQK4NL = 32;   // elements per IQ4_NL block
constexpr int kQK1_0 = 128;  // elements per Q1_0 block
constexpr int kQK2_0 = 64;   // elements per Q2_0 block

// 2.06 bits/weight: per 32 weights, 4 grid indices (8 bits each) and 28 bits of
// sign-pattern indices + a 4-bit scale, stored as 4 + 4 bytes in qs.
struct BlockIQ2_XXS { uint16_t d; uint16_t qs[kQKK / 8]; };
// 2.31: 9-bit grid index + 7-bit sign index per 8 weights; 4-bit scales per 16.
struct BlockIQ2_XS { uint16_t d; uint16_t qs[kQKK / 8]; uint8_t scales[kQKK / 32]; };
// 2.56: 10-bit grid index (8 in qs, 2 in qh), explicit sign bytes after the indices.
struct BlockIQ2_S { uint16_t d; uint8_t qs[kQKK / 4]; uint8_t qh[kQKK / 32]; uint8_t scales[kQKK / 32]; };
// 3.06: 8-bit indices into a 4-wide grid, then per 32 weights 28 sign bits + 4-bit scale.
struct BlockIQ3_XXS { uint16_t d; uint8_t qs[3 * kQKK / 8]; };
// 3.44: 9-bit indices (high bits in qh), explicit signs, 4-bit scales per 32.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t signs[kQKK / 8];
  uint8_t scales[kQKK / 64];
};
// 1.56: 11-bit indices into a ternary grid; per 32 weights a 3-bit scale and the delta's sign.
struct BlockIQ1_S { uint16_t d; uint8_t qs[kQKK / 8]; uint16_t qh[kQKK / 32]; };
// 1.75: as IQ1_S with a delta sign per 8 and 3-bit scales per 16; the block's
// fp16 scale is spread over the top nibbles of the four scale words.
struct BlockIQ1_M { uint8_t qs[kQKK / 8]; uint8_t qh[kQKK / 16]; uint8_t scales[kQKK / 32]; };
// 4.5: 16 non-linear levels (kIq4nlLevels), one fp16 scale per 32.
struct BlockIQ4_NL { uint16_t d; uint8_t qs[kQK4NL / 2]; };
// 4.25: the same levels with 6-bit scales per 32 under one fp16 scale per 256.
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[kQKK / 64]; uint8_t qs[kQKK / 2]; };
// 1.69: ternary digits, 5 per byte in qs (base 3, scaled to a byte), 4 per byte in qh.
struct BlockTQ1_0 { uint8_t qs[(kQKK - 4 * kQKK / 64) / 5]; uint8_t qh[kQKK / 64]; uint16_t d; };
// 2.06: ternary digits as 2-bit fields (q - 1).
struct BlockTQ2_0 { uint8_t qs[kQKK / 4]; uint16_t d; };
// 1.13: one sign bit per weight, +-d.
struct BlockQ1_0 { uint16_t d; uint8_t qs[kQK1_0 / 8]; };
// 2.25: 2-bit fields, (q - 1) * d, levels -1..2.
struct BlockQ2_0 { uint16_t d; uint8_t qs[kQK2_0 / 4]; };

static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockTQ1_0) == 54);
static_assert(sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockQ1_0) == 18);
static_assert(sizeof(BlockQ2_0) == 18);

}  // namespace spool
