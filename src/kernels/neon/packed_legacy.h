// Shared by the NEON packed kernels of Q4_0, Q8_0, MXFP4 and IQ4_NL: the dotprod
// tiles (neon/packed_legacy.cpp) and the i8mm tiles
// (neon/packed_legacy_i8mm.cpp) read the same group blocks and activation
// rows. Design in neon/packed.h; include only from NEON files.
#pragma once

#include "kernels/neon/packed.h"
#include "kernels/ref/mxfp4.h"

namespace spool::detail::packed_neon {
// IQ4_NL's levels, as the format defines them (the reference reads the same
// table from iq_codebooks.h; tests/packed_kernels_test.cpp compares the two
// paths).
inline constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
}  // namespace spool::detail::packed_neon

namespace spool::detail::packed_neon {

// Activation row: per block the 32 int8 levels, the float scale, the int32
// -8 * sum of the levels and 8 bytes of padding (kActBlock bytes: three
// 16-byte loads). One format for the three types (only Q4_0 uses the sums),
// so matrices of different types reading the same input share one
// conversion.
constexpr size_t kActBlock = kQK + 16;

// Per weight type: the source block, the bytes of the 4 row scales, the
// registers of levels per block, and how to get scales and levels.
struct Q4_0Ops {
  static constexpr size_t kSrcBytes = sizeof(BlockQ4_0), kScaleBytes = 8;
  static constexpr int kRegs = 4;
  static constexpr bool kBias = true;
  static float32x4_t scales(const uint8_t* blk) { return load_f16x4(blk); }
  // The 8 chunks (elements 4m .. 4m + 3 in w[m]) of one block.
  static void levels(const uint8_t* p, int8x16_t (&w)[8]) {
    const uint8x16x4_t raw = vld1q_u8_x4(p);
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
      w[m] = vreinterpretq_s8_u8(vandq_u8(raw.val[m], vdupq_n_u8(0x0F)));
      w[m + 4] = vreinterpretq_s8_u8(vshrq_n_u8(raw.val[m], 4));
    }
  }
};

struct Q8_0Ops {
  static constexpr size_t kSrcBytes = sizeof(BlockQ8_0), kScaleBytes = 8;
  static constexpr int kRegs = 8;
  static constexpr bool kBias = false;
  static float32x4_t scales(const uint8_t* blk) { return load_f16x4(blk); }
  static void levels(const uint8_t* p, int8x16_t (&w)[8]) {
    const int8x16x4_t lo = vld1q_s8_x4(reinterpret_cast<const int8_t*>(p));
    const int8x16x4_t hi = vld1q_s8_x4(reinterpret_cast<const int8_t*>(p) + 64);
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) w[m] = lo.val[m], w[m + 4] = hi.val[m];
  }
};

// Levels: the nibbles through the doubled e2m1 table; scale 2^(e - 128) as
// float bits: (e - 1) << 23, or for e < 2 the subnormals 2^-128, 2^-127.
struct MXFP4Ops {
  static constexpr size_t kSrcBytes = sizeof(BlockMXFP4), kScaleBytes = 4;
  static constexpr int kRegs = 4;
  static constexpr bool kBias = false;
  static float32x4_t scales(const uint8_t* blk) {
    uint32_t e4;
    std::memcpy(&e4, blk, 4);
    const uint32x4_t e = vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(e4)))));
    const uint32x4_t normal = vshlq_n_u32(vsubq_u32(e, vdupq_n_u32(1)), 23);
    const uint32x4_t small = vshlq_u32(vdupq_n_u32(0x00200000), vreinterpretq_s32_u32(e));
    return vreinterpretq_f32_u32(vbslq_u32(vcltq_u32(e, vdupq_n_u32(2)), small, normal));
  }
  static void levels(const uint8_t* p, int8x16_t (&w)[8]) {
    const int8x16_t table = vld1q_s8(kMxfp4Values);
    const uint8x16x4_t raw = vld1q_u8_x4(p);
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
      w[m] = vqtbl1q_s8(table, vandq_u8(raw.val[m], vdupq_n_u8(0x0F)));
      w[m + 4] = vqtbl1q_s8(table, vshrq_n_u8(raw.val[m], 4));
    }
  }
};

// IQ4_NL: Q4_0's block layout (fp16 scale, the same nibble order) with the
// nibbles looked up in the 16 non-linear levels (tbl), as MXFP4's.
struct IQ4_NLOps {
  static constexpr size_t kSrcBytes = sizeof(BlockIQ4_NL), kScaleBytes = 8;
  static constexpr int kRegs = 4;
  static constexpr bool kBias = false;
  static float32x4_t scales(const uint8_t* blk) { return load_f16x4(blk); }
  static void levels(const uint8_t* p, int8x16_t (&w)[8]) {
    const int8x16_t table = vld1q_s8(kIq4nlLevels);
    const uint8x16x4_t raw = vld1q_u8_x4(p);
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
      w[m] = vqtbl1q_s8(table, vandq_u8(raw.val[m], vdupq_n_u8(0x0F)));
      w[m + 4] = vqtbl1q_s8(table, vshrq_n_u8(raw.val[m], 4));
    }
  }
};

// The dotprod gemm of a type's packed layout (neon/packed_legacy.cpp; Ops:
// Q4_0Ops, Q8_0Ops, MXFP4Ops or IQ4_NLOps): the token tiles, or with kV1 the row tiles
// of SPOOL_NEON_TILES=v1, as in the table's entry. The i8mm tiles run it for
// 1-token calls, naming it at compile time.
template <class Ops, bool kV1>
void dotprod_gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                  float* c, size_t ldc);

}  // namespace spool::detail::packed_neon
