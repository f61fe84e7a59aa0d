// Scale searches shared by the K-quant quantizers: given a group of floats and
// per-element importance weights, find the scale (and for offset types the
// minimum) that minimise the weighted squared error after rounding. Used by
// synth to write model files, so quality matters more than speed here.
#pragma once

#include <cstdint>

namespace spool::detail {

// x ~ scale * L with L in [-nmax, nmax - 1]. Returns scale; L is written.
float search_scale_symmetric(int n, int nmax, const float* x, const float* w, int8_t* L);

// x ~ scale * L - min with L in [0, nmax], min >= 0. Returns scale; writes
// L and *min.
float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min);

}  // namespace spool::detail
