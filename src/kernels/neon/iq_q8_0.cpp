// NEON kernels of the low-bit types that dot with Q8_0 (IQ4_NL: 32 weights
// per block, Q2_0: 64, Q1_0: 128, one fp16 scale each). A weight block is
// taken in chunks of 32 weights, one per activation block: each chunk is
// unpacked once to two int8 registers and dotted (sdot) with every activation
// row of the tile; the chunk's integer sum is scaled in float by the same
// fused multiply-add in every tile shape (batch invariance).
#include <cmath>

#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"
#include "kernels/neon/common.h"

namespace spool::detail {
namespace {

// Per weight type: its block, chunks of 32 per block, and how to unpack
// chunk c to weights 0-15 (lo) and 16-31 (hi) of the chunk.
struct IQ4_NLOps {
  using Block = BlockIQ4_NL;
  static constexpr int kChunks = 1;
  static void unpack(const Block& b, int, const int8x16_t& table, int8x16_t* lo, int8x16_t* hi) {
    const uint8x16_t q = vld1q_u8(b.qs);
    *lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0xf)));
    *hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
  }
};

// Q1_0: bit j % 8 of qs[j / 8] set: +1, else -1.
struct Q1_0Ops {
  using Block = BlockQ1_0;
  static constexpr int kChunks = kQK1_0 / kQK;
  // +1 / -1 for the 16 weights of bytes 2k, 2k + 1 of x: 0xff - 2 * (bit set ? 0xff : 0).
  static int8x16_t pm(uint8x16_t x, int k) {
    const uint8x16_t idx = vcombine_u8(vdup_n_u8((uint8_t)(2 * k)), vdup_n_u8((uint8_t)(2 * k + 1)));
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
    const uint8x16_t set = vtstq_u8(vqtbl1q_u8(x, idx), bit);
    return vreinterpretq_s8_u8(vsubq_u8(vdupq_n_u8(0xff), vaddq_u8(set, set)));
  }
  static void unpack(const Block& b, int c, const int8x16_t&, int8x16_t* lo, int8x16_t* hi) {
    uint32_t w;
    std::memcpy(&w, b.qs + 4 * c, 4);
    const uint8x16_t x = vreinterpretq_u8_u32(vdupq_n_u32(w));
    *lo = pm(x, 0);
    *hi = pm(x, 1);
  }
};

