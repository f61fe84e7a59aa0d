// Shared pieces of the NEON packed kernels (neon/packed_*.cpp), the
// x86 design (x86/packed_avx512.h) on 128-bit registers: a group is as
// many interleaved weight rows as one register has 32-bit lanes (4), so a
// register holds one 4-byte chunk of each row, and an sdot by element
// (vdotq_laneq_s32) against lane k of a 16-byte activation register adds
// the 4 rows' partial dots of that chunk: activations are loaded once per
// 16 bytes and never broadcast. Packing and the row-tile driver are
// packed.h's; the token-tile driver (gemm_tiled) is NEON's own. Include
// only from files compiled with -march=armv8.2-a+dotprod+fp16.
//
// Why 4 rows and not 8 (two registers per chunk): the sdot count is the
// same either way, and 4 rows leave the registers for twice the tokens per
// tile (8 accumulators instead of 2 x 4), so each weight block is loaded
// and unpacked once per 8 tokens without spilling. With 8 rows x 4 tokens
// GCC either spilled accumulators or (kept from it) reloaded activations:
// the Q4_0 block loop took 169 instructions for 8 rows x 4 tokens x 32
// elements, against 135 for 4 rows x 8 tokens, the same work.
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/quant_blocks.h"
#include "kernels/neon/common.h"
#include "kernels/packed.h"

namespace spool::detail::packed_neon {

constexpr int kRows = 4;  // rows per interleaved group: the int32 lanes of a register
// Tiles are told the count of a group's real rows (store_rows).
using Groups = packing::CountedGroups<kRows>;

inline int64_t n_groups(int64_t n_rows) { return packing::n_groups<Groups>(n_rows); }

// sum + the dots of chunks w[0..3] (4 rows each) with lanes 0..3 of a, in
// that order: 16 consecutive activation bytes against 4 chunks.
inline int32x4_t dot4(int32x4_t sum, const int8x16_t* w, int8x16_t a) {
  sum = vdotq_laneq_s32(sum, w[0], a, 0);
  sum = vdotq_laneq_s32(sum, w[1], a, 1);
  sum = vdotq_laneq_s32(sum, w[2], a, 2);
  return vdotq_laneq_s32(sum, w[3], a, 3);
}

// p, made to depend on v for the optimizer only (no instruction): loads
// through p are not scheduled before v is computed. GCC's scheduler
// otherwise starts the loads of several tokens early, runs out of
// registers and spills accumulators (Q4_0: 8 stack accesses per block).
template <class V>
inline const uint8_t* after(const uint8_t* p, V v) {
  __asm__("" : "+r"(p) : "w"(v));
  return p;
}

// 4 fp16 values (one per row) as floats.
inline float32x4_t load_f16x4(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p)));
}

// Stores the first n_valid of the 4 rows.
inline void store_rows(float* c, float32x4_t v, int n_valid) {
  if (n_valid >= kRows) {
    vst1q_f32(c, v);
    return;
  }
  float tmp[kRows];
  vst1q_f32(tmp, v);
  for (int i = 0; i < n_valid; ++i) c[i] = tmp[i];
}

// Kernel::tile<C>(n_cols, group, act, act_stride, c, ldc, n_valid_rows)
// computes a 4-row x C-token tile, C <= Kernel::kTokens, reading the
// activation rows in place; gemm_groups runs it over a matrix, Packer makes
// the table entry (packed.h).
template <class Kernel>
constexpr packing::PackedGemmFn gemm_groups = packing::gemm_groups<Kernel, Groups>;
template <class Kernel>
using Packer = packing::Packer<Kernel, Groups>;

