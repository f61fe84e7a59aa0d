// Shared pieces of the AVX2 packed kernels (x86/packed_*_avx2.cpp), the
// same design as the AVX-512 ones (x86/packed_avx512.h) at half the
// width: 8 interleaved weight rows per group, so one ymm holds 4 consecutive
// bytes of each of the 8 rows, and a maddubs against a broadcast 4-byte
// slice of one activation row yields 8 per-row partial dots (as pairs of
// int16) at once. AVX2 has no vpdpbusd: int16 pair sums are added while they
// cannot overflow and widened to int32 with one vpmaddwd per block. Packing
// and the driver are packed.h's. Include only from files compiled with the
// AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/fill.h"
#include "kernels/packed.h"
#include "kernels/x86/quantize_q8.h"

namespace spool::detail::packed2 {

constexpr int kRows = 8;  // rows per interleaved group
// Tiles are told the count of a group's real rows (store_rows).
using Groups = packing::CountedGroups<kRows>;

using packing::round_up;
inline int64_t n_groups(int64_t n_rows) { return packing::n_groups<Groups>(n_rows); }

// Kernel::tile<C>(n_cols, group, act, act_stride, c, ldc, n_valid_rows)
// computes an 8-row x C-token tile, C <= Kernel::kTokens; gemm_groups runs it
// over a matrix, Packer makes the table entry (packed.h).
template <class Kernel>
constexpr packing::PackedGemmFn gemm_groups = packing::gemm_groups<Kernel, Groups>;
template <class Kernel>
using Packer = packing::Packer<Kernel, Groups>;

// Broadcast of the 4 bytes at p (one activation chunk) to all 8 lanes.
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// u8 x s8 products of 4-byte chunks, as 16 int16 pair sums (2 per row).
inline __m256i mul_u8s8(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
// int16 pair sums -> one int32 per row.
inline __m256i widen(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// Software prefetch of the weight stream (see x86/packed_avx512.h). On
// the AVX2 path it pays for decode (one token) too: 1-token Q4_0 / Q8_0
// matmul over 260 / 490 MB, 2 threads, SPOOL_ISA=avx2 on a Xeon (shared,
// noisy host): packed vs unpacked 1.4x / 1.35x without it, 2.0x / 1.8x with
// it (medians of 15, two alternating runs each); 2 KiB or 4 KiB ahead: the same.
constexpr size_t kPrefetchAhead = 2048;
constexpr int kPrefetchMinTokens = 1;
template <int kLines>
inline void prefetch_weights(const uint8_t* p) {
  #pragma GCC unroll 64
  for (int i = 0; i < kLines; ++i) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + 64 * i), _MM_HINT_T0);
}

// Stores the first n_valid of 8 floats.
inline void store_rows(float* c, __m256 v, int n_valid) {
  if (n_valid >= kRows) {
    _mm256_storeu_ps(c, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int i = 0; i < n_valid; ++i) c[i] = tmp[i];
}

}  // namespace spool::detail::packed2
