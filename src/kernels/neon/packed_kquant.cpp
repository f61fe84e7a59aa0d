// Packed NEON kernels for Q4_K and Q6_K, the bulk of Q4_K_M files (design
// in neon/packed.h). Per super-block a 4-row group holds the fp16
// row scales, the sub-block scales as one byte per (sub-block, row), then
// the levels as 16-byte registers of 4 rows x one 4-byte chunk. Each
// sub-block's int32 sums are weighted by its scales with one mla; Q4_K's
// minimums come from per-32 activation sums by sdot, Q6_K's offset of 32
// from per-16 activation sums that start each sub-block's sum.
#include <vector>

#include "kernels/neon/packed.h"

namespace spool::detail {
namespace {

using namespace packed_neon;

// The NEON table's Q8_K quantization of a row, in a per-thread buffer.
constexpr auto quantize_q8_k_tmp = packing::q8_k_row<neon::quantize_q8_k>;

// 8 bytes (the 4 rows of two sub-blocks) widened to int32, signed (the
// unsigned widen_u8x8 is in neon/packed.h).
inline void widen_s8x8(const uint8_t* p, int32x4_t (&out)[2]) {
  const int16x8_t v = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(p)));
  out[0] = vmovl_s16(vget_low_s16(v));
  out[1] = vmovl_high_s16(v);
}

// ---- Q4_K ------------------------------------------------------------------------
// Activation row: kK4ActBlock per super-block (neon/packed.h).
// Group super-block (592 bytes): d[4], dmin[4] fp16; scales[8 sub-blocks][4
// rows]; mins as 2 registers (lane r: sub-blocks 4k .. 4k + 3 of row r);
// qs[4 p][8 m] registers (lane r of qs[p][m] = row r's bytes 32p + 4m .. + 3:
// chunk m of sub-block 2p in the low nibbles, of 2p + 1 in the high ones).
struct Q4KPacked {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ4_K);
  static constexpr size_t kScales = K4Group::kScales, kMins = K4Group::kMins, kQs = K4Group::kQs;
  static constexpr size_t kBlockBytes = K4Group::kBytes;
  static constexpr size_t kActBlock = kK4ActBlock;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kBlockBytes; }
  static constexpr auto act_bytes = k4_act_bytes;
  static constexpr QuantizeRowFn quantize_act = k4_quantize_act;

  // Adds sub-block 2p + kHigh of C activation rows, times its scales, to tot.
  template <int C, int kHigh>
  static void sub_block(const uint8_t* blk, int32x4_t scale, int p, const uint8_t* act, size_t as,
                        int32x4_t (&tot)[C]) {
    const uint8x16x4_t lo = vld1q_u8_x4(blk + kQs + 128 * p), hi = vld1q_u8_x4(blk + kQs + 128 * p + 64);
    int8x16_t w[8];
    auto nibbles = [](uint8x16_t raw) {
      return vreinterpretq_s8_u8(kHigh ? vshrq_n_u8(raw, 4) : vandq_u8(raw, vdupq_n_u8(0x0F)));
    };
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) w[m] = nibbles(lo.val[m]), w[m + 4] = nibbles(hi.val[m]);
    const size_t off = 32 * (2 * p + kHigh);
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      const uint8_t* row = act + j * as + off;
      row = j == 0 ? row : after(row, tot[j - 1]);
      const int8x16x2_t a = vld1q_s8_x2(reinterpret_cast<const int8_t*>(row));
      const int32x4_t sum = dot4(dot4(vdupq_n_s32(0), w, a.val[0]), w + 4, a.val[1]);
      tot[j] = vmlaq_s32(tot[j], sum, scale);
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      const uint8_t* ab = act + b * kActBlock;
      int32x4_t tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = vdupq_n_s32(0);
      for (int p = 0; p < 4; ++p) {
        int32x4_t scale[2];
        widen_u8x8(blk + kScales + 8 * p, scale);
        sub_block<C, 0>(blk, scale[0], p, ab, as, tot);
        sub_block<C, 1>(blk, scale[1], p, ab, as, tot);
      }
      const float32x4_t wd = load_f16x4(blk), wdmin = load_f16x4(blk + 2 * kRows);
      const int8x16x2_t mins_w = vld1q_s8_x2(reinterpret_cast<const int8_t*>(blk + kMins));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8x16x2_t tail = vld1q_s8_x2(reinterpret_cast<const int8_t*>(ab + j * as + kQKK));
        const int8x16_t sums = tail.val[0];
        const float32x4_t d = vreinterpretq_f32_s8(tail.val[1]);  // lane 0
        const int32x4_t mins = k4_mins(mins_w, sums);
        acc[j] = vfmaq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(tot[j]), wd), d, 0);
        acc[j] = vfmsq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(mins), wdmin), d, 0);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ4_K*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    std::memcpy(blk + 2 * kRows + 2 * r, &src.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      unpack_scale_min_k4(s, src.scales, &sc, &m);
      blk[kScales + 4 * s + r] = sc;
      blk[kMins + 16 * (s / 4) + 4 * r + s % 4] = m;
    }
    for (int k = 0; k < 32; ++k) std::memcpy(blk + kQs + 16 * k + 4 * r, src.qs + 4 * k, 4);
  }
};

