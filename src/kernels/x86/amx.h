// Shared pieces of the AMX int8 tile kernels (x86/packed_*_amx.cpp):
// the tile configuration, the activation tile, and the tile operations as
// macros. Built with SPOOL_AMX_EMULATE, the macros run a plain C++ model of
// the tile registers instead of the instructions, and the kernels land in
// namespace spool::detail::amx_emulated: the test suite links that copy
// (tests/packed_kernels_test.cpp) so the kernels' tiling, unpacking and
// epilogues are checked bit for bit on any AVX-512 machine, not only on the
// few with AMX. Include only from files compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/x86/packed_avx512.h"

// Everything here and in the kernels is in namespace amx_emulated in the
// emulated build, so its inline functions (whose bodies differ: tile
// instructions or the model) never merge with the real build's at link time.
#ifdef SPOOL_AMX_EMULATE
#define SPOOL_AMX_NS_BEGIN namespace amx_emulated {
#define SPOOL_AMX_NS_END }
#define SPOOL_AMX_EMU ::spool::detail::amx_emulated::amx
#else
#define SPOOL_AMX_NS_BEGIN
#define SPOOL_AMX_NS_END
#endif

namespace spool::detail {
SPOOL_AMX_NS_BEGIN
namespace amx {

constexpr int kTileTokens = 16;  // activation rows per A tile (AMX maximum)
// Calls with fewer tokens take the VNNI kernel: one token tile would leave
// most of A empty while paying the tile set-up and the per-block C store.
constexpr int64_t kMinTokens = 16;
constexpr size_t kBTileBytes = 8 * 64;  // B: 8 rows of 64 bytes = 32 elements x 16 weight rows

// Palette 1: tmm0/1 C (16 tokens x 16 int32), tmm2/3 A (16 tokens x k
// bytes), tmm4/5 B (k / 4 rows x 64 bytes, signed), k = 32 elements per
// tile multiply (16 for Q6_K's sub-blocks). Two of each so the next block's
// tile work overlaps this block's epilogue.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr TileConfig make_tile_config(int k) {
  TileConfig cfg;
  for (int i = 0; i < 2; ++i) {
    cfg.colsb[0 + i] = 64, cfg.rows[0 + i] = kTileTokens;
    cfg.colsb[2 + i] = (uint16_t)k, cfg.rows[2 + i] = kTileTokens;
    cfg.colsb[4 + i] = 64, cfg.rows[4 + i] = (uint8_t)(k / 4);
  }
  return cfg;
}
// Constants in memory: GCC 12's _tile_loadconfig tells the compiler it
// reads only the first 8 bytes, so a config built on the stack just before
// it may be missing its shapes (then the tile instructions fault).
inline constexpr TileConfig kTileConfig = make_tile_config(32);
inline constexpr TileConfig kTileConfigK16 = make_tile_config(16);

// The tile-load intrinsics are asm without a memory clobber: the compiler
// must finish buffer writes (padding, unpacked weights) before them.
inline void fence_writes() { __asm__ volatile("" ::: "memory"); }

#ifdef SPOOL_AMX_EMULATE
// Eight tile registers of up to 16 rows x 64 bytes, shaped by the loaded
// configuration; the operations follow the instruction set reference.
struct EmulatedTiles {
  const TileConfig* cfg = nullptr;
  alignas(64) uint8_t t[8][16][64];
};
inline thread_local EmulatedTiles g_emulated_tiles;

inline void emu_loadconfig(const TileConfig* c) { g_emulated_tiles.cfg = c; }
inline void emu_loadd(int t, const void* p, long stride) {
  const TileConfig& c = *g_emulated_tiles.cfg;
  for (int r = 0; r < c.rows[t]; ++r) std::memcpy(g_emulated_tiles.t[t][r], (const uint8_t*)p + r * stride, c.colsb[t]);
}
inline void emu_stored(int t, void* p, long stride) {
  const TileConfig& c = *g_emulated_tiles.cfg;
  for (int r = 0; r < c.rows[t]; ++r) std::memcpy((uint8_t*)p + r * stride, g_emulated_tiles.t[t][r], c.colsb[t]);
}
inline void emu_zero(int t) { std::memset(g_emulated_tiles.t[t], 0, sizeof(g_emulated_tiles.t[t])); }
// C[m][n] += sum over k of A[m][4k..4k+3] . B[k][4n..4n+3], A signed; B
// signed (kSignedB) or unsigned.
template <bool kSignedB>
inline void emu_dp(int c, int a, int b) {
  const TileConfig& cfg = *g_emulated_tiles.cfg;
  auto& T = g_emulated_tiles.t;
  for (int m = 0; m < cfg.rows[c]; ++m) {
    for (int n = 0; n < cfg.colsb[c] / 4; ++n) {
      int32_t acc;
      std::memcpy(&acc, &T[c][m][4 * n], 4);
      for (int k = 0; k < cfg.colsb[a] / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int32_t av = (int8_t)T[a][m][4 * k + i];
          const int32_t bv = kSignedB ? (int32_t)(int8_t)T[b][k][4 * n + i] : (int32_t)T[b][k][4 * n + i];
          acc = (int32_t)((uint32_t)acc + (uint32_t)(av * bv));
        }
      }
      std::memcpy(&T[c][m][4 * n], &acc, 4);
    }
  }
}
#define SPOOL_TILE_LOADCONFIG(c) SPOOL_AMX_EMU::emu_loadconfig(c)
#define SPOOL_TILE_LOADD(t, p, s) SPOOL_AMX_EMU::emu_loadd(t, p, s)
#define SPOOL_TILE_STORED(t, p, s) SPOOL_AMX_EMU::emu_stored(t, p, s)
#define SPOOL_TILE_ZERO(t) SPOOL_AMX_EMU::emu_zero(t)
#define SPOOL_TILE_DPBSSD(c, a, b) SPOOL_AMX_EMU::emu_dp<true>(c, a, b)
#define SPOOL_TILE_DPBSUD(c, a, b) SPOOL_AMX_EMU::emu_dp<false>(c, a, b)
#define SPOOL_TILE_RELEASE() ((void)0)
#else
// The intrinsics paste the register number into the instruction text, so
// the tile arguments must be literals.
#define SPOOL_TILE_LOADCONFIG(c) _tile_loadconfig(c)
#define SPOOL_TILE_LOADD(t, p, s) _tile_loadd(t, p, s)
#define SPOOL_TILE_STORED(t, p, s) _tile_stored(t, p, s)
#define SPOOL_TILE_ZERO(t) _tile_zero(t)
#define SPOOL_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define SPOOL_TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define SPOOL_TILE_RELEASE() _tile_release()
#endif

