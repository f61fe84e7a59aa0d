// Packed NEON kernels for Q4_0, Q8_0, MXFP4 and IQ4_NL (prefill gemm and decode gemv
// alike; design in neon/packed.h). A group block (4 rows x 32
// elements) is the 4 row scales, then the levels as 16-byte registers of
// 4 rows x one 4-byte chunk. Q4_0 keeps its nibbles (register m: chunk m in
// the low nibbles, chunk m + 4 in the high ones, as in the original bytes)
// and dots the 0..15 levels, each block's sum starting at -8 * sum(a) from
// the activation row; MXFP4 and IQ4_NL keep their nibbles too and look them
// up in their level tables (tbl); Q8_0 keeps its signed levels (sdot is signed x signed).
//
// Two schedulings of the same tiles (bit-identical results):
// - TiledPacked (default): the activation rows of a gemm call are copied
//   once into token tiles (gemm_tiled, neon/packed.h), per token and
//   block a 64-byte chunk: levels, the start of the int32 sum, the scale
//   broadcast. Per token and block the inner loop is 2 loads (ldp at
//   constant offsets) + 8 sdot + 3 float operations, and a block's weights
//   are loaded and unpacked once per 12 tokens (4 rows x 12 tokens: 12
//   accumulators, 8 weight registers, 4 for the token, the nibble mask: 25
//   of 32). GCC 12: 172 instructions per block of 4 rows x 12 tokens
//   (96 sdot), against 135 per 4 x 8 (64 sdot) before: 14.3 vs 16.9 per
//   8 sdot.
//   Calls of more than 12 tokens first unpack each group once into a
//   buffer and run tiles of 16 tokens from it (tile_prepared): 218
//   instructions per block of 4 rows x 16 tokens (128 sdot), 13.6 per 8
//   sdot; qemu proxy (neoverse-n1) Q4_0 prefill 20.9 -> 20.4 M per token.
// - LegacyPacked (SPOOL_NEON_TILES=v1, for comparison): tiles of up to 8
//   tokens read the activation rows in place (each token's own address, a
//   48-byte row entry and a lane broadcast of its bias).
#include <vector>

#include "kernels/neon/packed_legacy.h"

namespace spool::detail {

namespace {

using namespace packed_neon;

size_t legacy_act_bytes(int64_t n) { return (size_t)(n / kQK) * kActBlock; }

void legacy_quantize_act(const float* x, void* out, int64_t n) {
  const int64_t nb = n / kQK;
  thread_local std::vector<BlockQ8_0> tmp;
  tmp.resize(nb);
  neon::quantize_q8_0(x, tmp.data(), n);  // the table's Q8_0
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = static_cast<uint8_t*>(out) + b * kActBlock;
    std::memcpy(blk, tmp[b].qs, kQK);
    const float d = neon_h2f(tmp[b].d);
    const int32_t bias = -8 * (vaddlvq_s8(vld1q_s8(tmp[b].qs)) + vaddlvq_s8(vld1q_s8(tmp[b].qs + 16)));
    std::memcpy(blk + kQK, &d, 4);
    std::memcpy(blk + kQK + 4, &bias, 4);
    std::memset(blk + kQK + 8, 0, 8);
  }
}

template <class Ops>
struct LegacyPacked {
  static constexpr int kTokens = 8;  // activation rows per micro-tile
  static constexpr int kBlockCols = kQK;
  static constexpr size_t kSrcBytes = Ops::kSrcBytes;
  static constexpr size_t kBlockBytes = Ops::kScaleBytes + 16 * Ops::kRegs;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }
  static constexpr auto act_bytes = legacy_act_bytes;
  static constexpr QuantizeRowFn quantize_act = legacy_quantize_act;

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc,
                   int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK; ++b) {
      const uint8_t* blk = wg + b * kBlockBytes;
      const float32x4_t wd = Ops::scales(blk);
      int8x16_t w[8];
      Ops::levels(blk + Ops::kScaleBytes, w);
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const uint8_t* row = act + j * as + b * kActBlock;
        const int8_t* q = reinterpret_cast<const int8_t*>(j == 0 ? row : after(row, acc[j - 1]));
        const int8x16x2_t a = vld1q_s8_x2(q);
        const int32x4_t tail = vld1q_s32(reinterpret_cast<const int32_t*>(q + kQK));  // d, bias
        int32x4_t sum = Ops::kBias ? vdupq_laneq_s32(tail, 1) : vdupq_n_s32(0);
        sum = dot4(dot4(sum, w, a.val[0]), w + 4, a.val[1]);
        // sum * (wd * d), the reference's order (MXFP4's wd alone can be
        // near the end of the float range).
        acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(sum), vmulq_laneq_f32(wd, vreinterpretq_f32_s32(tail), 0));
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  // Row r's block: its scale (the block's first bytes in all three types),
  // then its 4-byte chunks into lane r of the level registers.
  static void pack_block(const uint8_t* src, int r, uint8_t* blk) {
    const size_t scale = Ops::kScaleBytes / kRows;
    std::memcpy(blk + scale * r, src, scale);
    for (int m = 0; m < Ops::kRegs; ++m)
      std::memcpy(blk + Ops::kScaleBytes + 16 * m + 4 * r, src + scale + 4 * m, 4);
  }
};