// ---- Q6_K ------------------------------------------------------------------------
// Activation row, per super-block (kActBlock bytes): per sub-block its 16
// int8 levels and -32 * their sum in all 4 int32 lanes (the start of its
// sdot chain, one 32-byte load with the levels); then the float scale and
// padding.
// Group super-block (840 bytes, the 4 rows' own size): d[4] fp16;
// scales[16 sub-blocks][4 rows] int8; ql[32 v] registers (lane r: row r's
// low 4 bits of chunk v in the low nibbles, of chunk v + 32 in the high
// ones); qh[16 u] registers with the top 2 bits of chunks u, u + 16, u + 32,
// u + 48 at bits 0, 6, 4, 2: there one instruction isolates them for the
// sli / sri that joins them to the low bits. Chunk c = elements 4c .. 4c + 3;
// sub-block s = chunks 4s .. 4s + 3.
struct Q6KPacked {
  static constexpr int kTokens = 8;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ6_K);
  static constexpr size_t kScales = 2 * kRows, kQl = kScales + 16 * kRows, kQh = kQl + 32 * 16;
  static constexpr size_t kBlockBytes = kQh + 16 * 16;
  static constexpr size_t kActBlock = 16 * 32 + 16;  // (levels, bias) per sub-block, d, padding
  static constexpr int kHighPos[4] = {0, 6, 4, 2};  // bit of chunk u + 16k's top bits in qh[u]
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kBlockBytes; }
  static size_t act_bytes(int64_t n) { return (size_t)(n / kQKK) * kActBlock; }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const BlockQ8_K* y = quantize_q8_k_tmp(x, n);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      uint8_t* blk = static_cast<uint8_t*>(out) + b * kActBlock;
      for (int s = 0; s < 16; ++s) {
        std::memcpy(blk + 32 * s, y[b].qs + 16 * s, 16);
        vst1q_s32(reinterpret_cast<int32_t*>(blk + 32 * s + 16), vdupq_n_s32(-32 * y[b].bsums[s]));
      }
      std::memcpy(blk + 16 * 32, &y[b].d, 4);
      std::memset(blk + 16 * 32 + 4, 0, 12);
    }
  }

  // Levels 0..63 of chunk 16K + (chunk of ql, qh) from its two registers.
  template <int K>
  static int8x16_t level(uint8x16_t ql, uint8x16_t qh) {
    uint8x16_t v;
    if constexpr (K == 0) v = vsliq_n_u8(ql, vandq_u8(qh, vdupq_n_u8(0x03)), 4);
    if constexpr (K == 1) v = vsliq_n_u8(ql, vshrq_n_u8(qh, 6), 4);
    if constexpr (K == 2) v = vsriq_n_u8(vandq_u8(qh, vdupq_n_u8(0x3F)), ql, 4);
    if constexpr (K == 3) v = vsriq_n_u8(vandq_u8(vshlq_n_u8(qh, 2), vdupq_n_u8(0x3F)), ql, 4);
    return vreinterpretq_s8_u8(v);
  }

  // Adds sub-block 4K + s4 of the C activation rows at a[j] (then moved to
  // the next sub-block), times its scales, to tot.
  template <int C, int K>
  static void sub_block(const uint8_t* blk, int32x4_t scale, int s4, const uint8_t* (&a)[C],
                        int32x4_t (&tot)[C]) {
    const uint8x16x4_t ql = vld1q_u8_x4(blk + kQl + 16 * (16 * (K % 2) + 4 * s4));
    const uint8x16x4_t qh = vld1q_u8_x4(blk + kQh + 16 * (4 * s4));
    int8x16_t w[4];
    SPOOL_UNROLL for (int i = 0; i < 4; ++i) w[i] = level<K>(ql.val[i], qh.val[i]);
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      if (j > 0) a[j] = after(a[j], tot[j - 1]);
      const int8x16_t q = vld1q_s8(reinterpret_cast<const int8_t*>(a[j]));
      const int32x4_t bias = vld1q_s32(reinterpret_cast<const int32_t*>(a[j] + 16));
      a[j] += 32;  // the next sub-block
      tot[j] = vmlaq_s32(tot[j], dot4(bias, w, q), scale);
    }
  }

  template <int C, int K>
  static void quarter(const uint8_t* blk, const uint8_t* (&a)[C], int32x4_t (&tot)[C]) {
    for (int s4 = 0; s4 < 4; s4 += 2) {
      int32x4_t scale[2];
      widen_s8x8(blk + kScales + 4 * (4 * K + s4), scale);
      sub_block<C, K>(blk, scale[0], s4, a, tot);
      sub_block<C, K>(blk, scale[1], s4 + 1, a, tot);
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      const uint8_t* a[C];
      int32x4_t tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        a[j] = act + j * as + b * kActBlock;
        tot[j] = vdupq_n_s32(0);
      }
      quarter<C, 0>(blk, a, tot);
      quarter<C, 1>(blk, a, tot);
      quarter<C, 2>(blk, a, tot);
      quarter<C, 3>(blk, a, tot);
      const float32x4_t wd = load_f16x4(blk);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float d = *reinterpret_cast<const float*>(a[j]);  // after the 16 sub-blocks
        acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(tot[j]), vmulq_n_f32(wd, d));
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ6_K*>(src_block);
    uint8_t u[kQKK];  // levels 0..63 in element order
    for (int half = 0; half < 2; ++half) {
      const uint8_t *ql = src.ql + 64 * half, *qh = src.qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        u[128 * half + l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
        u[128 * half + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        u[128 * half + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        u[128 * half + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    std::memcpy(blk + 2 * r, &src.d, 2);
    for (int s = 0; s < 16; ++s) blk[kScales + 4 * s + r] = (uint8_t)src.scales[s];
    for (int c = 0; c < 64; ++c) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t v = u[4 * c + i];
        blk[kQl + 16 * (c % 32) + 4 * r + i] |= (uint8_t)((v & 0xF) << (c < 32 ? 0 : 4));
        blk[kQh + 16 * (c % 16) + 4 * r + i] |= (uint8_t)((v >> 4) << kHighPos[c / 16]);
      }
    }
  }
};

// Q4_K on token tiles (gemm_tiled, neon/packed.h): per token and
// super-block the activation row's 9 chunks of 32 bytes (8 sub-blocks of
// levels; the split sums and the scale), token-interleaved. Per sub-block
// and token one ldp at a constant offset from the tile pointer; the same
// operations per token as Q4KPacked otherwise (bit-identical results).
struct Q4KTiled : Q4KPacked {
  static constexpr int kTileTokens = 8;
  static constexpr size_t kChunkBytes = 32;
  static size_t tile_token_bytes(int64_t n) { return (size_t)(n / kQKK) * 9 * kChunkBytes; }

  static void copy_token(const uint8_t* row, int64_t n, uint8_t* out, size_t stride) {
    for (int64_t b = 0; b < n / kQKK; ++b, row += kActBlock)
      for (int k = 0; k < 9; ++k, out += stride) vst1q_u8_x2(out, vld1q_u8_x2(row + 32 * k));
  }

  // Adds sub-block 2p + kHigh of the C tokens at a (then moved to the next
  // sub-block), times its scales, to tot.
  template <int C, int kHigh>
  static void sub_block(const uint8_t* blk, int32x4_t scale, int p, const uint8_t*& a, int32x4_t (&tot)[C]) {
    const uint8x16x4_t lo = vld1q_u8_x4(blk + kQs + 128 * p), hi = vld1q_u8_x4(blk + kQs + 128 * p + 64);
    int8x16_t w[8];
    auto nibbles = [](uint8x16_t raw) {
      return vreinterpretq_s8_u8(kHigh ? vshrq_n_u8(raw, 4) : vandq_u8(raw, vdupq_n_u8(0x0F)));
    };
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) w[m] = nibbles(lo.val[m]), w[m + 4] = nibbles(hi.val[m]);
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      if (j > 0) a = after(a, tot[j - 1]);
      const int8_t* e = reinterpret_cast<const int8_t*>(a + j * kChunkBytes);
      const int8x16_t q0 = vld1q_s8(e), q1 = vld1q_s8(e + 16);
      const int32x4_t sum = dot4(dot4(vdupq_n_s32(0), w, q0), w + 4, q1);
      tot[j] = vmlaq_s32(tot[j], sum, scale);
    }
    a += C * kChunkBytes;
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* a, float* c, size_t ldc, int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      int32x4_t tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = vdupq_n_s32(0);
      for (int p = 0; p < 4; ++p) {
        int32x4_t scale[2];
        widen_u8x8(blk + kScales + 8 * p, scale);
        sub_block<C, 0>(blk, scale[0], p, a, tot);
        sub_block<C, 1>(blk, scale[1], p, a, tot);
      }
      const float32x4_t wd = load_f16x4(blk), wdmin = load_f16x4(blk + 2 * kRows);
      const int8x16x2_t mins_w = vld1q_s8_x2(reinterpret_cast<const int8_t*>(blk + kMins));
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8_t* e = reinterpret_cast<const int8_t*>(a + j * kChunkBytes);
        const int8x16_t sums = vld1q_s8(e);
        const float32x4_t d = vreinterpretq_f32_s8(vld1q_s8(e + 16));  // lane 0
        const int32x4_t mins = k4_mins(mins_w, sums);
        acc[j] = vfmaq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(tot[j]), wd), d, 0);
        acc[j] = vfmsq_laneq_f32(acc[j], vmulq_f32(vcvtq_f32_s32(mins), wdmin), d, 0);
      }
      a += C * kChunkBytes;
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static PackedKernels kernels() {
    PackedKernels k = Packer<Q4KPacked>::kernels();
    k.gemm = gemm_tiled<Q4KTiled>;
    return k;
  }
};

