// NEON kernels of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and Q8_K as a
// weight) against Q8_K activations. One driver walks a super-block in four
// chunks of 64 elements: each type unpacks a chunk of each weight row to four
// int8 registers once, the driver dots them (sdot) with every activation row
// of the tile and weights the sums by the sub-block scales in int32; the
// minimums of the offset types pair with Q8_K's bsums once per super-block.
#include <type_traits>

#include "core/quant_blocks.h"
#include "kernels/neon/common.h"

namespace spool::detail {
namespace {

inline int8x16_t low_nibbles(uint8x16_t q) { return vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF))); }
inline int8x16_t high_nibbles(uint8x16_t q) { return vreinterpretq_s8_u8(vshrq_n_u8(q, 4)); }
inline uint8x16_t shift_right(uint8x16_t q, int s) { return vshlq_u8(q, vdupq_n_s8((int8_t)-s)); }

// Sum over 8 lanes of a * b, in int32.
inline int32_t dot_s16x8(int16x8_t a, int16x8_t b) {
  return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(a), vget_low_s16(b)), a, b));
}

// Interface of an Ops type (one per weight type):
//   Row                  what a weight block needs unpacked once per super-block
//   init(row, block)     fills it
//   unpack(row, q, out)  elements 64q .. 64q + 63 as four int8 registers of 16
//   kPairScale           scales cover 32 elements (registers 0-1 and 2-3) or 16
//   row.scale[i]         integer scale of sub-block i
//   min_sum(row, y)      sum of mins times the activations' block sums (or 0)

// Q4_K / Q5_K: 8 sub-blocks of 32; chunk q's low nibbles are sub-block 2q,
// the high nibbles 2q + 1. Q5_K's fifth bits are bits 2q / 2q + 1 of qh[l].
template <bool kFive>
struct K4Ops {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr bool kPairScale = true;
  struct Row {
    const Block* b;
    float d, dmin;
    int32_t scale[8];
    int16x8_t mins;
  };
  static void init(Row& row, const Block& b) {
    row.b = &b;
    row.d = neon_h2f(b.d);
    row.dmin = neon_h2f(b.dmin);
    uint8_t m[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t s;
      unpack_scale_min_k4(j, b.scales, &s, &m[j]);
      row.scale[j] = s;
    }
    row.mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(m)));
  }
  static void unpack(const Row& row, int q, int8x16_t* out) {
    const uint8x16_t q0 = vld1q_u8(row.b->qs + 32 * q), q1 = vld1q_u8(row.b->qs + 32 * q + 16);
    out[0] = low_nibbles(q0);
    out[1] = low_nibbles(q1);
    out[2] = high_nibbles(q0);
    out[3] = high_nibbles(q1);
    if constexpr (kFive) {
      const uint8x16_t h0 = shift_right(vld1q_u8(row.b->qh), 2 * q);
      const uint8x16_t h1 = shift_right(vld1q_u8(row.b->qh + 16), 2 * q);
      const uint8x16_t one = vdupq_n_u8(1), two = vdupq_n_u8(2);
      out[0] = vorrq_s8(out[0], vreinterpretq_s8_u8(vshlq_n_u8(vandq_u8(h0, one), 4)));
      out[1] = vorrq_s8(out[1], vreinterpretq_s8_u8(vshlq_n_u8(vandq_u8(h1, one), 4)));
      out[2] = vorrq_s8(out[2], vreinterpretq_s8_u8(vshlq_n_u8(vandq_u8(h0, two), 3)));
      out[3] = vorrq_s8(out[3], vreinterpretq_s8_u8(vshlq_n_u8(vandq_u8(h1, two), 3)));
    }
  }
  // bsums come per 16; pairs of them make the per-32 sums.
  static int32_t min_sum(const Row& row, const BlockQ8_K& y) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8));
    return dot_s16x8(row.mins, pairs);
  }
};

