// AMX int8 tile gemm for the packed Q4_K layout of the AVX-512 table
// (Q4KLayout, kernels_packed_avx512.h), for prefill-sized calls on CPUs with
// AMX; smaller calls keep the VNNI kernel. A Q4_K super-block has 8
// sub-blocks of 32 elements, each with its own 6-bit scale and minimum per
// row, so the tiles run one sub-block at a time: A is 16 tokens x 32 int8
// levels, B the sub-block's 16 rows x 32 nibbles (unpacked once per group to
// one byte each, 0..15, in B's 4-bytes-per-row order, which the packed chunks
// already have), C the 16 x 16 integer sums. The epilogue is the VNNI
// kernel's (Q4KPacked::tile) per (token, super-block): the sub-block sums
// times their scales summed as int32, the minimums' term from the per-32
// activation sums by vpdpwssd, then two fused float updates. The integer
// values are equal whatever the order, so results are bit-identical to the
// VNNI kernel at any token count (batch invariance).
#include <algorithm>
#include <vector>

#include "core/kernels_packed_amx.h"

namespace spool::detail {
SPOOL_AMX_NS_BEGIN
namespace {

using namespace packed;
using namespace amx;
using L = Q4KLayout;

constexpr int kSubs = 8;  // sub-blocks per super-block
// A super-block unpacked for the tiles: 8 B tiles, then the 8 sub-block
// scales widened to int32 (one zmm each) for the epilogue's vpmulld.
constexpr size_t kUnpackedScales = kSubs * kBTileBytes;
constexpr size_t kUnpackedSuper = kUnpackedScales + kSubs * 64;

// One tile of activations: rows q + j * q_stride (int8 levels); per
// super-block b and token j, the float scale d[b * 16 + j] and the 8
// sub-block sums sums[(b * 16 + j) * 8 ..]. Rows past n_tokens repeat row
// 0's scales and sums (their levels are zero) and are never stored.
struct ActTile {
  const uint8_t* q;
  size_t q_stride;
  const float* d;
  const int16_t* sums;
  int n_tokens;
};

// Sub-block s of super-block b: integer sums into c (16 tokens x 16 rows),
// on tile set 0 (tmm0, 2, 4) or 1 (tmm1, 3, 5).
#define SPOOL_AMX_SUB_SUMS(kC, kA, kB)                                                             \
  inline void sub_sums_##kC(const ActTile& at, const uint8_t* b_tile, int64_t col, int32_t* c) { \
    SPOOL_TILE_LOADD(kA, at.q + col, (long)at.q_stride);                                          \
    SPOOL_TILE_LOADD(kB, b_tile, 64);                                                             \
    SPOOL_TILE_ZERO(kC);                                                                          \
    SPOOL_TILE_DPBSSD(kC, kA, kB);                                                                \
    SPOOL_TILE_STORED(kC, c, 64);                                                                 \
  }
SPOOL_AMX_SUB_SUMS(0, 2, 4)
SPOOL_AMX_SUB_SUMS(1, 3, 5)
#undef SPOOL_AMX_SUB_SUMS

// Super-block b's 8 sub-block sum tiles into c (8 x 256 int32).
inline void super_sums(const ActTile& at, const uint8_t* ub, int64_t b, int32_t* c) {
  for (int s = 0; s < kSubs; s += 2) {
    sub_sums_0(at, ub + s * kBTileBytes, b * kQKK + 32 * s, c + s * 256);
    sub_sums_1(at, ub + (s + 1) * kBTileBytes, b * kQKK + 32 * (s + 1), c + (s + 1) * 256);
  }
}

// The VNNI kernel's epilogue for super-block b of 16 tokens.
inline void super_epilogue(const ActTile& at, const uint8_t* blk, const uint8_t* ub, int64_t b, const int32_t* c,
                           __m512* acc) {
  const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
  const __m512 wdmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 2 * kRows)));
  const auto* sc = reinterpret_cast<const __m512i*>(ub + kUnpackedScales);
  __m512i m16[4];
  #pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) m16[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(blk + L::kMins + 32 * p)));
  const float* d = at.d + b * kTileTokens;
  const int16_t* sums = at.sums + b * kTileTokens * kSubs;
  #pragma GCC unroll 16
  for (int j = 0; j < kTileTokens; ++j) {
    __m512i tot = _mm512_mullo_epi32(_mm512_load_si512(c + kRows * j), sc[0]);
    #pragma GCC unroll 8
    for (int s = 1; s < kSubs; ++s)
      tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(_mm512_load_si512(c + 256 * s + kRows * j), sc[s]));
    __m512i mins = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) mins = _mm512_dpwssd_epi32(mins, m16[p], bcast4(sums + kSubs * j + 2 * p));
    const __m512 ad = _mm512_set1_ps(d[j]);
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(wd, ad), acc[j]);
    acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(wdmin, ad), acc[j]);
  }
}

