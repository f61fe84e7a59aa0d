// SMMLA (FEAT_I8MM) tiles for the packed Q4_0, Q8_0, MXFP4 and IQ4_NL kernels, for
// calls of 2 or more tokens (prefill, batched decode); 1-token calls keep
// the dotprod tiles (neon/packed_legacy.cpp). Same packed groups and
// activation rows, so the layout does not depend on the CPU. Compiled with
// +i8mm (CMakeLists.txt) and entered only when the CPU reports it.
//
// SMMLA multiplies a 2x8 by an 8x2 int8 matrix into a 2x2 int32 tile: the
// weight operand is 2 rows x 8 elements, one zip of two chunk registers of
// the group (vzip1q_s32 of chunks 2i, 2i + 1 gives rows 0-1, vzip2q_s32 rows
// 2-3); the activation operand is 2 tokens x 8 elements, one 64-bit zip of
// the two tokens' rows, made once per call for all groups (interleave_pairs).
// A tile is 4 rows x 4 token pairs: per block 8 weight zips, and per pair
// 8 SMMLA (the dotprod tile: 16 sdot) and the same 2 x 3 float operations
// as the dotprod tile's 2 tokens.
//
// A call with more token pairs than one tile holds unpacks and zips each
// group's blocks once into a per-thread buffer of ready SMMLA operands and
// row-pair scales (prepare_group, 160 bytes per block), which every tile of
// the group then loads (3 loads per block instead of the 21 unpacking and
// zipping instructions per tile), and the token pairs are stored
// tile-major (interleave_pairs). Prefill instructions per token under qemu
// (-cpu max, 4-layer TinyLlama, bench/neon_proxy.sh): Q4_0 and Q8_0 19.1 M ->
// 16.9 M; the prepared tile runs 88 instructions per block of 4 rows x 8
// tokens (32 SMMLA, 24 float, 22 loads).
//
// Batch invariance: the int32 sums are exact, and the float epilogue is the
// dotprod tile's, lane by lane: acc = fma(acc, (float)sum, wd[row] * d[tok])
// block after block; so a token's result is bit-identical whichever tile
// computed it, and whichever token it was paired with.
//
// Not yet for Q4_K / Q6_K: a first Q4_K tile (per sub-block 8 weight zips,
// 8 SMMLA per pair, an mla by the zipped sub-block scales) spilled under
// GCC 12 and ran 154 qemu instructions per 4 rows x 8 tokens x 32 weights
// against the dotprod tile's 135.
#include <array>
#include <utility>
#include <vector>

#include "kernels/neon/packed_legacy.h"

