// The attention row kernels (RowKernels in kernels.h) of every table against
// the scalar reference: head sizes with and without vector tails, strided and
// misaligned rows (F32 and F16), 1..5 query heads over the same rows (a pass
// of 4 plus a remainder), row counts around the prefetch distance, exp over
// scores down to -inf (masked) and through the subnormal range, and SwiGLU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/kernels.h"

namespace spool {
namespace {

const int64_t kDims[] = {1, 7, 8, 15, 16, 63, 64, 65, 80, 100, 128, 576};
const int64_t kCounts[] = {0, 1, 2, 5, 6, 7, 8, 9, 16, 33};
constexpr float kSentinel = -12345.0f;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

const RowKernels& ref() { return kernels_for(Isa::Scalar)->rows; }

// Cached rows: n rows of d values, `stride` apart, starting one element into
// the buffer (misaligned), as F32 and as F16 (with `vals` the F16 values).
struct Rows {
  size_t stride;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<float> vals;  // the F16 rows widened back: what both paths see
  Rows(int64_t d, int64_t n, uint32_t seed) : stride(d * 2 + 3) {
    f32 = random_floats(stride * n + 1, seed, 1.0f);
    for (float x : f32) f16.push_back(fp32_to_fp16(x));
    for (uint16_t h : f16) vals.push_back(fp16_to_fp32(h));
  }
  const float* row(bool half, int64_t p) const { return (half ? vals.data() : f32.data()) + 1 + p * stride; }
};

// A dot's rounding scales with the sum of |terms|, not with the result, which
// cancellation can make arbitrarily small: tolerances are relative to that.
constexpr double kDotRel = 1e-5;

void check_dots(Isa isa, int64_t d, int n_q, int64_t n, bool half) {
  const RowKernels& k = kernels_for(isa)->rows;
  const Rows rows(d, n, 11 + (uint32_t)d);
  const auto q = random_floats(d * n_q, 12, 1.0f);
  const size_t out_stride = n + 3;
  std::vector<float> got(out_stride * n_q, kSentinel), want(out_stride * n_q, kSentinel);
  if (half) {
    k.dot_rows_multi_f16(d, q.data(), n_q, rows.f16.data() + 1, rows.stride, n, got.data(), out_stride);
    ref().dot_rows_multi_f16(d, q.data(), n_q, rows.f16.data() + 1, rows.stride, n, want.data(), out_stride);
  } else {
    k.dot_rows_multi(d, q.data(), n_q, rows.f32.data() + 1, rows.stride, n, got.data(), out_stride);
    ref().dot_rows_multi(d, q.data(), n_q, rows.f32.data() + 1, rows.stride, n, want.data(), out_stride);
  }
  std::vector<float> single(n);  // dot_rows, one query at a time
  for (int h = 0; h < n_q; ++h) {
    if (!half) k.dot_rows(d, q.data() + h * d, rows.f32.data() + 1, rows.stride, n, single.data());
    for (int64_t p = 0; p < n; ++p) {
      double scale = 0;
      for (int64_t i = 0; i < d; ++i) scale += std::fabs((double)q[h * d + i] * rows.row(half, p)[i]);
      const double tol = kDotRel * scale + 1e-30, w = want[h * out_stride + p];
      ASSERT_NEAR(got[h * out_stride + p], w, tol) << isa_name(isa) << " d " << d << " n_q " << n_q << " n " << n
                                                   << " head " << h << " row " << p << (half ? " f16" : "");
      if (!half) {
        ASSERT_NEAR(single[p], w, tol) << isa_name(isa) << " dot_rows d " << d << " n " << n;
      }
    }
    for (size_t p = n; p < out_stride; ++p) ASSERT_EQ(got[h * out_stride + p], kSentinel) << "wrote past n";
  }
}

void check_axpys(Isa isa, int64_t d, int n_q, int64_t n, bool half) {
  const RowKernels& k = kernels_for(isa)->rows;
  const Rows rows(d, n, 21 + (uint32_t)d);
  const size_t w_stride = n + 2;
  const auto w = random_floats(w_stride * n_q, 22, 1.0f);
  auto got = random_floats(d * n_q + 8, 23, 1.0f);
  std::fill(got.end() - 8, got.end(), kSentinel);
  const auto start = got;
  auto want = got;
  if (half) {
    k.axpy_rows_multi_f16(d, w.data(), w_stride, n_q, rows.f16.data() + 1, rows.stride, n, got.data());
    ref().axpy_rows_multi_f16(d, w.data(), w_stride, n_q, rows.f16.data() + 1, rows.stride, n, want.data());
  } else {
    k.axpy_rows_multi(d, w.data(), w_stride, n_q, rows.f32.data() + 1, rows.stride, n, got.data());
    ref().axpy_rows_multi(d, w.data(), w_stride, n_q, rows.f32.data() + 1, rows.stride, n, want.data());
  }
  for (int h = 0; h < n_q; ++h) {
    std::vector<float> single(start.begin() + h * d, start.begin() + (h + 1) * d);  // axpy_rows, one head
    if (!half) k.axpy_rows(d, w.data() + h * w_stride, rows.f32.data() + 1, rows.stride, n, single.data());
    for (int64_t i = 0; i < d; ++i) {
      double scale = std::fabs(start[h * d + i]);
      for (int64_t p = 0; p < n; ++p) scale += std::fabs((double)w[h * w_stride + p] * rows.row(half, p)[i]);
      const double tol = kDotRel * scale, x = want[h * d + i];
      ASSERT_NEAR(got[h * d + i], x, tol) << isa_name(isa) << " d " << d << " n_q " << n_q << " n " << n << " head "
                                          << h << " i " << i << (half ? " f16" : "");
      if (!half) {
        ASSERT_NEAR(single[i], x, tol) << isa_name(isa) << " axpy_rows d " << d << " n " << n;
      }
    }
  }
  for (size_t i = d * n_q; i < got.size(); ++i) ASSERT_EQ(got[i], kSentinel) << "wrote past n_q * d";
}

// How many of the table's 8 row kernels are its own, not the reference's
// (so a run shows that a SIMD table's kernels, not the fallback, were tested).
int own_kernels(Isa isa) {
  const RowKernels& k = kernels_for(isa)->rows;
  return (k.dot_rows != ref().dot_rows) + (k.axpy_rows != ref().axpy_rows) + (k.exp_sum != ref().exp_sum) +
         (k.swiglu != ref().swiglu) + (k.dot_rows_multi != ref().dot_rows_multi) +
         (k.axpy_rows_multi != ref().axpy_rows_multi) + (k.dot_rows_multi_f16 != ref().dot_rows_multi_f16) +
         (k.axpy_rows_multi_f16 != ref().axpy_rows_multi_f16);
}

TEST(RowKernels, DotsMatchReference) {
  std::printf("Row kernels tested on:");
  for (Isa isa : available_isas()) {
    std::printf(" %s (%d/8 own)", isa_name(isa), isa == Isa::Scalar ? 8 : own_kernels(isa));
    for (int64_t d : kDims)
      for (int n_q = 1; n_q <= 5; ++n_q)
        for (int64_t n : kCounts)
          for (bool half : {false, true}) check_dots(isa, d, n_q, n, half);
  }
  std::printf("\n");
}

TEST(RowKernels, WeightedSumsMatchReference) {
  for (Isa isa : available_isas())
    for (int64_t d : kDims)
      for (int n_q = 1; n_q <= 5; ++n_q)
        for (int64_t n : kCounts)
          for (bool half : {false, true}) check_axpys(isa, d, n_q, n, half);
}

// exp(x - max) and the sum, over lengths 0..40 (every tail) with scores from
// max itself down through the subnormal results to -1e30 and -inf.
TEST(RowKernels, ExpSumMatchesReference) {
  const float offsets[] = {0.0f, -1e-3f, -0.5f, -0.6931472f, -5.0f, -20.0f, -87.0f, -87.5f, -90.0f,
                           -100.0f, -103.5f, -104.5f, -150.0f, -1e30f, -INFINITY};
  const int n_off = sizeof offsets / sizeof offsets[0];
  for (Isa isa : available_isas()) {
    const RowKernels& k = kernels_for(isa)->rows;
    for (int64_t n = 0; n <= 40; ++n) {
      const float mx = 2.5f;
      const auto noise = random_floats(n, 30 + (uint32_t)n, 3.0f);
      std::vector<float> x1(n);
      for (int64_t i = 0; i < n; ++i) x1[i] = mx + (i % 3 ? -std::fabs(noise[i]) : offsets[(i + n) % n_off]);
      x1.push_back(kSentinel);
      auto x2 = x1;
      const float s1 = k.exp_sum(x1.data(), n, mx), s2 = ref().exp_sum(x2.data(), n, mx);
      // Both sums add n positive terms in different orders.
      ASSERT_NEAR(s1, s2, (5e-7 + n * 6e-8) * s2) << isa_name(isa) << " n " << n;
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x1[i], x2[i], 5e-7 * x2[i] + 1e-43) << isa_name(isa) << " i " << i;
      ASSERT_EQ(x1[n], kSentinel) << "wrote past n";
    }
  }
}

// exp's own accuracy on a dense sweep against exp in double: relative error
// for normal results, absolute (a few subnormal steps) below; where exp is
// under half the smallest subnormal (x < -103.97), -inf included, exactly 0.
TEST(RowKernels, ExpAccuracy) {
  std::vector<float> xs;
  for (float x = -110.0f; x < 0.0f; x += 1.37e-3f) xs.push_back(x);
  xs.push_back(0.0f);
  xs.push_back(-INFINITY);
  for (Isa isa : available_isas()) {
    auto e = xs;
    kernels_for(isa)->rows.exp_sum(e.data(), (int64_t)e.size(), 0.0f);
    double max_rel = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = std::exp((double)xs[i]);
      if (want >= std::numeric_limits<float>::min()) {
        max_rel = std::max(max_rel, std::fabs(e[i] - want) / want);
      } else {
        ASSERT_NEAR(e[i], want, 1e-43) << isa_name(isa) << " x " << xs[i];
        if (want < 7e-46) {
          ASSERT_EQ(e[i], 0.0f) << isa_name(isa) << " x " << xs[i];
        }
      }
    }
    std::printf("exp %s: max relative error %.3g\n", isa_name(isa), max_rel);
    EXPECT_LT(max_rel, 4e-7) << isa_name(isa);
    EXPECT_EQ(e[xs.size() - 2], 1.0f) << isa_name(isa) << ": exp(0)";
  }
}

TEST(RowKernels, SwigluMatchesReference) {
  for (Isa isa : available_isas()) {
    const RowKernels& k = kernels_for(isa)->rows;
    for (int64_t n : {0, 1, 7, 8, 9, 16, 37, 100}) {
      auto g1 = random_floats(n, 5, 6.0f);
      if (n > 2) g1[1] = 120.0f, g1[2] = -120.0f;  // exp(-|x|) underflows
      g1.push_back(kSentinel);
      auto g2 = g1;
      const auto u = random_floats(n, 6, 1.0f);
      k.swiglu(g1.data(), u.data(), n);
      ref().swiglu(g2.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g1[i], g2[i], 1e-5 * (std::fabs(g2[i]) + 1e-3)) << isa_name(isa);
      ASSERT_EQ(g1[n], kSentinel) << "wrote past n";
    }
  }
}

}  // namespace
}  // namespace spool
