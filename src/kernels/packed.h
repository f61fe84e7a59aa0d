// The instruction-set-independent half of the packed kernels (PackedKernels in
// kernels.h), written once for every ISA: how rows are packed into groups of
// interleaved rows, and the driver that runs a kernel's tiles over every group
// and token tile. Each ISA's header (x86/packed_avx2.h, x86/packed_avx512.h,
// neon/packed.h) names its group shape; its files supply the block layouts and tiles.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/quant_blocks.h"
#include "kernels/kernels.h"

namespace spool::detail::packing {
// Included by files compiled for different instruction sets: internal
// linkage, so the linker never takes one ISA's copy of an inline function
// for another's.
namespace {

using PackedGemmFn = decltype(PackedKernels::gemm);

inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// A group shape: Groups::kRows interleaved rows per group, and what a tile is
// told of the group's real rows (Groups::valid(rows left), of type
// Groups::Valid). This one passes their count; AVX-512 passes a lane mask.
template <int kRowsPerGroup>
struct CountedGroups {
  static constexpr int kRows = kRowsPerGroup;
  using Valid = int;
  static int valid(int64_t rows_left) { return (int)std::min<int64_t>(kRows, rows_left); }
};

template <class Groups>
inline int64_t n_groups(int64_t n_rows) {
  return (n_rows + Groups::kRows - 1) / Groups::kRows;
}

// Kernel::tile<C>(n_cols, group, act, act_stride, c, ldc, valid) computes a
// Groups::kRows-row x C-token tile, C <= Kernel::kTokens. Runs it over every
// group (whose weights stay in L1 across its token tiles) and token tile. A
// kernel computes every token of a tile with the same instructions in the same
// order whatever C is, so a token's result never depends on the tokens
// batched with it.
template <class Kernel, class Groups>
void gemm_groups(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t as, int64_t n_tokens,
                 float* c, size_t ldc) {
  using Valid = typename Groups::Valid;
  using TileFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t, Valid);
  static constexpr auto kFns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, sizeof...(I)>{&Kernel::template tile<I + 1>...};
  }(std::make_integer_sequence<int, Kernel::kTokens>());
  constexpr int kRows = Groups::kRows;
  const size_t group_bytes = Kernel::group_bytes(n_cols);
  const auto* wg = static_cast<const uint8_t*>(w);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = 0; g < n_groups<Groups>(n_rows); ++g, wg += group_bytes) {
    const Valid valid = Groups::valid(n_rows - g * kRows);
    for (int64_t t = 0; t < n_tokens; t += Kernel::kTokens) {
      const int nt = (int)std::min<int64_t>(Kernel::kTokens, n_tokens - t);
      kFns[nt - 1](n_cols, wg, a + t * as, as, c + t * ldc + g * kRows, ldc, valid);
    }
  }
}

// Packing a matrix into groups, and the table entry of a kernel. A group is
// zeroed first, so padding rows keep zero scales and levels and contribute
// nothing. For row r of a group and each of its source blocks (kSrcBytes
// bytes, kBlockCols columns), Kernel::pack_block(src, r, blk) writes the
// group's block blk (kBlockBytes; the group's blocks in column order,
// Kernel::group_bytes(n_cols) in all). A layout that keeps part of each block
// after all of the group's blocks takes the group instead:
// Kernel::pack_block(src, r, group, b, nb) for block b of nb.
template <class Kernel, class Groups>
struct Packer {
  static size_t packed_bytes(int64_t n_rows, int64_t n_cols) {
    return (size_t)n_groups<Groups>(n_rows) * Kernel::group_bytes(n_cols);
  }

  static void pack(const void* w, size_t ws, int64_t n_rows, int64_t n_cols, void* out) {
    constexpr int kRows = Groups::kRows;
    auto* dst = static_cast<uint8_t*>(out);
    std::memset(dst, 0, packed_bytes(n_rows, n_cols));
    const int64_t nb = n_cols / Kernel::kBlockCols;
    for (int64_t g = 0; g < n_groups<Groups>(n_rows); ++g) {
      uint8_t* group = dst + g * Kernel::group_bytes(n_cols);
      for (int r = 0; r < kRows && g * kRows + r < n_rows; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w) + (g * kRows + r) * ws;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* src = row + b * Kernel::kSrcBytes;
          if constexpr (requires { Kernel::pack_block(src, r, group, b, nb); }) {
            Kernel::pack_block(src, r, group, b, nb);
          } else {
            Kernel::pack_block(src, r, group + b * Kernel::kBlockBytes);
          }
        }
      }
    }
  }

  // Packing, the kernel's activation format (Kernel::act_bytes,
  // Kernel::quantize_act) and gemm_groups over its tiles; a kernel with a
  // driver of its own replaces .gemm.
  static PackedKernels kernels() {
    PackedKernels k;
    k.rows = Groups::kRows;
    k.packed_bytes = packed_bytes;
    k.pack = pack;
    k.act_bytes = Kernel::act_bytes;
    k.quantize_act = Kernel::quantize_act;
    k.gemm = gemm_groups<Kernel, Groups>;
    return k;
  }
};

// A row as Q8_K blocks, in a per-thread buffer: the start of the activation
// formats of the K-quant kernels. kQuantizeQ8_K is the ISA's own quantizer
// (its table's Q8_K entry), named at compile time.
template <QuantizeRowFn kQuantizeQ8_K>
const BlockQ8_K* q8_k_row(const float* x, int64_t n) {
  thread_local std::vector<BlockQ8_K> tmp;
  tmp.resize(n / kQKK);
  kQuantizeQ8_K(x, tmp.data(), n);
  return tmp.data();
}

}  // namespace
}  // namespace spool::detail::packing