namespace spool::detail {
namespace {

using namespace packed_neon;

// Token pairs, interleaved once per gemm call (each group then reads them
// with no shuffles): per pair and block (kPairBlock bytes) 4 SMMLA operands
// (elements 8i .. 8i + 7 of both tokens), the scales d0, d1, d0, d1, and
// twice the start of the int32 sums: Q4_0's bias0, bias1, bias0, bias1 (the
// lane order of a 2x2 tile), or zeros. Twice, so that the two row pairs'
// accumulators are loaded, not copied (SMMLA overwrites its accumulator).
// Tile-major: the pairs of one tile (up to kPairs) lie side by side for each
// block, so a tile reads one stream at constant offsets: pair j of a tile of
// np pairs, block b, at the tile's start + (b * np + j) * kPairBlock.
constexpr size_t kPairBlock = 64 + 48;

template <bool kBias>
void interleave_pairs(const uint8_t* act, size_t as, int64_t n_tokens, int64_t nb, int k_pairs, uint8_t* out) {
  const int64_t n_pairs = (n_tokens + 1) / 2;
  for (int64_t t = 0; t < n_tokens; t += 2) {
    const uint8_t* r0 = act + t * as;
    const uint8_t* r1 = t + 1 < n_tokens ? r0 + as : r0;  // an odd last token is paired with itself
    const int64_t p = t / 2, tile = p / k_pairs;
    const int64_t np = std::min<int64_t>(k_pairs, n_pairs - tile * k_pairs);
    uint8_t* o = out + (tile * k_pairs * nb + p % k_pairs) * kPairBlock;
    for (int64_t b = 0; b < nb; ++b, r0 += kActBlock, r1 += kActBlock, o += np * kPairBlock) {
      uint8_t* out = o;
      const int8x16x2_t a0 = vld1q_s8_x2(reinterpret_cast<const int8_t*>(r0));
      const int8x16x2_t a1 = vld1q_s8_x2(reinterpret_cast<const int8_t*>(r1));
      int8x16x4_t x;
      SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
        const int64x2_t x0 = vreinterpretq_s64_s8(a0.val[h]), x1 = vreinterpretq_s64_s8(a1.val[h]);
        x.val[2 * h] = vreinterpretq_s8_s64(vzip1q_s64(x0, x1));
        x.val[2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(x0, x1));
      }
      vst1q_s8_x4(reinterpret_cast<int8_t*>(out), x);
      // (d, bias) of both tokens: lanes d0, d1, bias0, bias1.
      const int64x2_t tails = vreinterpretq_s64_s32(vzip1q_s32(vld1q_s32(reinterpret_cast<const int32_t*>(r0 + kQK)),
                                                               vld1q_s32(reinterpret_cast<const int32_t*>(r1 + kQK))));
      const int64x2_t start = kBias ? vdupq_laneq_s64(tails, 1) : vdupq_n_s64(0);
      vst1q_s64(reinterpret_cast<int64_t*>(out + 64), vdupq_laneq_s64(tails, 0));
      vst1q_s64(reinterpret_cast<int64_t*>(out + 80), start);
      vst1q_s64(reinterpret_cast<int64_t*>(out + 96), start);
    }
  }
}

// Stores a tile's pair accumulators: rows 0-1 and 2-3 of pair p hold tokens
// 2p and 2p + 1 in lanes (r, t0), (r, t1), (r + 1, t0), (r + 1, t1).
template <int NP>
inline void store_pairs(const float32x4_t (&acc)[NP][2], float* c, size_t ldc, int n_tok, int n_valid) {
  SPOOL_UNROLL for (int p = 0; p < NP; ++p) {
    store_rows(c + 2 * p * ldc, vuzp1q_f32(acc[p][0], acc[p][1]), n_valid);
    if (2 * p + 1 < n_tok) store_rows(c + (2 * p + 1) * ldc, vuzp2q_f32(acc[p][0], acc[p][1]), n_valid);
  }
}

// The gemm of a type with SMMLA tiles K: 1-token calls go to the dotprod
// gemm it replaces (dotprod_gemm, packed_legacy.h: the token tiles, or with
// kV1 the row tiles of SPOOL_NEON_TILES=v1); otherwise token pairs are
// interleaved once (K::interleave) and every group runs tiles of up to
// K::kPairs pairs (K::tile<NP>).
template <class K, bool kV1>
struct PairDriver {
  static void gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                   float* c, size_t ldc) {
    if (n_tokens == 1) return dotprod_gemm<typename K::Ops, kV1>(n_cols, w, n_rows, act, as, n_tokens, c, ldc);
    using TileFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t, int, int);
    static constexpr int kPairs = K::kPairs;
    static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
      return std::array<TileFn, sizeof...(I)>{&K::template tile<I + 1>...};
    }(std::make_integer_sequence<int, kPairs>());
    const int64_t n_pairs = (n_tokens + 1) / 2;
    const size_t ps = K::pair_bytes(n_cols);
    thread_local std::vector<uint8_t> pairs;
    pairs.resize(n_pairs * ps);
    K::interleave(static_cast<const uint8_t*>(act), as, n_tokens, n_cols, pairs.data());
    static constexpr auto kPreparedFns = []<int... I>(std::integer_sequence<int, I...>) {
      return std::array<TileFn, sizeof...(I)>{&K::template tile_prepared<I + 1>...};
    }(std::make_integer_sequence<int, kPairs>());
    // More than one tile per group: the group's operands once into a buffer.
    const bool prepare = n_pairs > kPairs;
    thread_local std::vector<uint8_t> prepared;
    if (prepare) prepared.resize(K::prepared_bytes(n_cols));
    const size_t group_bytes = K::group_bytes(n_cols);
    const auto* wg = static_cast<const uint8_t*>(w);
    for (int64_t g = 0; g < n_groups(n_rows); ++g, wg += group_bytes) {
      const int n_valid = (int)std::min<int64_t>(kRows, n_rows - g * kRows);
      if (prepare) K::prepare_group(n_cols, wg, prepared.data());
      const auto& fns = prepare ? kPreparedFns : kFns;
      const uint8_t* src = prepare ? prepared.data() : wg;
      for (int64_t p = 0; p < n_pairs; p += kPairs) {
        const int np = (int)std::min<int64_t>(kPairs, n_pairs - p);
        const int nt = (int)std::min<int64_t>(2 * kPairs, n_tokens - 2 * p);
        fns[np - 1](n_cols, src, pairs.data() + p * ps, ps, c + 2 * p * ldc + g * kRows, ldc, nt, n_valid);
      }
    }
  }

  static void install(PackedKernels& k) {
    if (k.rows != kRows || !k.gemm) return;  // not the dotprod layout these tiles read
    k.gemm = gemm;
  }
};

