// The attention row kernels (RowKernels in kernels.h) of every table against
// the scalar reference: head sizes with and without a vector tail, strided
// rows, several query heads over the same rows, exp over scores spanning many
// magnitudes, and SwiGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/kernels.h"

namespace spool {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(RowKernels, MatchReference) {
  const RowKernels& ref = kernels_for(Isa::Scalar)->rows;
  for (Isa isa : available_isas()) {
    const RowKernels& k = kernels_for(isa)->rows;
    for (int64_t d : {64, 128, 80, 7}) {
      for (int64_t n : {1, 5, 33}) {
        const size_t stride = d * 3 + 5;
        const auto q = random_floats(d, 1, 1.0f), rows = random_floats(stride * n, 2, 1.0f);
        const auto w = random_floats(n, 3, 1.0f);
        std::vector<float> got(n), want(n);
        k.dot_rows(d, q.data(), rows.data() + 4, stride, n, got.data());
        ref.dot_rows(d, q.data(), rows.data() + 4, stride, n, want.data());
        for (int64_t p = 0; p < n; ++p) ASSERT_NEAR(got[p], want[p], 1e-4 * std::sqrt((double)d)) << isa_name(isa);
        std::vector<float> o1(d, 0.5f), o2(d, 0.5f);
        k.axpy_rows(d, w.data(), rows.data() + 4, stride, n, o1.data());
        ref.axpy_rows(d, w.data(), rows.data() + 4, stride, n, o2.data());
        for (int64_t i = 0; i < d; ++i) ASSERT_NEAR(o1[i], o2[i], 1e-4 * std::sqrt((double)n)) << isa_name(isa);
      }
    }
    // Several query heads against the same rows (GQA): every head's scores
    // and outputs as the single-query reference gives them.
    for (int64_t d : {64, 128, 80, 7}) {
      for (int n_q : {1, 3, 4, 8}) {
        const int64_t n = 21;
        const size_t stride = d * 2 + 3, out_stride = n + 2;
        const auto q = random_floats(d * n_q, 7, 1.0f), rows = random_floats(stride * n, 8, 1.0f);
        const auto w = random_floats(out_stride * n_q, 9, 1.0f);
        std::vector<float> got(out_stride * n_q, -1.0f);
        k.dot_rows_multi(d, q.data(), n_q, rows.data() + 2, stride, n, got.data(), out_stride);
        std::vector<float> o1(d * n_q, 0.25f);
        k.axpy_rows_multi(d, w.data(), out_stride, n_q, rows.data() + 2, stride, n, o1.data());
        for (int h = 0; h < n_q; ++h) {
          std::vector<float> want(n), o2(d, 0.25f);
          ref.dot_rows(d, q.data() + h * d, rows.data() + 2, stride, n, want.data());
          for (int64_t p = 0; p < n; ++p)
            ASSERT_NEAR(got[h * out_stride + p], want[p], 1e-4 * std::sqrt((double)d)) << isa_name(isa) << " head " << h;
          EXPECT_EQ(got[h * out_stride + n], -1.0f) << "wrote past n";
          ref.axpy_rows(d, w.data() + h * out_stride, rows.data() + 2, stride, n, o2.data());
          for (int64_t i = 0; i < d; ++i)
            ASSERT_NEAR(o1[h * d + i], o2[i], 1e-4 * std::sqrt((double)n)) << isa_name(isa) << " head " << h;
        }
      }
    }
    for (int64_t n : {1, 16, 37}) {
      auto g1 = random_floats(n, 5, 6.0f), g2 = g1;
      const auto u = random_floats(n, 6, 1.0f);
      k.swiglu(g1.data(), u.data(), n);
      ref.swiglu(g2.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g1[i], g2[i], 1e-5 * (std::fabs(g2[i]) + 1e-3)) << isa_name(isa);
      auto x1 = random_floats(n, 4, 20.0f);
      const float mx = 3.0f + *std::max_element(x1.begin(), x1.end());
      if (n > 1) x1[0] = -INFINITY;  // a masked score
      auto x2 = x1;
      const float s1 = k.exp_sum(x1.data(), n, mx), s2 = ref.exp_sum(x2.data(), n, mx);
      ASSERT_NEAR(s1, s2, 1e-6 * s2 + 1e-30) << isa_name(isa);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x1[i], x2[i], 1e-6 * x2[i] + 1e-37) << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace spool