// Q2_0: field j % 4 of qs[j / 4], minus 1.
struct Q2_0Ops {
  using Block = BlockQ2_0;
  static constexpr int kChunks = kQK2_0 / kQK;
  static void unpack(const Block& b, int c, const int8x16_t&, int8x16_t* lo, int8x16_t* hi) {
    const uint8x8_t bytes = vld1_u8(b.qs + 8 * c);
    static const uint8_t kIdx[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    static const int8_t kShift[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
    const uint8x16_t idx = vld1q_u8(kIdx);
    const int8x16_t sh = vld1q_s8(kShift);
    const uint8x16_t three = vdupq_n_u8(3);
    const int8x16_t one = vdupq_n_s8(1);
    const uint8x16_t x = vcombine_u8(bytes, bytes);
    const uint8x16_t f0 = vandq_u8(vshlq_u8(vqtbl1q_u8(x, idx), sh), three);
    const uint8x16_t f1 = vandq_u8(vshlq_u8(vqtbl1q_u8(x, vaddq_u8(idx, vdupq_n_u8(4))), sh), three);
    *lo = vsubq_s8(vreinterpretq_s8_u8(f0), one);
    *hi = vsubq_s8(vreinterpretq_s8_u8(f1), one);
  }
};

template <class Ops>
struct ChunkKernel {
  using Block = typename Ops::Block;

  // Every (row, activation) pair takes the same steps in every tile shape:
  // the chunk's integer sum reduced exactly, then acc = fma(sum, dw * da,
  // acc), in a vector lane or a scalar (the same IEEE operations), so a
  // row's result does not depend on its tile (batch invariance). Four rows
  // of one activation (decode) or four activations of a row keep their
  // accumulators in the lanes of one register.
  template <int R, int C>
  static void tile(SPOOL_NEON_TILE_ARGS) {
    if constexpr (R == 4 && C == 1) {
      tile_rows4(n, w, w_stride, a, c);
    } else {
      tile_any<R, C>(n, w, w_stride, a, a_stride, c, ldc);
    }
  }

  template <int R>
  static void load_rows(const uint8_t* w, size_t w_stride, int64_t ib, const int8x16_t& table, int8x16_t* lo,
                        int8x16_t* hi, const Block** b) {
    const int64_t wb = ib / Ops::kChunks;
    const int ch = (int)(ib % Ops::kChunks);
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      b[r] = reinterpret_cast<const Block*>(w + r * w_stride) + wb;
      Ops::unpack(*b[r], ch, table, &lo[r], &hi[r]);
    }
  }

  static void tile_rows4(int64_t n, const uint8_t* w, size_t w_stride, const uint8_t* a, float* c) {
    const int8x16_t table = vld1q_s8(iq_codebooks().iq4nl);
    const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
      int8x16_t lo[4], hi[4];
      const Block* b[4];
      load_rows<4>(w, w_stride, ib, table, lo, hi, b);
      uint16x4_t d16 = vdup_n_u16(0);
      d16 = vld1_lane_u16(&b[0]->d, d16, 0);
      d16 = vld1_lane_u16(&b[1]->d, d16, 1);
      d16 = vld1_lane_u16(&b[2]->d, d16, 2);
      d16 = vld1_lane_u16(&b[3]->d, d16, 3);
      const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(d16));
      const int8x16_t al = vld1q_s8(y[ib].qs), ah = vld1q_s8(y[ib].qs + 16);
      int32x4_t s[4];
      SPOOL_UNROLL for (int r = 0; r < 4; ++r) s[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[r], al), hi[r], ah);
      const int32x4_t sums = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
      acc = vfmaq_f32(acc, vcvtq_f32_s32(sums), vmulq_n_f32(dw, neon_h2f(y[ib].d)));
    }
    vst1q_f32(c, acc);
  }

  template <int R, int C>
  static void tile_any(SPOOL_NEON_TILE_ARGS) {
    const int8x16_t table = vld1q_s8(iq_codebooks().iq4nl);
    float acc[R][C] = {};
    for (int64_t ib = 0; ib < n / kQK; ++ib) {
      int8x16_t lo[R], hi[R];
      const Block* b[R];
      load_rows<R>(w, w_stride, ib, table, lo, hi, b);
      float dw[R];
      SPOOL_UNROLL for (int r = 0; r < R; ++r) dw[r] = neon_h2f(b[r]->d);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const BlockQ8_0& y = reinterpret_cast<const BlockQ8_0*>(a + j * a_stride)[ib];
        const int8x16_t al = vld1q_s8(y.qs), ah = vld1q_s8(y.qs + 16);
        const float da = neon_h2f(y.d);
        SPOOL_UNROLL for (int r = 0; r < R; ++r) {
          const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[r], al), hi[r], ah);
          acc[r][j] = std::fma((float)vaddvq_s32(s), dw[r] * da, acc[r][j]);
        }
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j)
      SPOOL_UNROLL for (int r = 0; r < R; ++r) c[j * ldc + r] = acc[r][j];
  }
};

}  // namespace

// 4 x 4 tiles keep 8 weight and 8 activation registers; decode steps take 4 rows at a time.
void fill_neon_iq_q8_0_kernels(KernelTable& t) {
  neon_set<ChunkKernel<IQ4_NLOps>, 4, 4>(t, DType::IQ4_NL);
  neon_set<ChunkKernel<Q1_0Ops>, 4, 4>(t, DType::Q1_0);
  neon_set<ChunkKernel<Q2_0Ops>, 4, 4>(t, DType::Q2_0);
}

}  // namespace spool::detail