template <class OpsT>
struct I8mmLegacy {
  using Ops = OpsT;
  static constexpr int kPairs = 4;  // token pairs per tile
  static constexpr size_t kBlockBytes = Ops::kScaleBytes + 16 * Ops::kRegs;

  // One block's SMMLA operands: wp[h][i] = rows 2h, 2h + 1 x elements
  // 8i .. 8i + 7; the row scales as (r, r, r + 1, r + 1) for each row pair.
  struct BlockOperands {
    int8x16_t wp[2][4];
    float32x4_t wd01, wd23;
  };

  static BlockOperands unpack_block(const uint8_t* blk) {
    BlockOperands o;
    const float32x4_t wd = Ops::scales(blk);
    o.wd01 = vzip1q_f32(wd, wd), o.wd23 = vzip2q_f32(wd, wd);
    int8x16_t w[8];
    Ops::levels(blk + Ops::kScaleBytes, w);
    SPOOL_UNROLL for (int i = 0; i < 4; ++i) {
      const int32x4_t lo = vreinterpretq_s32_s8(w[2 * i]), hi = vreinterpretq_s32_s8(w[2 * i + 1]);
      o.wp[0][i] = vreinterpretq_s8_s32(vzip1q_s32(lo, hi));
      o.wp[1][i] = vreinterpretq_s8_s32(vzip2q_s32(lo, hi));
    }
    return o;
  }

  // A prepared block: wp[0][0..3], wp[1][0..3], wd01, wd23.
  static constexpr size_t kPreparedBlock = 8 * 16 + 2 * 16;
  static size_t prepared_bytes(int64_t n) { return (size_t)(n / kQK) * kPreparedBlock; }
  static void prepare_group(int64_t n, const uint8_t* wg, uint8_t* out) {
    for (int64_t b = 0; b < n / kQK; ++b, out += kPreparedBlock) {
      const BlockOperands o = unpack_block(wg + b * kBlockBytes);
      auto* q = reinterpret_cast<int8_t*>(out);
      vst1q_s8_x4(q, int8x16x4_t{{o.wp[0][0], o.wp[0][1], o.wp[0][2], o.wp[0][3]}});
      vst1q_s8_x4(q + 64, int8x16x4_t{{o.wp[1][0], o.wp[1][1], o.wp[1][2], o.wp[1][3]}});
      vst1q_f32(reinterpret_cast<float*>(out + 128), o.wd01);
      vst1q_f32(reinterpret_cast<float*>(out + 144), o.wd23);
    }
  }
  static BlockOperands load_prepared(const uint8_t* p) {
    BlockOperands o;
    const auto* q = reinterpret_cast<const int8_t*>(p);
    SPOOL_UNROLL for (int i = 0; i < 4; ++i) o.wp[0][i] = vld1q_s8(q + 16 * i), o.wp[1][i] = vld1q_s8(q + 64 + 16 * i);
    o.wd01 = vld1q_f32(reinterpret_cast<const float*>(p + 128));
    o.wd23 = vld1q_f32(reinterpret_cast<const float*>(p + 144));
    return o;
  }

