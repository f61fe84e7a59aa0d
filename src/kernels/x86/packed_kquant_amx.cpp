// AMX int8 tile gemm for the packed Q4_K and Q6_K layouts of the AVX-512
// table (Q4KLayout, Q6KLayout in x86/packed_avx512.h), for prefill-sized
// calls on CPUs with AMX; smaller calls keep the VNNI kernels. A K-quant
// super-block (256 elements) has sub-blocks with their own scale per row (Q4_K:
// 8 of 32 elements, 6-bit scales and minimums; Q6_K: 16 of 16, int8 scales),
// so the tiles run one sub-block at a time: A is 16 tokens x k int8 levels
// (k = the sub-block's length), B the sub-block's 16 rows x k levels, C the
// 16 x 16 integer sums. Each group's levels are unpacked once into a
// per-thread buffer as bytes in B's order (4 consecutive elements of a row
// side by side, the order the packed chunks already have): Q4_K's nibbles as
// 0..15, Q6_K's 6-bit levels minus 32, so its C already holds the VNNI
// kernel's per-16 bias (-32 * the activation sum); the sub-block scales are
// widened to int32 there too. The epilogue is the VNNI kernel's per (token,
// super-block) (Q4KPacked::tile, Q6KPacked::tile): the sub-block sums times
// their scales summed as int32, Q4_K's minimums' term from the per-32
// activation sums by vpdpwssd, then the same fused float updates. The
// integer values are equal whatever the order, so results are bit-identical
// to the VNNI kernels at any token count (batch invariance).
#include <algorithm>
#include <vector>

#include "kernels/x86/amx.h"

namespace spool::detail {
SPOOL_AMX_NS_BEGIN
namespace {

using namespace packed;
using namespace amx;

// One tile of activations: rows q + j * q_stride (int8 levels); per
// super-block b and token j, the float scale d[b * 16 + j] and (Q4_K) the 8
// sub-block sums sums[(b * 16 + j) * 8 ..]. Rows past n_tokens repeat row
// 0's scales and sums (their levels are zero) and are never stored.
struct ActTile {
  const uint8_t* q;
  size_t q_stride;
  const float* d;
  const int16_t* sums;
  int n_tokens;
};

// The per-type parts. kSubs sub-blocks of kSubK elements per super-block;
// unpacked, a super-block is kSubs B tiles of kSubK / 4 rows x 64 bytes,
// then the kSubs scales as int32 zmm.
template <int kSubsT, int kSubKT>
struct KQuantTiles {
  static constexpr int kSubs = kSubsT, kSubK = kSubKT;
  static constexpr size_t kBTile = kSubK / 4 * 64;
  static constexpr size_t kUnpackedScales = kSubs * kBTile;
  static constexpr size_t kUnpackedSuper = kUnpackedScales + kSubs * 64;
  static constexpr int kSumInts = kSubs * 256;  // C tiles of one super-block

  // Super-block b's sub-block sum tiles into c (kSubs x 256 int32).
  static void super_sums(const ActTile& at, const uint8_t* ub, int64_t b, int32_t* c) {
    const uint8_t* a = at.q + b * kQKK;
    for (int s = 0; s < kSubs; s += 2) {
      tile_sums_0(a + kSubK * s, (long)at.q_stride, ub + s * kBTile, c + s * 256);
      tile_sums_1(a + kSubK * (s + 1), (long)at.q_stride, ub + (s + 1) * kBTile, c + (s + 1) * 256);
    }
  }

  // The sub-block scales (kSubs x 16 rows of bytes at scales) widened to
  // int32 zmm after the B tiles, for scaled_total's vpmulld.
  template <bool kSigned>
  static void widen_scales(const uint8_t* scales, uint8_t* o) {
    #pragma GCC unroll 16
    for (int s = 0; s < kSubs; ++s) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(scales + 16 * s));
      _mm512_store_si512(o + kUnpackedScales + 64 * s, kSigned ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
    }
  }

  // Token j's int32 total over the sub-blocks: sum of C_s[j] * scale_s.
  static __m512i scaled_total(const int32_t* c, const __m512i* sc, int j) {
    __m512i tot = _mm512_mullo_epi32(_mm512_load_si512(c + kRows * j), sc[0]);
    #pragma GCC unroll 16
    for (int s = 1; s < kSubs; ++s)
      tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(_mm512_load_si512(c + 256 * s + kRows * j), sc[s]));
    return tot;
  }
};