inline void load_tile_config(const TileConfig& c = kTileConfig) { SPOOL_TILE_LOADCONFIG(&c); }

// One tile multiply: the 16 activation rows at a (a_stride apart) times the
// B tile at b_tile into c (16 tokens x 16 rows of int32, row-major), on tile
// set 0 (tmm0, 2, 4) or 1 (tmm1, 3, 5): two sets, so a kernel can issue the
// next block's tiles before the epilogue of this one.
#define SPOOL_AMX_TILE_SUMS(kC, kA, kB)                                                            \
  inline void tile_sums_##kC(const uint8_t* a, long a_stride, const uint8_t* b_tile, int32_t* c) { \
    SPOOL_TILE_LOADD(kA, a, a_stride);                                                             \
    SPOOL_TILE_LOADD(kB, b_tile, 64);                                                              \
    SPOOL_TILE_ZERO(kC);                                                                           \
    SPOOL_TILE_DPBSSD(kC, kA, kB);                                                                 \
    SPOOL_TILE_STORED(kC, c, 64);                                                                  \
  }
SPOOL_AMX_TILE_SUMS(0, 2, 4)
SPOOL_AMX_TILE_SUMS(1, 3, 5)
#undef SPOOL_AMX_TILE_SUMS

// The next group's packed bytes, fetched into L2 while this group's tiles
// run (its unpack would otherwise wait on memory at every group start: a
// Q8_0 group of 2048 columns is 34 KB): `lines` cache lines from `next`,
// `per_block` of them with each block of the first token tile.
struct NextGroup {
  const uint8_t* next = nullptr;
  int64_t lines = 0, per_block = 0;
  NextGroup() = default;
  NextGroup(const uint8_t* next_group, size_t bytes, int64_t n_blocks)
      : next(next_group), lines((int64_t)((bytes + 63) / 64)), per_block((lines + n_blocks - 1) / n_blocks) {}
  // Block b's share (the lines of blocks b .. b + n - 1).
  void fetch(int64_t b, int64_t n = 1) const {
    for (int64_t l = b * per_block; l < std::min(lines, (b + n) * per_block); ++l)
      _mm_prefetch((const char*)next + 64 * l, _MM_HINT_T1);
  }
};

}  // namespace amx
SPOOL_AMX_NS_END
}  // namespace spool::detail
