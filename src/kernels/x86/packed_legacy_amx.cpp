// AMX int8 tile gemm for the packed Q4_0 and Q8_0 layouts of the AVX-512
// table (x86/packed_legacy_avx512.cpp), used for prefill-sized calls on
// CPUs with AMX; smaller calls (decode) keep the VNNI kernel. A packed block
// (16 rows x 32 elements) is already AMX's B operand: 8 rows of 4-element
// chunks x 16 weight rows x 4 bytes (Q8_0 as is, Q4_0 after splitting the
// nibbles into a per-thread buffer once per group). A is 16 activation rows
// x 32 int8 levels. The packed bytes are unsigned (Q8_0 stores w + 128, Q4_0
// w + 8) because VNNI multiplies unsigned by signed and adds a per-token bias
// of -offset * sum(levels); here each group's blocks are copied once as
// signed weights, so tdpbssd gives sum + bias directly and the epilogue
// skips the bias load and add. The float epilogue is otherwise the VNNI
// kernel's per (token, row): integer sum to float, times (weight scale *
// activation scale), fused into the accumulator block by block; the integer
// sums are equal, so a token's result is bit-identical whichever kernel and
// tile width computed it (batch invariance). The epilogue dominates the
// tile work (16 tokens x 3 vector ops per block against one tile multiply),
// so the activation scales of a tile are gathered once per call, block-major,
// to be broadcast straight from memory.
#include <algorithm>
#include <vector>

#include "kernels/x86/amx.h"

namespace spool::detail {
SPOOL_AMX_NS_BEGIN
namespace {

using namespace packed;
using namespace amx;

// The packed legacy block: 16 fp16 scales, then 8 chunks of 16 rows x 4
// bytes (Q4_0: 4 chunks of nibbles holding chunks m and m + 4).
template <bool kNibbles>
constexpr size_t kBlockBytes = 2 * kRows + (kNibbles ? 4 : 8) * 64;

// One tile of activations: rows q + j * q_stride (int8 levels), and the
// tokens' float scales, block-major: d[b * 16 + j] (rows past n_tokens repeat
// row 0's and are never stored).
struct ActTile {
  const uint8_t* q;
  size_t q_stride;
  const float* d;
  int n_tokens;
};

// Block b's integer sums into c (16 tokens x 16 rows, row-major), on tile set 0 or 1.
inline void block_sums_0(const ActTile& at, const uint8_t* b_tile, int64_t b, int32_t* c) {
  tile_sums_0(at.q + b * kQK, (long)at.q_stride, b_tile, c);
}
inline void block_sums_1(const ActTile& at, const uint8_t* b_tile, int64_t b, int32_t* c) {
  tile_sums_1(at.q + b * kQK, (long)at.q_stride, b_tile, c);
}

// The VNNI kernel's epilogue for block b (see LegacyPacked::tile); c holds
// the sums with the bias already in them.
inline void block_epilogue(const ActTile& at, const uint8_t* blk, int64_t b, const int32_t* c, __m512* acc) {
  const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
  const float* d = at.d + b * kTileTokens;
  #pragma GCC unroll 16
  for (int j = 0; j < kTileTokens; ++j) {
    const __m512i sum = _mm512_load_si512(c + kRows * j);
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wd, _mm512_set1_ps(d[j])), acc[j]);
  }
}

// A 16-row group x up to 16 tokens. wg: the packed group; bw: its blocks as
// B tiles, b_step bytes apart.
template <bool kNibbles>
void group_tile(int64_t nb, const uint8_t* wg, const uint8_t* bw, size_t b_step, const ActTile& at, float* c,
                size_t ldc, __mmask16 mask, const NextGroup& pf) {
  alignas(64) int32_t sums[2][kTileTokens * kRows];
  __m512 acc[kTileTokens];
  #pragma GCC unroll 16
  for (int j = 0; j < kTileTokens; ++j) acc[j] = _mm512_setzero_ps();
  auto blk = [&](int64_t b) { return wg + b * kBlockBytes<kNibbles>; };
  block_sums_0(at, bw, 0, sums[0]);
  for (int64_t b = 0; b < nb; b += 2) {
    pf.fetch(b, 2);
    if (b + 1 < nb) block_sums_1(at, bw + (b + 1) * b_step, b + 1, sums[1]);
    block_epilogue(at, blk(b), b, sums[0], acc);
    if (b + 1 < nb) {
      if (b + 2 < nb) block_sums_0(at, bw + (b + 2) * b_step, b + 2, sums[0]);
      block_epilogue(at, blk(b + 1), b + 1, sums[1], acc);
    }
  }
  for (int j = 0; j < at.n_tokens; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
}

// A group -> signed B tiles. Q4_0: block b's chunk m (m < 4) from the low
// nibbles of packed chunk m, chunk m + 4 from its high nibbles, as the VNNI
// kernel does, minus 8; Q8_0: the stored w + 128 back to w.
template <bool kNibbles>
void unpack_signed(int64_t nb, const uint8_t* wg, uint8_t* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8), sign = _mm512_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qs = wg + b * kBlockBytes<kNibbles> + 2 * kRows;
    uint8_t* o = out + b * kBTileBytes;
    if constexpr (kNibbles) {
      #pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m512i raw = _mm512_loadu_si512(qs + 64 * m);
        _mm512_storeu_si512(o + 64 * m, _mm512_sub_epi8(_mm512_and_si512(raw, low4), eight));
        _mm512_storeu_si512(o + 64 * (m + 4),
                            _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), eight));
      }
    } else {
      #pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) _mm512_storeu_si512(o + 64 * m, _mm512_xor_si512(_mm512_loadu_si512(qs + 64 * m), sign));
    }
  }
}