struct Q4KTiles : KQuantTiles<8, 32>, Q4KLayout {
  static constexpr bool kSums = true;
  static constexpr const TileConfig& config() { return kTileConfig; }

  static void unpack_super(const uint8_t* blk, uint8_t* o) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      #pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        const __m512i raw = _mm512_loadu_si512(blk + kQs + (8 * p + m) * 64);
        _mm512_store_si512(o + 2 * p * kBTile + 64 * m, _mm512_and_si512(raw, low4));
        _mm512_store_si512(o + (2 * p + 1) * kBTile + 64 * m, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
      }
    }
    widen_scales<false>(blk + kScales, o);
  }

  // The VNNI kernel's epilogue for super-block b of 16 tokens.
  static void super_epilogue(const ActTile& at, const uint8_t* blk, const uint8_t* ub, int64_t b, const int32_t* c,
                             __m512* acc) {
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
    const __m512 wdmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 2 * kRows)));
    const auto* sc = reinterpret_cast<const __m512i*>(ub + kUnpackedScales);
    __m512i m16[4];
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) m16[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(blk + kMins + 32 * p)));
    const float* d = at.d + b * kTileTokens;
    const int16_t* sums = at.sums + b * kTileTokens * kSubs;
    #pragma GCC unroll 16
    for (int j = 0; j < kTileTokens; ++j) {
      const __m512i tot = scaled_total(c, sc, j);
      __m512i mins = _mm512_setzero_si512();
      #pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) mins = _mm512_dpwssd_epi32(mins, m16[p], bcast4(sums + kSubs * j + 2 * p));
      const __m512 ad = _mm512_set1_ps(d[j]);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(wd, ad), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(wdmin, ad), acc[j]);
    }
  }
};

struct Q6KTiles : KQuantTiles<16, 16>, Q6KLayout {
  static constexpr bool kSums = false;
  static constexpr const TileConfig& config() { return kTileConfigK16; }

  // Chunk c's levels (0..63) of the 16 rows, minus 32: sub-block s is chunks
  // 4s .. 4s + 3, i.e. B tile s's 4 rows.
  static void unpack_super(const uint8_t* blk, uint8_t* o) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3), off = _mm512_set1_epi8(32);
    #pragma GCC unroll 4
    for (int c = 0; c < 64; ++c) {
      const __m512i ql = _mm512_loadu_si512(blk + kQl + 64 * (c % 32));
      const __m512i lo = _mm512_and_si512(c < 32 ? ql : _mm512_srli_epi16(ql, 4), low4);
      const __m512i qh = _mm512_loadu_si512(blk + kQh + 64 * (c % 16));
      const __m512i hi = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * (c / 16))), three);
      const __m512i level = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
      _mm512_store_si512(o + (c / 4) * kBTile + 64 * (c % 4), _mm512_sub_epi8(level, off));
    }
    widen_scales<true>(blk + kScales, o);
  }

  static void super_epilogue(const ActTile& at, const uint8_t* blk, const uint8_t* ub, int64_t b, const int32_t* c,
                             __m512* acc) {
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
    const auto* sc = reinterpret_cast<const __m512i*>(ub + kUnpackedScales);
    const float* d = at.d + b * kTileTokens;
    #pragma GCC unroll 16
    for (int j = 0; j < kTileTokens; ++j) {
      const __m512i tot = scaled_total(c, sc, j);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(wd, _mm512_set1_ps(d[j])), acc[j]);
    }
  }
};

// A 16-row group x up to 16 tokens; ub: the group unpacked.
template <class K>
void group_tile(int64_t nb, const uint8_t* wg, const uint8_t* ub, const ActTile& at, float* c, size_t ldc,
                __mmask16 mask, const NextGroup& pf) {
  alignas(64) int32_t sums[2][K::kSumInts];
  __m512 acc[kTileTokens];
  #pragma GCC unroll 16
  for (int j = 0; j < kTileTokens; ++j) acc[j] = _mm512_setzero_ps();
  K::super_sums(at, ub, 0, sums[0]);
  for (int64_t b = 0; b < nb; ++b) {
    pf.fetch(b);
    if (b + 1 < nb) K::super_sums(at, ub + (b + 1) * K::kUnpackedSuper, b + 1, sums[(b + 1) & 1]);
    K::super_epilogue(at, wg + b * K::kSuperBytes, ub + b * K::kUnpackedSuper, b, sums[b & 1], acc);
  }
  for (int j = 0; j < at.n_tokens; ++j) _mm512_mask_storeu_ps(c + j * ldc, mask, acc[j]);
}

