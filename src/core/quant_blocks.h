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

}  // namespace spool