// Q6_K on token tiles (gemm_tiled, neon/packed.h): per token and
// super-block 17 chunks of 32 bytes, the 16 (levels, bias) pairs of the
// activation row and the scale in all 4 lanes. One pointer walks a tile:
// per sub-block and token one ldp at a constant offset, where the row
// layout took two loads and a pointer increment per token. Same operations
// per token otherwise, so results equal Q6KPacked's bit for bit.
struct Q6KTiled : Q6KPacked {
  static constexpr int kTileTokens = 8;
  static constexpr size_t kChunkBytes = 32;
  static size_t tile_token_bytes(int64_t n) { return (size_t)(n / kQKK) * 17 * kChunkBytes; }

  static void copy_token(const uint8_t* row, int64_t n, uint8_t* out, size_t stride) {
    for (int64_t b = 0; b < n / kQKK; ++b, row += kActBlock) {
      for (int s = 0; s < 16; ++s, out += stride)
        vst1q_u8_x2(out, vld1q_u8_x2(row + 32 * s));
      float d;
      std::memcpy(&d, row + 16 * 32, 4);
      vst1q_f32(reinterpret_cast<float*>(out), vdupq_n_f32(d));
      out += stride;
    }
  }

  // Adds sub-block 4K + s4 of the C tokens at a (then moved to the next
  // sub-block), times its scales, to tot.
  template <int C, int K>
  static void sub_block(const uint8_t* blk, int32x4_t scale, int s4, const uint8_t*& a, int32x4_t (&tot)[C]) {
    const uint8x16x4_t ql = vld1q_u8_x4(blk + kQl + 16 * (16 * (K % 2) + 4 * s4));
    const uint8x16x4_t qh = vld1q_u8_x4(blk + kQh + 16 * (4 * s4));
    int8x16_t w[4];
    SPOOL_UNROLL for (int i = 0; i < 4; ++i) w[i] = level<K>(ql.val[i], qh.val[i]);
    SPOOL_UNROLL for (int j = 0; j < C; ++j) {
      if (j > 0) a = after(a, tot[j - 1]);
      const int8x16_t q = vld1q_s8(reinterpret_cast<const int8_t*>(a + j * kChunkBytes));
      const int32x4_t bias = vld1q_s32(reinterpret_cast<const int32_t*>(a + j * kChunkBytes + 16));
      tot[j] = vmlaq_s32(tot[j], dot4(bias, w, q), scale);
    }
    a += C * kChunkBytes;
  }