  // Rows 4g .. 4g + 3 of a group against the NP interleaved token pairs of
  // one tile (tile-major, interleave_pairs; ps unused); n_tok of the 2 * NP
  // tokens are stored. kPrepared: src is the group's prepare_group buffer,
  // else the packed group.
  template <int NP, bool kPrepared>
  static void tile_from(int64_t n, const uint8_t* src, const uint8_t* pairs, size_t ps, float* c, size_t ldc,
                        int n_tok, int n_valid) {
    float32x4_t acc[NP][2];  // [pair][rows 0-1 / 2-3], lanes (r, t0), (r, t1), (r + 1, t0), (r + 1, t1)
    SPOOL_UNROLL for (int p = 0; p < NP; ++p) acc[p][0] = acc[p][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK; ++b) {
      const BlockOperands o =
          kPrepared ? load_prepared(src + b * kPreparedBlock) : unpack_block(src + b * kBlockBytes);
      SPOOL_UNROLL for (int p = 0; p < NP; ++p) {
        const uint8_t* q = pairs + (b * NP + p) * kPairBlock;
        if (p > 0) q = after(q, acc[p - 1][1]);
        // Separate loads: GCC 12 copies register tuples (ld1 of 2-4
        // registers) around the accumulating SMMLAs.
        const int8_t* qa = reinterpret_cast<const int8_t*>(q);
        const int32_t* qt = reinterpret_cast<const int32_t*>(q + 64);
        const float32x4_t d = vreinterpretq_f32_s32(vld1q_s32(qt));  // d0, d1, d0, d1
        int32x4_t s01 = vld1q_s32(qt + 4), s23 = vld1q_s32(qt + 8);
        SPOOL_UNROLL for (int i = 0; i < 4; ++i) {
          const int8x16_t a = vld1q_s8(qa + 16 * i);
          s01 = vmmlaq_s32(s01, o.wp[0][i], a);
          s23 = vmmlaq_s32(s23, o.wp[1][i], a);
        }
        acc[p][0] = vfmaq_f32(acc[p][0], vcvtq_f32_s32(s01), vmulq_f32(o.wd01, d));
        acc[p][1] = vfmaq_f32(acc[p][1], vcvtq_f32_s32(s23), vmulq_f32(o.wd23, d));
      }
    }
    store_pairs<NP>(acc, c, ldc, n_tok, n_valid);
  }
  template <int NP>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* pairs, size_t ps, float* c, size_t ldc, int n_tok,
                   int n_valid) {
    tile_from<NP, false>(n, wg, pairs, ps, c, ldc, n_tok, n_valid);
  }
  template <int NP>
  static void tile_prepared(int64_t n, const uint8_t* prepared, const uint8_t* pairs, size_t ps, float* c,
                            size_t ldc, int n_tok, int n_valid) {
    tile_from<NP, true>(n, prepared, pairs, ps, c, ldc, n_tok, n_valid);
  }

  static size_t group_bytes(int64_t n) { return (size_t)(n / kQK) * kBlockBytes; }
  static size_t pair_bytes(int64_t n) { return (size_t)(n / kQK) * kPairBlock; }
  static void interleave(const uint8_t* act, size_t as, int64_t n_tokens, int64_t n, uint8_t* out) {
    interleave_pairs<Ops::kBias>(act, as, n_tokens, n / kQK, kPairs, out);
  }
};

template <class Ops>
void install(PackedKernels& k) {
  if (v1_tiles()) PairDriver<I8mmLegacy<Ops>, true>::install(k);
  else PairDriver<I8mmLegacy<Ops>, false>::install(k);
}

}  // namespace

void fill_packed_i8mm_neon_kernels(KernelTable& t) {
  install<Q4_0Ops>(t.types[(uint32_t)DType::Q4_0].packed);
  install<Q8_0Ops>(t.types[(uint32_t)DType::Q8_0].packed);
  install<MXFP4Ops>(t.types[(uint32_t)DType::MXFP4].packed);
  install<IQ4_NLOps>(t.types[(uint32_t)DType::IQ4_NL].packed);
}

}  // namespace spool::detail
