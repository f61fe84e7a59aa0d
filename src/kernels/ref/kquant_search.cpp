// Weighted least-squares scale searches for the K-quant quantizers. Each tries
// a small fan of candidate inverse scales around the obvious one (max maps to
// the end of the range), rounds, then solves for the best scale for that
// rounding; the candidate with the least weighted error wins.
#include "kernels/ref/kquant_search.h"

#include <algorithm>
#include <cmath>

#include "kernels/fill.h"

namespace spool::detail {

float search_scale_symmetric(int n, int nmax, const float* x, const float* w, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) { amax = std::fabs(x[i]); max = x[i]; }
  }
  if (amax < 1e-30f) {
    std::fill(L, L + n, 0);
    return 0;
  }
  // For a fixed rounding L the best scale is sum(wxL)/sum(wLL) and the error
  // it leaves falls as sum(wxL)^2/sum(wLL) rises, so maximise that.
  float best = -1, best_scale = 0;
  int8_t trial[256];
  for (int is = -9; is <= 9; ++is) {
    const float iscale = -(nmax + 0.1f * is) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      trial[i] = (int8_t)l;
      sumlx += w[i] * x[i] * l;
      suml2 += w[i] * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      best = sumlx * sumlx / suml2;
      best_scale = sumlx / suml2;
      std::copy(trial, trial + n, L);
    }
  }
  return best_scale;
}

namespace {

// Least-squares fit of x ~ scale * L + offset (offset <= 0) for fixed L;
// returns the weighted squared error.
float fit_scale_offset(int n, const float* x, const float* w, const uint8_t* L, float* scale,
                       float* offset) {
  float sw = 0, sl = 0, sl2 = 0, sx = 0, sxl = 0;
  for (int i = 0; i < n; ++i) {
    sw += w[i]; sl += w[i] * L[i]; sl2 += w[i] * L[i] * L[i];
    sx += w[i] * x[i]; sxl += w[i] * x[i] * L[i];
  }
  const float det = sw * sl2 - sl * sl;
  *scale = 0;
  *offset = 0;
  if (det > 0) {
    *scale = (sw * sxl - sx * sl) / det;
    *offset = (sl2 * sx - sl * sxl) / det;
  }
  if (*offset > 0) {  // the format only subtracts a minimum
    *offset = 0;
    *scale = sl2 > 0 ? sxl / sl2 : 0;
  }
  float err = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = *scale * L[i] + *offset - x[i];
    err += w[i] * diff * diff;
  }
  return err;
}

}  // namespace

float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min) {
  float mn = *std::min_element(x, x + n), mx = *std::max_element(x, x + n);
  if (mn > 0) mn = 0;
  if (mx <= mn) {
    std::fill(L, L + n, 0);
    *min = -mn;
    return 0;
  }
  float best_err = INFINITY, best_scale = 0, best_offset = mn;
  uint8_t trial[256];
  for (int is = -1; is <= 20; ++is) {
    // is = -1 is the plain range fit; the others fan out around it.
    const float iscale = is < 0 ? nmax / (mx - mn) : (nmax - 1.0f + 0.1f * is) / (mx - mn);
    for (int i = 0; i < n; ++i) {
      trial[i] = (uint8_t)std::clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax);
    }
    float scale, offset;
    const float err = fit_scale_offset(n, x, w, trial, &scale, &offset);
    if (scale > 0 && err < best_err) {
      best_err = err;
      best_scale = scale;
      best_offset = offset;
      std::copy(trial, trial + n, L);
    }
  }
  if (best_err == INFINITY) {  // degenerate fits: fall back to the range
    best_scale = (mx - mn) / nmax;
    for (int i = 0; i < n; ++i) {
      L[i] = (uint8_t)std::clamp(nearest_int((x[i] - mn) / best_scale), 0, nmax);
    }
  }
  *min = -best_offset;
  return best_scale;
}

}  // namespace spool::detail