  template <int C, int K>
  static void quarter(const uint8_t* blk, const uint8_t*& a, int32x4_t (&tot)[C]) {
    for (int s4 = 0; s4 < 4; s4 += 2) {
      int32x4_t scale[2];
      widen_s8x8(blk + kScales + 4 * (4 * K + s4), scale);
      sub_block<C, K>(blk, scale[0], s4, a, tot);
      sub_block<C, K>(blk, scale[1], s4 + 1, a, tot);
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* a, float* c, size_t ldc, int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      int32x4_t tot[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = vdupq_n_s32(0);
      quarter<C, 0>(blk, a, tot);
      quarter<C, 1>(blk, a, tot);
      quarter<C, 2>(blk, a, tot);
      quarter<C, 3>(blk, a, tot);
      const float32x4_t wd = load_f16x4(blk);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float32x4_t d = vld1q_f32(reinterpret_cast<const float*>(a + j * kChunkBytes));
        acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(tot[j]), vmulq_f32(wd, d));
      }
      a += C * kChunkBytes;
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  // 1-token calls (decode) keep the row tiles: for one token the copy does
  // not pay (qemu: 1.6 % more instructions per call), and the results are
  // the same bit for bit.
  static void gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                   float* c, size_t ldc) {
    if (n_tokens == 1) return gemm_groups<Q6KPacked>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
    gemm_tiled<Q6KTiled>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
  }

