// Shared pieces of the AVX-512 packed kernels (x86/packed_*_avx512.cpp, and
// the AMX tiles over the same layouts): 16 interleaved weight rows per group,
// so one zmm holds 4 consecutive bytes of each of the 16 rows and a vpdpbusd
// against a broadcast 4-byte slice of one activation row yields 16 per-row
// partial dots at once. Packing and the driver are packed.h's. Include only
// from files compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/fill.h"
#include "kernels/packed.h"
#include "kernels/x86/quantize_q8.h"

namespace spool::detail::packed {

constexpr int kRows = 16;  // rows per interleaved group

using packing::round_up;
inline int64_t n_groups(int64_t n_rows) { return (n_rows + kRows - 1) / kRows; }

// Broadcast of the 4 bytes at p (one activation chunk) to all 16 lanes.
inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Software prefetch for the weight stream: the kLines cache lines starting
// kPrefetchAhead bytes past p, issued once per weight block. With several
// activation rows per tile the kernel spends many cycles per weight byte and
// the hardware prefetcher alone leaves DRAM latency exposed: on 0.5 GB of
// packed Q4_0 weights, 2 threads, an 8-row matmul took 23.8 ms without and
// 16.5 ms with it (4 rows: 20.1 -> 14.1 ms; 1 and 2 rows: within noise
// then). Decode gains after all on a Xeon (2026-12-03): one-token packed over
// unpacked matmul, 260 MB Q4_0 / 490 MB Q8_0, 2 threads, three alternating
// runs: 2.2-2.6x / 1.73-1.77x without, 3.0-3.3x / 1.87-1.97x with it.
// Past the end it is harmless: a prefetch never faults.
constexpr size_t kPrefetchAhead = 4096;
constexpr int kPrefetchMinTokens = 1;
template <int kLines>
inline void prefetch_weights(const uint8_t* p) {
  #pragma GCC unroll 64
  for (int i = 0; i < kLines; ++i) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + 64 * i), _MM_HINT_T0);
}

// The packed Q4_K super-block of a 16-row group (the VNNI kernel in
// x86/packed_kquant_avx512.cpp; the AMX tiles read it too): d[16],
// dmin[16] fp16; scales[8][16], mins[4][16][2] bytes; qs[4][8] zmm, lane r
// of qs[p][m] = row r's bytes 32p+4m..+3 (low nibbles: sub-block 2p, high
// nibbles: sub-block 2p+1, chunk m).
struct Q4KLayout {
  static constexpr size_t kScales = 4 * kRows, kMins = kScales + 8 * kRows, kQs = kMins + 8 * kRows;
  static constexpr size_t kSuperBytes = kQs + 32 * 64;
};

// The packed Q6_K super-block of a 16-row group (Q6KPacked in
// x86/packed_kquant_avx512.cpp; the AMX tiles read it too): d[16] fp16;
// scales[16 sub-blocks][16 rows] int8; ql[32] zmm (lane r of ql[t]: low 4
// bits of chunk t in the low nibbles, of chunk t+32 in the high ones); qh[16]
// zmm (bits 2k..2k+1 of lane r of qh[v]: top 2 bits of chunk v+16k). Chunk c
// = elements 4c..4c+3; sub-block s = chunks 4s..4s+3.
struct Q6KLayout {
  static constexpr size_t kScales = 2 * kRows, kQl = kScales + 16 * kRows, kQh = kQl + 32 * 64;
  static constexpr size_t kSuperBytes = kQh + 16 * 64;
};

inline __mmask16 row_mask(int64_t rows_left) {
  return rows_left >= kRows ? (__mmask16)0xFFFF : (__mmask16)((1u << rows_left) - 1);
}

// Tiles are told a group's real rows as a lane mask (masked stores).
struct Groups {
  static constexpr int kRows = packed::kRows;
  using Valid = __mmask16;
  static __mmask16 valid(int64_t rows_left) { return row_mask(rows_left); }
};

// Kernel::tile<C>(n_cols, group, act, act_stride, c, ldc, mask) computes a
// 16-row x C-token tile, C <= Kernel::kTokens; gemm_groups runs it over a
// matrix, Packer makes the table entry (packed.h).
template <class Kernel>
constexpr packing::PackedGemmFn gemm_groups = packing::gemm_groups<Kernel, Groups>;
template <class Kernel>
using Packer = packing::Packer<Kernel, Groups>;

}  // namespace spool::detail::packed

namespace spool::detail::avx512 {
// The VNNI gemms of the packed layouts that the AMX tiles also read
// (x86/packed_legacy_avx512.cpp, x86/packed_kquant_avx512.cpp): the driver
// and tiles of the AVX-512 table's entries, by name, for the AMX kernels'
// calls too small for a tile.
void packed_gemm_q4_0(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc);
void packed_gemm_q8_0(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc);
void packed_gemm_q4_k(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc);
void packed_gemm_q6_k(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                      float* c, size_t ldc);
}  // namespace spool::detail::avx512