// Token tiles, the activations of the tiled kernels (TiledPacked in
// neon/packed_legacy.cpp, Q6KTiled in neon/packed_kquant.cpp):
// a gemm call copies its activation rows once into tiles of up to
// Kernel::kTileTokens tokens, in which the tokens' chunks are interleaved:
// a token's row becomes chunks of Kernel::kChunkBytes (Kernel::copy_token
// writes chunk k of one token at out + k * stride), and chunk k of token j
// of a tile of nt tokens lies at (k * nt + j) * kChunkBytes from the tile's
// start. A tile kernel then reads one contiguous stream at constant offsets
// (one pointer, no per-token address arithmetic), and
// Kernel::tile<C>(n_cols, group, tile, c, ldc, n_valid) computes a 4-row x
// C-token tile, C <= kTileTokens, every token through the same instructions
// whatever C is (batch invariance, as gemm_groups).
//
// kPrepared (kernels with prepare_group / tile_prepared, for calls with more
// tokens than one tile): each group is first unpacked once into a per-thread
// buffer (Kernel::prepare_group, Kernel::prepared_bytes) and the tiles, of up
// to Kernel::kPreparedTokens tokens, read it instead of the packed group.
template <class Kernel, bool kPrepared = false>
void gemm_tiled(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                float* c, size_t ldc) {
  using TileFn = void (*)(int64_t, const uint8_t*, const uint8_t*, float*, size_t, int);
  constexpr int kT = [] {
    if constexpr (kPrepared) return Kernel::kPreparedTokens;
    else return Kernel::kTileTokens;
  }();
  static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
    if constexpr (kPrepared) return std::array<TileFn, sizeof...(I)>{&Kernel::template tile_prepared<I + 1>...};
    else return std::array<TileFn, sizeof...(I)>{&Kernel::template tile<I + 1>...};
  }(std::make_integer_sequence<int, kT>());
  const size_t token_bytes = Kernel::tile_token_bytes(n_cols);  // one token's chunks
  thread_local std::vector<uint8_t> tiles, prepared;
  tiles.resize((size_t)n_tokens * token_bytes);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kT) {
    const int64_t nt = std::min<int64_t>(kT, n_tokens - t0);
    for (int64_t j = 0; j < nt; ++j)
      Kernel::copy_token(a + (t0 + j) * as, n_cols, tiles.data() + t0 * token_bytes + j * Kernel::kChunkBytes,
                         nt * Kernel::kChunkBytes);
  }
  if constexpr (kPrepared) prepared.resize(Kernel::prepared_bytes(n_cols));
  const size_t group_bytes = Kernel::group_bytes(n_cols);
  const auto* wg = static_cast<const uint8_t*>(w);
  for (int64_t g = 0; g < n_groups(n_rows); ++g, wg += group_bytes) {
    const int n_valid = (int)std::min<int64_t>(kRows, n_rows - g * kRows);
    const uint8_t* src = wg;
    if constexpr (kPrepared) Kernel::prepare_group(n_cols, wg, prepared.data()), src = prepared.data();
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kT) {
      const int nt = (int)std::min<int64_t>(kT, n_tokens - t0);
      kFns[nt - 1](n_cols, src, tiles.data() + t0 * token_bytes, c + t0 * ldc + g * kRows, ldc, n_valid);
    }
  }
}

// SPOOL_NEON_TILES=v1: the previous scheduling (tiles of up to 8 tokens
// reading the activation rows in place) instead of the token tiles, to
// compare the two; read when the kernel table is built.
inline bool v1_tiles() {
  const char* v = std::getenv("SPOOL_NEON_TILES");
  return v && std::strcmp(v, "v1") == 0;
}

// The activation format of Q4_K and Q5_K (defined in
// neon/packed_kquant.cpp; one function, so matrices of both types
// reading the same input share one conversion). Per super-block
// (kK4ActBlock bytes): 256 int8 levels; the 8 sums of 32 as sum & 63
// (bytes 0-7) and sum >> 6 (bytes 8-15), so the minimums are sdots of
// int8: sum = 64 * (sum >> 6) + (sum & 63); the float scale; padding.
constexpr size_t kK4ActBlock = kQKK + 32;
size_t k4_act_bytes(int64_t n);
void k4_quantize_act(const float* x, void* out, int64_t n);

// Byte offsets in the Q4_K group super-block (neon/packed_kquant.cpp),
// also the first part of Q5_K's: d[4], dmin[4] fp16; scales[8 sub-blocks][4
// rows]; mins as 2 registers; qs[4 p][8 m] registers.
struct K4Group {
  static constexpr size_t kScales = 4 * kRows, kMins = kScales + 8 * kRows, kQs = kMins + 32;
  static constexpr size_t kBytes = kQs + 32 * 16;
};

// Q4_K / Q5_K minimums of one super-block: sum over sub-blocks s of
// m[s][row] * asum[s], from the 2 registers of 6-bit mins (lane r: row r's
// sub-blocks 4k .. 4k + 3) and the split activation sums above.
inline int32x4_t k4_mins(int8x16x2_t mins_w, int8x16_t sums) {
  const int32x4_t hi =
      vdotq_laneq_s32(vdotq_laneq_s32(vdupq_n_s32(0), mins_w.val[0], sums, 2), mins_w.val[1], sums, 3);
  return vdotq_laneq_s32(vdotq_laneq_s32(vshlq_n_s32(hi, 6), mins_w.val[0], sums, 0), mins_w.val[1], sums, 1);
}

// 8 bytes (the 4 rows of two sub-blocks) widened to int32: bytes 0-3 in
// out[0], 4-7 in out[1].
inline void widen_u8x8(const uint8_t* p, int32x4_t (&out)[2]) {
  const uint16x8_t v = vmovl_u8(vld1_u8(p));
  out[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(v)));
  out[1] = vreinterpretq_s32_u32(vmovl_high_u16(v));
}

}  // namespace spool::detail::packed_neon

namespace spool::detail {
void fill_packed_legacy_neon_kernels(KernelTable& t);  // neon/packed_legacy.cpp
void fill_packed_kquant_neon_kernels(KernelTable& t);  // neon/packed_kquant.cpp
void fill_packed_q5k_neon_kernels(KernelTable& t);     // neon/packed_q5k.cpp
}  // namespace spool::detail