// 64-byte aligned scratch (the unpacked tiles are stored with aligned moves).
template <class T>
T* aligned_scratch(std::vector<uint8_t>& buf, size_t n) {
  buf.resize(n * sizeof(T) + 64);
  const auto p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
}

// kVnniGemm: the AVX-512 table's gemm of the type (packed_avx512.h), for calls
// below kMinTokens.
template <class K, packing::PackedGemmFn kVnniGemm>
struct TileGemm {
  // Activation row: [n int8][nb float d][Q4_K: nb x 8 int16 sums of 32].
  static void gemm(int64_t n_cols, const void* w, int64_t n_rows, const void* act_v, size_t as, int64_t n_tokens,
                   float* c, size_t ldc) {
    if (n_tokens < kMinTokens) {
      kVnniGemm(n_cols, w, n_rows, act_v, as, n_tokens, c, ldc);
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
    uint8_t* unpacked = aligned_scratch<uint8_t>(unpacked_buf, nb * K::kUnpackedSuper);
    float* d = aligned_scratch<float>(d_buf, n_tiles * nb * kTileTokens);
    int16_t* sums = K::kSums ? aligned_scratch<int16_t>(sums_buf, n_tiles * nb * kTileTokens * 8) : nullptr;
    std::vector<ActTile> tiles;
    for (int64_t i = 0; i < n_tiles; ++i) {
      const int64_t t = i * kTileTokens;
      const int nt = (int)std::min<int64_t>(kTileTokens, n_tokens - t);
      float* td = d + i * nb * kTileTokens;
      int16_t* ts = K::kSums ? sums + i * nb * kTileTokens * 8 : nullptr;
      for (int j = 0; j < kTileTokens; ++j) {
        const uint8_t* row = act + (t + (j < nt ? j : 0)) * as;
        const auto* row_d = reinterpret_cast<const float*>(row + n_cols);
        const auto* row_s = reinterpret_cast<const int16_t*>(row_d + nb);
        for (int64_t b = 0; b < nb; ++b) {
          td[b * kTileTokens + j] = row_d[b];
          if (K::kSums) std::memcpy(ts + (b * kTileTokens + j) * 8, row_s + 8 * b, 8 * sizeof(int16_t));
        }
      }
      tiles.push_back(nt == kTileTokens ? ActTile{act + t * as, as, td, ts, nt}
                                        : ActTile{pad, (size_t)n_cols, td, ts, nt});
    }
    load_tile_config(K::config());
    fence_writes();
    const auto* wg = static_cast<const uint8_t*>(w);
    const size_t group_bytes = nb * K::kSuperBytes;
    for (int64_t g = 0; g < n_groups(n_rows); ++g, wg += group_bytes) {
      const __mmask16 mask = row_mask(n_rows - g * kRows);
      for (int64_t b = 0; b < nb; ++b) K::unpack_super(wg + b * K::kSuperBytes, unpacked + b * K::kUnpackedSuper);
      fence_writes();
      const NextGroup pf = g + 1 < n_groups(n_rows) ? NextGroup(wg + group_bytes, group_bytes, nb) : NextGroup();
      for (int64_t i = 0; i < n_tiles; ++i) {
        group_tile<K>(nb, wg, unpacked, tiles[i], c + i * kTileTokens * ldc + g * kRows, ldc, mask,
                      i == 0 ? pf : NextGroup());
      }
    }
    SPOOL_TILE_RELEASE();
  }

  // Takes over the table's entry when it is the AVX-512 layout (16 rows,
  // K's super-blocks); otherwise keeps it.
  static void install(PackedKernels& pk) {
    if (pk.rows != kRows || pk.packed_bytes(kRows, kQKK) != K::kSuperBytes) return;
    pk.gemm = gemm;
  }
};

}  // namespace

void fill_packed_kquant_amx_kernels(KernelTable& t) {
  TileGemm<Q4KTiles, avx512::packed_gemm_q4_k>::install(t.types[(uint32_t)DType::Q4_K].packed);
  TileGemm<Q6KTiles, avx512::packed_gemm_q6_k>::install(t.types[(uint32_t)DType::Q6_K].packed);
}

SPOOL_AMX_NS_END
}  // namespace spool::detail
