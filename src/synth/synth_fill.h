// Random tensor contents for synthetic models: a counter-based generator (so a
// file depends only on its seed, never on the thread count), approximately
// normal floats, pools of pre-quantized blocks for any quant type, and Q4_K
// blocks made directly from random bytes with a chosen standard deviation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace spool::synth {

// SplitMix64's finalizer: a well-mixed 64-bit value for every counter.
uint64_t mix64(uint64_t z);

// n approximately normal values (sum of four 16-bit uniforms) from `stream`.
void fill_normal(float* x, int64_t n, uint64_t stream, float mean, float stddev);

// Quantized rows assembled from a pool of blocks quantized once from normal
// values: every block of a row is an independent pick, so filling is a copy.
// The K-quant quantizers cost ~100 ns per value; this goes at memory speed.
class BlockPool {
 public:
  BlockPool(DType type, uint64_t seed, float stddev);
  void fill_row(uint8_t* dst, int64_t n_blocks, uint64_t stream) const;

 private:
  size_t block_bytes_ = 0;
  int64_t n_blocks_ = 0;
  std::vector<uint8_t> bytes_;
};

// Q4_K blocks straight from random bytes: every 4-bit quant and 6-bit
// sub-block scale/min uniform, d fixed and dmin = 7.5 d. A weight is
// d*sc*q - dmin*m with sc, m uniform on 0..63 and q on 0..15, so its mean is
// d*(31.5*7.5 - 7.5*31.5) = 0 and its variance d^2 * (Var(sc*q) + 7.5^2 Var(m))
// = d^2 * (47532.4 + 19195.3); d is set from the wanted standard deviation.
// (Values within a sub-block share sc and m, so they are not independent, but
// every sub-block is zero-mean in expectation, which keeps activations finite.)
class RandomQ4K {
 public:
  explicit RandomQ4K(float stddev);
  void fill_row(uint8_t* dst, int64_t n_blocks, uint64_t stream) const;
  static double variance_per_d2();  // Var(w) / d^2 of the construction above

 private:
  uint16_t d_ = 0, dmin_ = 0;
};

}  // namespace spool::synth