// Q6_K: chunk q is half h = q / 2, nibble p = q % 2 of ql[64h ..]; register
// k takes ql[64h + 16k] and the two bits at 4p + 2(k / 2) of qh[32h + 16(k % 2)].
struct Q6_KOps {
  using Block = BlockQ6_K;
  static constexpr bool kPairScale = false;
  struct Row {
    const Block* b;
    float d, dmin;
    int32_t scale[16];
  };
  static void init(Row& row, const Block& b) {
    row.b = &b;
    row.d = neon_h2f(b.d);
    row.dmin = 0;
    for (int j = 0; j < 16; ++j) row.scale[j] = b.scales[j];
  }
  static void unpack(const Row& row, int q, int8x16_t* out) {
    const int h = q / 2, p = q % 2;
    const uint8x16_t qh[2] = {vld1q_u8(row.b->qh + 32 * h), vld1q_u8(row.b->qh + 32 * h + 16)};
    const uint8x16_t three = vdupq_n_u8(3);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      const uint8x16_t ql = vld1q_u8(row.b->ql + 64 * h + 16 * k);
      const uint8x16_t lo = p ? vshrq_n_u8(ql, 4) : vandq_u8(ql, vdupq_n_u8(0xF));
      const uint8x16_t hi = vandq_u8(shift_right(qh[k % 2], 4 * p + 2 * (k / 2)), three);
      out[k] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
    }
  }
  static int32_t min_sum(const Row&, const BlockQ8_K&) { return 0; }
};

// Q3_K / Q2_K: chunk q is half h = q / 2, bit pairs c0 = 2(q % 2) and c0 + 1
// of qs[32h ..]; register k takes bits 2(c0 + k / 2) of qs[32h + 16(k % 2)].
// Q3_K subtracts 4 where bit 4h + c of hmask[16(k % 2) ..] is clear.
struct Q3_KOps {
  using Block = BlockQ3_K;
  static constexpr bool kPairScale = false;
  struct Row {
    const Block* b;
    float d, dmin;
    int32_t scale[16];
  };
  static void init(Row& row, const Block& b) {
    row.b = &b;
    row.d = neon_h2f(b.d);
    row.dmin = 0;
    int8_t sc[16];
    unpack_scales_q3_k(b.scales, sc);
    for (int j = 0; j < 16; ++j) row.scale[j] = sc[j] - 32;
  }
  static void unpack(const Row& row, int q, int8x16_t* out) {
    const int h = q / 2, c0 = 2 * (q % 2);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      const int c = c0 + k / 2;
      const uint8x16_t qs = vld1q_u8(row.b->qs + 32 * h + 16 * (k % 2));
      const uint8x16_t low = vandq_u8(shift_right(qs, 2 * c), vdupq_n_u8(3));
      const uint8x16_t set = vtstq_u8(vld1q_u8(row.b->hmask + 16 * (k % 2)), vdupq_n_u8((uint8_t)(1 << (4 * h + c))));
      out[k] = vreinterpretq_s8_u8(vsubq_u8(low, vbicq_u8(vdupq_n_u8(4), set)));
    }
  }
  static int32_t min_sum(const Row&, const BlockQ8_K&) { return 0; }
};

struct Q2_KOps {
  using Block = BlockQ2_K;
  static constexpr bool kPairScale = false;
  struct Row {
    const Block* b;
    float d, dmin;
    int32_t scale[16];
    int16x8_t mins[2];
  };
  static void init(Row& row, const Block& b) {
    row.b = &b;
    row.d = neon_h2f(b.d);
    row.dmin = neon_h2f(b.dmin);
    for (int j = 0; j < 16; ++j) row.scale[j] = b.scales[j] & 0xF;
    const uint8x16_t m = vshrq_n_u8(vld1q_u8(b.scales), 4);
    row.mins[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    row.mins[1] = vreinterpretq_s16_u16(vmovl_high_u8(m));
  }
  static void unpack(const Row& row, int q, int8x16_t* out) {
    const int h = q / 2, c0 = 2 * (q % 2);
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
      const uint8x16_t qs = vld1q_u8(row.b->qs + 32 * h + 16 * (k % 2));
      out[k] = vreinterpretq_s8_u8(vandq_u8(shift_right(qs, 2 * (c0 + k / 2)), vdupq_n_u8(3)));
    }
  }
  static int32_t min_sum(const Row& row, const BlockQ8_K& y) {
    return dot_s16x8(row.mins[0], vld1q_s16(y.bsums)) + dot_s16x8(row.mins[1], vld1q_s16(y.bsums + 8));
  }
};