// Token tiles (gemm_tiled, neon/packed.h): one 64-byte chunk per
// token and block: the 32 levels, the start of the int32 sum in all 4 lanes
// (Q4_0's -8 * sum of the levels; 0 for the other types) and the float
// scale in all 4 lanes.
template <class Ops>
struct TiledPacked : LegacyPacked<Ops> {
  using Base = LegacyPacked<Ops>;
  static constexpr int kTileTokens = 12;
  static constexpr size_t kChunkBytes = 64;
  static size_t tile_token_bytes(int64_t n) { return (size_t)(n / kQK) * kChunkBytes; }

  static void copy_token(const uint8_t* row, int64_t n, uint8_t* out, size_t stride) {
    for (int64_t b = 0; b < n / kQK; ++b, row += kActBlock, out += stride) {
      const int8x16x2_t q = vld1q_s8_x2(reinterpret_cast<const int8_t*>(row));
      const int32x4_t tail = vld1q_s32(reinterpret_cast<const int32_t*>(row + kQK));  // d, bias
      vst1q_s8_x2(reinterpret_cast<int8_t*>(out), q);
      vst1q_s32(reinterpret_cast<int32_t*>(out + 32), Ops::kBias ? vdupq_laneq_s32(tail, 1) : vdupq_n_s32(0));
      vst1q_s32(reinterpret_cast<int32_t*>(out + 48), vdupq_laneq_s32(tail, 0));
    }
  }

