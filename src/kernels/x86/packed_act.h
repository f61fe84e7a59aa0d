// Activation rows of the x86 packed kernels for block-32 weights (Q4_0, Q8_0,
// MXFP4): the table's Q8_0 quantization laid out as [n int8 levels][nb float
// d][nb int32 -offset * sum of the block's levels], so a kernel whose weight
// levels carry an offset (Q4_0 nibbles, Q8_0 + 128, MXFP4 values + 12) starts
// each block's integer sum at that bias. Scalar code: each ISA file names its
// own table's quantizer (quantize_q8.h) and row alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"

namespace spool::detail::packed_act {
// Compiled into AVX2 and AVX-512 files: internal linkage, so neither ISA's
// copy can stand in for the other's at link time.
namespace {

// Bytes of one row of n elements, rounded up to `align`.
inline size_t q8_row_bytes(int64_t n, size_t align) {
  const size_t bytes = (size_t)n + 8 * (size_t)(n / kQK);
  return (bytes + align - 1) / align * align;
}

// kQuantizeQ8_0: the ISA's Q8_0 quantizer, the table's entry for Q8_0.
template <int kOffset, QuantizeRowFn kQuantizeQ8_0>
void q8_row(const float* x, void* out, int64_t n) {
  const int64_t nb = n / kQK;
  thread_local std::vector<BlockQ8_0> tmp;
  tmp.resize(nb);
  kQuantizeQ8_0(x, tmp.data(), n);
  auto* q = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(q + n);
  auto* bias = reinterpret_cast<int32_t*>(d + nb);
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(q + b * kQK, tmp[b].qs, kQK);
    d[b] = fp16_to_fp32(tmp[b].d);
    int sum = 0;
    for (int i = 0; i < kQK; ++i) sum += tmp[b].qs[i];
    bias[b] = -kOffset * sum;
  }
}

}  // namespace
}  // namespace spool::detail::packed_act