// Tokens act .. act + n_tokens: their scales into d (nb x 16, block-major).
ActTile act_tile(const uint8_t* act, size_t as, int64_t n_cols, int n_tokens, const uint8_t* q, size_t q_stride,
                 float* d) {
  const int64_t nb = n_cols / kQK;
  for (int j = 0; j < kTileTokens; ++j) {
    const float* row_d = reinterpret_cast<const float*>(act + (j < n_tokens ? j : 0) * as + n_cols);
    for (int64_t b = 0; b < nb; ++b) d[b * kTileTokens + j] = row_d[b];
  }
  return ActTile{q, q_stride, d, n_tokens};
}

template <bool kNibbles>
void gemm_amx(int64_t n_cols, const void* w, int64_t n_rows, const void* act_v, size_t as, int64_t n_tokens,
              float* c, size_t ldc) {
  if (n_tokens < kMinTokens) {  // the AVX-512 table's VNNI kernel (packed_avx512.h)
    constexpr packing::PackedGemmFn vnni = kNibbles ? avx512::packed_gemm_q4_0 : avx512::packed_gemm_q8_0;
    vnni(n_cols, w, n_rows, act_v, as, n_tokens, c, ldc);
    return;
  }
  const int64_t nb = n_cols / kQK;
  const auto* act = static_cast<const uint8_t*>(act_v);
  const int64_t n_full = n_tokens / kTileTokens * kTileTokens;
  const int rem = (int)(n_tokens - n_full);
  // The last partial tile's levels, zero-padded to 16 rows: A always loads 16.
  thread_local std::vector<uint8_t> pad, unpacked;
  thread_local std::vector<float> scales;
  if (rem > 0) {
    pad.assign(kTileTokens * n_cols, 0);
    for (int j = 0; j < rem; ++j) std::memcpy(pad.data() + j * n_cols, act + (n_full + j) * as, n_cols);
  }
  unpacked.resize(nb * kBTileBytes);
  const int64_t n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
  scales.resize(n_tiles * nb * kTileTokens);
  std::vector<ActTile> tiles;
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t t = i * kTileTokens;
    float* d = scales.data() + i * nb * kTileTokens;
    tiles.push_back(t < n_full ? act_tile(act + t * as, as, n_cols, kTileTokens, act + t * as, as, d)
                               : act_tile(act + t * as, as, n_cols, rem, pad.data(), n_cols, d));
  }
  load_tile_config();
  fence_writes();
  const auto* wg = static_cast<const uint8_t*>(w);
  const size_t group_bytes = nb * kBlockBytes<kNibbles>;
  for (int64_t g = 0; g < n_groups(n_rows); ++g, wg += group_bytes) {
    const __mmask16 mask = row_mask(n_rows - g * kRows);
    unpack_signed<kNibbles>(nb, wg, unpacked.data());
    fence_writes();
    const NextGroup pf = g + 1 < n_groups(n_rows) ? NextGroup(wg + group_bytes, group_bytes, nb) : NextGroup();
    for (int64_t i = 0; i < n_tiles; ++i) {
      group_tile<kNibbles>(nb, wg, unpacked.data(), kBTileBytes, tiles[i], c + i * kTileTokens * ldc + g * kRows,
                           ldc, mask, i == 0 ? pf : NextGroup{});
    }
  }
  SPOOL_TILE_RELEASE();
}

}  // namespace

void fill_packed_amx_kernels(KernelTable& t) {
  PackedKernels& q8 = t.types[(uint32_t)DType::Q8_0].packed;
  PackedKernels& q4 = t.types[(uint32_t)DType::Q4_0].packed;
  if (q8.rows != kRows || q4.rows != kRows) return;  // not the AVX-512 layouts: keep them
  q8.gemm = gemm_amx<false>;
  q4.gemm = gemm_amx<true>;
}

SPOOL_AMX_NS_END
}  // namespace spool::detail