  // Rows 4g .. 4g + 3 against the C tokens of one token tile at a; src: the
  // packed group, or (kPrepared) the group's prepare_group buffer.
  template <int C, bool kPrepared>
  static void tile_from(int64_t n, const uint8_t* src, const uint8_t* a, float* c, size_t ldc, int n_valid) {
    float32x4_t acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK; ++b) {
      float32x4_t wd;
      int8x16_t w[8];
      if constexpr (kPrepared) {
        const uint8_t* p = src + b * kPreparedBlock;
        wd = vld1q_f32(reinterpret_cast<const float*>(p));
        SPOOL_UNROLL for (int m = 0; m < 8; ++m) w[m] = vld1q_s8(reinterpret_cast<const int8_t*>(p + 16 + 16 * m));
      } else {
        const uint8_t* blk = src + b * Base::kBlockBytes;
        wd = Ops::scales(blk);
        Ops::levels(blk + Ops::kScaleBytes, w);
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        // Separate loads at constant offsets from a (two ldp, no address
        // arithmetic; a 4-register ld1 made GCC 12 copy the start register),
        // a made to depend on the previous token's result (after) so that
        // GCC does not start every token's loads at once and spill.
        if (j > 0) a = after(a, acc[j - 1]);
        const int8_t* e = reinterpret_cast<const int8_t*>(a + j * kChunkBytes);
        const int8x16_t q0 = vld1q_s8(e), q1 = vld1q_s8(e + 16);
        int32x4_t sum = vld1q_s32(reinterpret_cast<const int32_t*>(e + 32));
        const float32x4_t d = vld1q_f32(reinterpret_cast<const float*>(e + 48));
        sum = dot4(dot4(sum, w, q0), w + 4, q1);
        // sum * (wd * d), as LegacyPacked and the i8mm tiles.
        acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(sum), vmulq_f32(wd, d));
      }
      a += C * kChunkBytes;
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }
  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* a, float* c, size_t ldc, int n_valid) {
    tile_from<C, false>(n, wg, a, c, ldc, n_valid);
  }

  // Calls with more tokens than one tile: each group's blocks are unpacked
  // once into a per-thread buffer (the 4 row scales as floats, then the 8
  // level registers: kPreparedBlock bytes), and tiles of up to
  // kPreparedTokens tokens (the registers the unpacking needed now hold 4
  // more accumulators) load them with 5 loads per block.
  static constexpr int kPreparedTokens = 16;
  static constexpr size_t kPreparedBlock = 16 + 8 * 16;

  static void prepare_group(int64_t n, const uint8_t* wg, uint8_t* out) {
    for (int64_t b = 0; b < n / kQK; ++b, out += kPreparedBlock) {
      const uint8_t* blk = wg + b * Base::kBlockBytes;
      int8x16_t w[8];
      Ops::levels(blk + Ops::kScaleBytes, w);
      vst1q_f32(reinterpret_cast<float*>(out), Ops::scales(blk));
      auto* q = reinterpret_cast<int8_t*>(out + 16);
      vst1q_s8_x4(q, int8x16x4_t{{w[0], w[1], w[2], w[3]}});
      vst1q_s8_x4(q + 64, int8x16x4_t{{w[4], w[5], w[6], w[7]}});
    }
  }

  template <int C>
  static void tile_prepared(int64_t n, const uint8_t* prepared, const uint8_t* a, float* c, size_t ldc,
                            int n_valid) {
    tile_from<C, true>(n, prepared, a, c, ldc, n_valid);
  }
  static size_t prepared_bytes(int64_t n) { return (size_t)(n / kQK) * kPreparedBlock; }

  static void gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                   float* c, size_t ldc) {
    if (n_tokens <= kTileTokens) return gemm_tiled<TiledPacked>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
    gemm_tiled<TiledPacked, true>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
  }

  static PackedKernels kernels() {
    PackedKernels k = Packer<Base>::kernels();
    k.gemm = gemm;
    return k;
  }
};

template <class Ops>
PackedKernels legacy_kernels() {
  return v1_tiles() ? Packer<LegacyPacked<Ops>>::kernels() : TiledPacked<Ops>::kernels();
}

}  // namespace

namespace packed_neon {

template <class Ops, bool kV1>
void dotprod_gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                  float* c, size_t ldc) {
  if constexpr (kV1) gemm_groups<LegacyPacked<Ops>>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
  else TiledPacked<Ops>::gemm(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
}

#define SPOOL_DOTPROD_GEMM(Ops, kV1)                                                                 \
  template void dotprod_gemm<Ops, kV1>(int64_t, const void*, int64_t, const void*, size_t, int64_t, \
                                       float*, size_t);
SPOOL_DOTPROD_GEMM(Q4_0Ops, false)
SPOOL_DOTPROD_GEMM(Q4_0Ops, true)
SPOOL_DOTPROD_GEMM(Q8_0Ops, false)
SPOOL_DOTPROD_GEMM(Q8_0Ops, true)
SPOOL_DOTPROD_GEMM(MXFP4Ops, false)
SPOOL_DOTPROD_GEMM(MXFP4Ops, true)
SPOOL_DOTPROD_GEMM(IQ4_NLOps, false)
SPOOL_DOTPROD_GEMM(IQ4_NLOps, true)
#undef SPOOL_DOTPROD_GEMM

}  // namespace packed_neon

void fill_packed_legacy_neon_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q4_0].packed = legacy_kernels<Q4_0Ops>();
  t.types[(uint32_t)DType::Q8_0].packed = legacy_kernels<Q8_0Ops>();
  t.types[(uint32_t)DType::MXFP4].packed = legacy_kernels<MXFP4Ops>();
  t.types[(uint32_t)DType::IQ4_NL].packed = legacy_kernels<IQ4_NLOps>();
}

void fill_packed_neon_kernels(KernelTable& t) {
  fill_packed_legacy_neon_kernels(t);
  fill_packed_kquant_neon_kernels(t);
  fill_packed_q5k_neon_kernels(t);
}

}  // namespace spool::detail
