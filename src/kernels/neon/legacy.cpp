// NEON kernels of the legacy 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q8_1 weights) against Q8_0 / Q8_1 activations. Each weight block is
// unpacked once to 32 int8 values in two registers, then dotted (sdot) with
// every activation row of the tile; the per-block integer sum is scaled in
// float, and the offset types add m * s from Q8_1's precomputed s.
#include <cmath>

#include "core/quant_blocks.h"
#include "kernels/neon/common.h"

namespace spool::detail {
namespace {

// Fifth bits of a Q5 block: byte j of lo (hi) is 0xFF when bit j (j + 16)
// of the 32-bit qh is set.
inline void q5_high_bits(const uint8_t* qh, uint8x16_t* lo, uint8x16_t* hi) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(h));
  static const uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit);
  *lo = vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxLo)), bit);
  *hi = vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxHi)), bit);
}

// Per weight type: its block, activation block, and how to unpack a block
// to int8 elements 0-15 (lo) and 16-31 (hi).
struct Q4_0Ops {
  using Block = BlockQ4_0;
  using Act = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void unpack(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t q = vld1q_u8(b.qs);
    const int8x16_t eight = vdupq_n_s8(8);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF))), eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
  }
};
struct Q4_1Ops {
  using Block = BlockQ4_1;
  using Act = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void unpack(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t q = vld1q_u8(b.qs);
    *lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
  }
};
// q - 16 = nibble - (fifth bit clear ? 16 : 0).
struct Q5_0Ops {
  using Block = BlockQ5_0;
  using Act = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void unpack(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    uint8x16_t bl, bh;
    q5_high_bits(b.qh, &bl, &bh);
    const uint8x16_t q = vld1q_u8(b.qs), sixteen = vdupq_n_u8(16);
    *lo = vreinterpretq_s8_u8(vsubq_u8(vandq_u8(q, vdupq_n_u8(0xF)), vbicq_u8(sixteen, bl)));
    *hi = vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(q, 4), vbicq_u8(sixteen, bh)));
  }
};
struct Q5_1Ops {
  using Block = BlockQ5_1;
  using Act = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void unpack(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    uint8x16_t bl, bh;
    q5_high_bits(b.qh, &bl, &bh);
    const uint8x16_t q = vld1q_u8(b.qs), sixteen = vdupq_n_u8(16);
    *lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0xF)), vandq_u8(sixteen, bl)));
    *hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(sixteen, bh)));
  }
};
template <class B, class A>
struct Q8Ops {
  using Block = B;
  using Act = A;
  static constexpr bool kHasMin = false;  // a Q8_1 weight's s is not needed
  static void unpack(const Block& b, int8x16_t* lo, int8x16_t* hi) {
    *lo = vld1q_s8(b.qs);
    *hi = vld1q_s8(b.qs + 16);
  }
};

template <class Ops>
struct LegacyKernel {
  using Block = typename Ops::Block;
  using Act = typename Ops::Act;

  template <int R, int C>
  static void tile(SPOOL_NEON_TILE_ARGS) {
    if constexpr (C == 4) {
      tile_c4<R>(n, w, w_stride, a, a_stride, c, ldc);
    } else {
      tile_narrow<R, C>(n, w, w_stride, a, a_stride, c, ldc);
    }
  }