// Q8_K as a weight: plain int8 with one float scale.
struct Q8_KOps {
  using Block = BlockQ8_K;
  static constexpr bool kPairScale = true;
  struct Row {
    const Block* b;
    float d, dmin;
    int32_t scale[8];
  };
  static void init(Row& row, const Block& b) {
    row.b = &b;
    row.d = b.d;
    row.dmin = 0;
    for (int j = 0; j < 8; ++j) row.scale[j] = 1;
  }
  static void unpack(const Row& row, int q, int8x16_t* out) {
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) out[k] = vld1q_s8(row.b->qs + 64 * q + 16 * k);
  }
  static int32_t min_sum(const Row&, const BlockQ8_K&) { return 0; }
};

template <class Ops>
struct KQuantKernel {
  using Block = typename Ops::Block;

  // Adds chunk q of every row times chunk q of activation y to isum[.][j].
  template <int R, int C>
  static void chunk_dots(const int8x16_t (&wq)[R][4], const typename Ops::Row (&row)[R], int q,
                         const int8_t* act, int32x4_t (&isum)[R][C], int j) {
    int8x16_t av[4];
    SPOOL_UNROLL for (int k = 0; k < 4; ++k) av[k] = vld1q_s8(act + 64 * q + 16 * k);
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      if constexpr (Ops::kPairScale) {
        const int32x4_t d0 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wq[r][0], av[0]), wq[r][1], av[1]);
        const int32x4_t d1 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wq[r][2], av[2]), wq[r][3], av[3]);
        isum[r][j] = vmlaq_n_s32(isum[r][j], d0, row[r].scale[2 * q]);
        isum[r][j] = vmlaq_n_s32(isum[r][j], d1, row[r].scale[2 * q + 1]);
      } else {
        SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
          const int32x4_t d = vdotq_s32(vdupq_n_s32(0), wq[r][k], av[k]);
          isum[r][j] = vmlaq_n_s32(isum[r][j], d, row[r].scale[4 * q + k]);
        }
      }
    }
  }

  template <int R, int C>
  static void tile(SPOOL_NEON_TILE_ARGS) {
    float acc[R][C] = {};
    for (int64_t ib = 0; ib < n / kQKK; ++ib) {
      typename Ops::Row row[R];
      SPOOL_UNROLL for (int r = 0; r < R; ++r) Ops::init(row[r], reinterpret_cast<const Block*>(w + r * w_stride)[ib]);
      const BlockQ8_K* y[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) y[j] = reinterpret_cast<const BlockQ8_K*>(a + j * a_stride) + ib;
      int32x4_t isum[R][C];
      SPOOL_UNROLL for (int r = 0; r < R; ++r)
        SPOOL_UNROLL for (int j = 0; j < C; ++j) isum[r][j] = vdupq_n_s32(0);
      for (int q = 0; q < 4; ++q) {
        int8x16_t wq[R][4];
        SPOOL_UNROLL for (int r = 0; r < R; ++r) Ops::unpack(row[r], q, wq[r]);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) chunk_dots<R, C>(wq, row, q, y[j]->qs, isum, j);
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        SPOOL_UNROLL for (int r = 0; r < R; ++r) {
          const float mins = row[r].dmin != 0 ? row[r].dmin * (float)Ops::min_sum(row[r], *y[j]) : 0.0f;
          acc[r][j] += y[j]->d * (row[r].d * (float)vaddvq_s32(isum[r][j]) - mins);
        }
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j)
      SPOOL_UNROLL for (int r = 0; r < R; ++r) c[j * ldc + r] = acc[r][j];
  }
};

}  // namespace

// 2 x 4 tiles keep the unpacked rows, the activations and the 8 int32
// accumulators in registers; decode steps take 4 rows at a time.
void fill_neon_kquant_kernels(KernelTable& t) {
  neon_set<KQuantKernel<Q2_KOps>, 2, 4, 4>(t, DType::Q2_K);
  neon_set<KQuantKernel<Q3_KOps>, 2, 4, 4>(t, DType::Q3_K);
  neon_set<KQuantKernel<K4Ops<false>>, 2, 4, 4>(t, DType::Q4_K);
  neon_set<KQuantKernel<K4Ops<true>>, 2, 4, 4>(t, DType::Q5_K);
  neon_set<KQuantKernel<Q6_KOps>, 2, 4, 4>(t, DType::Q6_K);
  neon_set<KQuantKernel<Q8_KOps>, 2, 4, 4>(t, DType::Q8_K);
}

}  // namespace spool::detail