// A 16-row group x up to 16 tokens; ub: the group unpacked.
void group_tile(int64_t nb, const uint8_t* wg, const uint8_t* ub, const ActTile& at, float* c, size_t ldc,
                __mmask16 mask, const NextGroup& pf) {
  alignas(64) int32_t sums[2][kSubs * 256];
  __m512 acc[kTileTokens];
  #pragma GCC unroll 16
  for (int j = 0; j < kTileTokens; ++j) acc[j] = _mm512_setzero_ps();
  super_sums(at, ub, 0, sums[0]);
  for (int64_t b = 0; b < nb; ++b) {
    pf.fetch(b);
    if (b + 1 < nb) super_sums(at, ub + (b + 1) * kUnpackedSuper, b + 1, sums[(b + 1) & 1]);
    super_epilogue(at, wg + b * L::kSuperBytes, ub + b * kUnpackedSuper, b, sums[b & 1], acc);
  }
  for (int j = 0; j < at.n_tokens; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
}

// A group -> B tiles (sub-block 2p from the low nibbles of qs[p], 2p + 1
// from the high ones) and int32 scales.
void unpack_group(int64_t nb, const uint8_t* wg, uint8_t* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wg + b * L::kSuperBytes;
    uint8_t* o = out + b * kUnpackedSuper;
    for (int p = 0; p < 4; ++p) {
      #pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        const __m512i raw = _mm512_loadu_si512(blk + L::kQs + (8 * p + m) * 64);
        _mm512_store_si512(o + 2 * p * kBTileBytes + 64 * m, _mm512_and_si512(raw, low4));
        _mm512_store_si512(o + (2 * p + 1) * kBTileBytes + 64 * m, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
      }
    }
    #pragma GCC unroll 8
    for (int s = 0; s < kSubs; ++s)
      _mm512_store_si512(o + kUnpackedScales + 64 * s,
                         _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(blk + L::kScales + 16 * s))));
  }
}

PackedKernels g_vnni;  // the AVX-512 table's packed Q4_K

// 64-byte aligned scratch (the unpacked tiles are stored with aligned moves).
template <class T>
T* aligned_scratch(std::vector<uint8_t>& buf, size_t n) {
  buf.resize(n * sizeof(T) + 64);
  const auto p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
}

void gemm_amx_q4k(int64_t n_cols, const void* w, int64_t n_rows, const void* act_v, size_t as, int64_t n_tokens,
                  float* c, size_t ldc) {
  if (n_tokens < kMinTokens) {
    g_vnni.gemm(n_cols, w, n_rows, act_v, as, n_tokens, c, ldc);
    return;
  }
  const int64_t nb = n_cols / kQKK;
  const auto* act = static_cast<const uint8_t*>(act_v);
  const int64_t n_full = n_tokens / kTileTokens * kTileTokens;
  const int rem = (int)(n_tokens - n_full);
  const int64_t n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
  thread_local std::vector<uint8_t> pad_buf, unpacked_buf, d_buf, sums_buf;
  // The last partial tile's levels, zero-padded to 16 rows: A always loads 16.
  uint8_t* pad = nullptr;
  if (rem > 0) {
    pad = aligned_scratch<uint8_t>(pad_buf, kTileTokens * n_cols);
    std::memset(pad, 0, kTileTokens * n_cols);
    for (int j = 0; j < rem; ++j) std::memcpy(pad + j * n_cols, act + (n_full + j) * as, n_cols);
  }
  uint8_t* unpacked = aligned_scratch<uint8_t>(unpacked_buf, nb * kUnpackedSuper);
  float* d = aligned_scratch<float>(d_buf, n_tiles * nb * kTileTokens);
  int16_t* sums = aligned_scratch<int16_t>(sums_buf, n_tiles * nb * kTileTokens * kSubs);
  std::vector<ActTile> tiles;
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t t = i * kTileTokens;
    const int nt = (int)std::min<int64_t>(kTileTokens, n_tokens - t);
    float* td = d + i * nb * kTileTokens;
    int16_t* ts = sums + i * nb * kTileTokens * kSubs;
    for (int j = 0; j < kTileTokens; ++j) {
      const uint8_t* row = act + (t + (j < nt ? j : 0)) * as;
      const auto* row_d = reinterpret_cast<const float*>(row + n_cols);
      const auto* row_s = reinterpret_cast<const int16_t*>(row_d + nb);
      for (int64_t b = 0; b < nb; ++b) {
        td[b * kTileTokens + j] = row_d[b];
        std::memcpy(ts + (b * kTileTokens + j) * kSubs, row_s + kSubs * b, kSubs * sizeof(int16_t));
      }
    }
    tiles.push_back(nt == kTileTokens ? ActTile{act + t * as, as, td, ts, nt}
                                      : ActTile{pad, (size_t)n_cols, td, ts, nt});
  }
  load_tile_config();
  fence_writes();
  const auto* wg = static_cast<const uint8_t*>(w);
  const size_t group_bytes = nb * L::kSuperBytes;
  for (int64_t g = 0; g < n_groups(n_rows); ++g, wg += group_bytes) {
    const __mmask16 mask = row_mask(n_rows - g * kRows);
    unpack_group(nb, wg, unpacked);
    fence_writes();
    const NextGroup pf = g + 1 < n_groups(n_rows) ? NextGroup(wg + group_bytes, group_bytes, nb) : NextGroup();
    for (int64_t i = 0; i < n_tiles; ++i) {
      group_tile(nb, wg, unpacked, tiles[i], c + i * kTileTokens * ldc + g * kRows, ldc, mask,
                 i == 0 ? pf : NextGroup());
    }
  }
  SPOOL_TILE_RELEASE();
}

}  // namespace

void fill_packed_kquant_amx_kernels(KernelTable& t) {
  PackedKernels& q4k = t.types[(uint32_t)DType::Q4_K].packed;
  // Not the AVX-512 layout (16 rows, Q4KLayout super-blocks): keep it.
  if (q4k.rows != kRows || q4k.packed_bytes(kRows, kQKK) != L::kSuperBytes) return;
  g_vnni = q4k;
  q4k.gemm = gemm_amx_q4k;
}

SPOOL_AMX_NS_END
}  // namespace spool::detail
