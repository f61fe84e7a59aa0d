// Packed NEON kernel for Q5_K (the attention / down projections of Q5_K_M
// files): the Q4_K group layout and activation format
// (neon/packed_kquant.cpp) plus the fifth bits, kept as Q5_K stores
// them (one byte per element position, bit s for sub-block s, so the 4 rows
// of a group stream 180 bytes per row and super-block against the file's
// 176) and moved to bit 4 of each level by one shift and one bit select.
#include "kernels/neon/packed.h"

namespace spool::detail {
namespace {

using namespace packed_neon;

// Group super-block (720 bytes): the Q4_K group super-block (d[4], dmin[4]
// fp16; scales[8 sub-blocks][4 rows]; mins as 2 registers; qs[4 p][8 m]
// registers), then qh[8 m] registers: lane r of qh[m] = row r's qh bytes
// 4m .. 4m + 3 (bit s: the fifth bit of sub-block s, positions 4m .. 4m + 3).
struct Q5KPacked {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ5_K);
  static constexpr size_t kScales = K4Group::kScales, kMins = K4Group::kMins, kQs = K4Group::kQs;
  static constexpr size_t kQh = K4Group::kBytes, kBlockBytes = kQh + 8 * 16;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kBlockBytes; }
  static constexpr auto act_bytes = k4_act_bytes;
  static constexpr QuantizeRowFn quantize_act = k4_quantize_act;

  // qh with bit S moved to bit 4 (the other bits are masked by the caller).
  template <int S>
  static uint8x16_t fifth_at_4(uint8x16_t qh) {
    if constexpr (S < 4) return vshlq_n_u8(qh, 4 - S);
    if constexpr (S == 4) return qh;
    if constexpr (S > 4) return vshrq_n_u8(qh, S - 4);
  }

  // Adds sub-block S of C activation rows, times its scales, to tot.
  template <int C, int S>
  static void sub_block(const uint8_t* blk, int32x4_t scale, const uint8_t* act, size_t as,
                        int32x4_t (&tot)[C]) {
    // One register at a time (no 4-register loads: those keep 16 sources
    // live beside the 8 levels and the 8 sums, and GCC spills).
    const uint8x16_t bit4 = vdupq_n_u8(0x10);
    int8x16_t w[8];
    SPOOL_UNROLL for (int m = 0; m < 8; ++m) {
      const uint8x16_t raw = vld1q_u8(blk + kQs + 128 * (S / 2) + 16 * m), qh = vld1q_u8(blk + kQh + 16 * m);
      const uint8x16_t nibble = S % 2 ? vshrq_n_u8(raw, 4) : vandq_u8(raw, vdupq_n_u8(0x0F));
      w[m] = vreinterpretq_s8_u8(vbslq_u8(bit4, fifth_at_4<S>(qh), nibble));
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      const uint8_t* row = act + j * as + 32 * S;
      row = j == 0 ? row : after(row, tot[j - 1]);
      const int8x16x2_t a = vld1q_s8_x2(reinterpret_cast<const int8_t*>(row));
      const int32x4_t sum = dot4(dot4(vdupq_n_s32(0), w, a.val[0]), w + 4, a.val[1]);
      tot[j] = vmlaq_s32(tot[j], sum, scale);
    }
  }

  template <int C, int P>
  static void sub_block_pair(const uint8_t* blk, const uint8_t* act, size_t as, int32x4_t (&tot)[C]) {
    int32x4_t scale[2];
    widen_u8x8(blk + kScales + 8 * P, scale);
    sub_block<C, 2 * P>(blk, scale[0], act, as, tot);
    sub_block<C, 2 * P + 1>(blk, scale[1], act, as, tot);
  }

  // The Q4_K tile's arithmetic and float epilogue. The float accumulators
  // live in memory between super-blocks (through a pointer the optimizer
  // cannot see through): the sub-block loop needs the registers (with them
  // held, GCC spilled ~440 times per super-block at 8 tokens).
  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      const uint8_t* ab = act + b * kK4ActBlock;
      int32x4_t tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = vdupq_n_s32(0);
      sub_block_pair<C, 0>(blk, ab, as, tot);
      sub_block_pair<C, 1>(blk, ab, as, tot);
      sub_block_pair<C, 2>(blk, ab, as, tot);
      sub_block_pair<C, 3>(blk, ab, as, tot);
      const float32x4_t wd = load_f16x4(blk), wdmin = load_f16x4(blk + 2 * kRows);
      const int8x16x2_t mins_w = vld1q_s8_x2(reinterpret_cast<const int8_t*>(blk + kMins));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8x16x2_t tail = vld1q_s8_x2(reinterpret_cast<const int8_t*>(ab + j * as + kQKK));
        const float32x4_t d = vreinterpretq_f32_s8(tail.val[1]);  // lane 0
        const int32x4_t mins = k4_mins(mins_w, tail.val[0]);
        acc[j] = vfmaq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(tot[j]), wd), d, 0);
        acc[j] = vfmsq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(mins), wdmin), d, 0);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ5_K*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    std::memcpy(blk + 2 * kRows + 2 * r, &src.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      unpack_scale_min_k4(s, src.scales, &sc, &m);
      blk[kScales + 4 * s + r] = sc;
      blk[kMins + 16 * (s / 4) + 4 * r + s % 4] = m;
    }
    for (int k = 0; k < 32; ++k) std::memcpy(blk + kQs + 16 * k + 4 * r, src.qs + 4 * k, 4);
    for (int m = 0; m < 8; ++m) std::memcpy(blk + kQh + 16 * m + 4 * r, src.qh + 4 * m, 4);
  }
};

}  // namespace

void fill_packed_q5k_neon_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q5_K].packed = Packer<Q5KPacked>::kernels();
}

}  // namespace spool::detail