  // Unpacks block ib of R weight rows.
  template <int R>
  static void load_rows(const uint8_t* w, size_t w_stride, int64_t ib, int8x16_t* lo,
                        int8x16_t* hi, float* dw, float* mw) {
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      const Block& b = reinterpret_cast<const Block*>(w + r * w_stride)[ib];
      Ops::unpack(b, &lo[r], &hi[r]);
      dw[r] = neon_h2f(b.d);
      if constexpr (Ops::kHasMin) mw[r] = neon_h2f(b.m);
    }
  }

  // Four activation rows: the four integer block sums of a weight row are
  // reduced into one vector (lane j = activation j), so each row needs one
  // convert and one multiply-add per block, and R accumulators in all.
  template <int R>
  static void tile_c4(SPOOL_NEON_TILE_ARGS) {
    float32x4_t acc[R];
    SPOOL_UNROLL for (int r = 0; r < R; ++r) acc[r] = vdupq_n_f32(0.0f);
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
      int8x16_t lo[R], hi[R];
      float dw[R], mw[R];
      load_rows<R>(w, w_stride, ib, lo, hi, dw, mw);
      int8x16_t al[4], ah[4];
      float da[4], sa[4];
      SPOOL_UNROLL for (int j = 0; j < 4; ++j) {
        const Act& y = reinterpret_cast<const Act*>(a + j * a_stride)[ib];
        al[j] = vld1q_s8(y.qs);
        ah[j] = vld1q_s8(y.qs + 16);
        da[j] = neon_h2f(y.d);
        if constexpr (Ops::kHasMin) sa[j] = neon_h2f(y.s);
      }
      const float32x4_t da4 = vld1q_f32(da);
      SPOOL_UNROLL for (int r = 0; r < R; ++r) {
        int32x4_t s[4];
        SPOOL_UNROLL for (int j = 0; j < 4; ++j) {
          s[j] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[r], al[j]), hi[r], ah[j]);
        }
        const int32x4_t sums = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
        acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(sums), vmulq_n_f32(da4, dw[r]));
        if constexpr (Ops::kHasMin) acc[r] = vfmaq_n_f32(acc[r], vld1q_f32(sa), mw[r]);
      }
    }
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      SPOOL_UNROLL for (int j = 0; j < 4; ++j) c[j * ldc + r] = lane(acc[r], j);
    }
  }

  static float lane(float32x4_t v, int j) {
    float out[4];
    vst1q_f32(out, v);
    return out[j];
  }

  // Any other width (decode: C == 1). Each (row, activation) pair takes
  // exactly tile_c4's steps: the block's integer sum reduced exactly, then one
  // fused multiply-add with dw * da (and one with the minimum), so a row's
  // result never depends on the tile width it went through (batch invariance).
  template <int R, int C>
  static void tile_narrow(SPOOL_NEON_TILE_ARGS) {
    float acc[R][C] = {};
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
      int8x16_t lo[R], hi[R];
      float dw[R], mw[R];
      load_rows<R>(w, w_stride, ib, lo, hi, dw, mw);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const Act& y = reinterpret_cast<const Act*>(a + j * a_stride)[ib];
        const int8x16_t al = vld1q_s8(y.qs), ah = vld1q_s8(y.qs + 16);
        const float da = neon_h2f(y.d);
        SPOOL_UNROLL for (int r = 0; r < R; ++r) {
          const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[r], al), hi[r], ah);
          acc[r][j] = std::fma((float)vaddvq_s32(s), da * dw[r], acc[r][j]);
          if constexpr (Ops::kHasMin) acc[r][j] = std::fma(neon_h2f(y.s), mw[r], acc[r][j]);
        }
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j)
      SPOOL_UNROLL for (int r = 0; r < R; ++r) c[j * ldc + r] = acc[r][j];
  }
};

}  // namespace

void fill_neon_legacy_kernels(KernelTable& t) {
  neon_set<LegacyKernel<Q4_0Ops>, 4, 4>(t, DType::Q4_0);
  neon_set<LegacyKernel<Q4_1Ops>, 4, 4>(t, DType::Q4_1);
  neon_set<LegacyKernel<Q5_0Ops>, 4, 4>(t, DType::Q5_0);
  neon_set<LegacyKernel<Q5_1Ops>, 4, 4>(t, DType::Q5_1);
  neon_set<LegacyKernel<Q8Ops<BlockQ8_0, BlockQ8_0>>, 4, 4>(t, DType::Q8_0);
  neon_set<LegacyKernel<Q8Ops<BlockQ8_1, BlockQ8_1>>, 4, 4>(t, DType::Q8_1);
}

}  // namespace spool::detail