  static PackedKernels kernels() {
    PackedKernels k = Packer<Q6KPacked>::kernels();
    k.gemm = gemm;
    return k;
  }
};

}  // namespace

namespace packed_neon {

size_t k4_act_bytes(int64_t n) { return (size_t)(n / kQKK) * kK4ActBlock; }

void k4_quantize_act(const float* x, void* out, int64_t n) {
  const BlockQ8_K* y = quantize_q8_k_tmp(x, n);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t* blk = static_cast<uint8_t*>(out) + b * kK4ActBlock;
    std::memcpy(blk, y[b].qs, kQKK);
    auto* sums = reinterpret_cast<int8_t*>(blk + kQKK);
    for (int s = 0; s < 8; ++s) {
      const int sum = y[b].bsums[2 * s] + y[b].bsums[2 * s + 1];  // |sum| <= 32 * 128
      sums[s] = (int8_t)(sum & 63);
      sums[8 + s] = (int8_t)(sum >> 6);
    }
    std::memcpy(blk + kQKK + 16, &y[b].d, 4);
    std::memset(blk + kQKK + 20, 0, 12);
  }
}

}  // namespace packed_neon

void fill_packed_kquant_neon_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_K].packed = v1_tiles() ? Packer<Q4KPacked>::kernels() : Q4KTiled::kernels();
  t.types[(uint32_t)DType::Q6_K].packed = v1_tiles() ? Packer<Q6KPacked>::kernels() : Q6KTiled::kernels();
}

}  // namespace spool::detail
