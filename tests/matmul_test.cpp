// matmul() and get_row() against a naive float reference: dequantize W,
// quantize-dequantize x to the weight's vec_dot_type, multiply in double.
// Runs with 1 and 2 threads and batch sizes that hit the decode path, odd
// tile edges and the token-splitting path.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace spool {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void check_matmul(DType t, int64_t n_cols, int64_t n_rows, int64_t n_tokens, int n_threads) {
  const auto wf = random_floats(n_cols * n_rows, 1);
  const auto x = random_floats(n_cols * n_tokens, 2);
  std::vector<uint8_t> wq(row_bytes(t, n_cols) * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_row(t, wf.data() + r * n_cols, wq.data() + r * row_bytes(t, n_cols), n_cols);
  }
  const MatView w{t, wq.data(), n_cols, n_rows};
  // Reference operands exactly as the kernels see them.
  std::vector<float> wd(n_cols * n_rows), xd(n_cols * n_tokens);
  for (int64_t r = 0; r < n_rows; ++r) get_row(w, r, wd.data() + r * n_cols);
  const DType vdt = dtype_traits(t).vec_dot_type;
  std::vector<uint8_t> xq(row_bytes(vdt, n_cols));
  for (int64_t i = 0; i < n_tokens; ++i) {
    quantize_row(vdt, x.data() + i * n_cols, xq.data(), n_cols);
    dequantize_row(vdt, xq.data(), xd.data() + i * n_cols, n_cols);
  }
  ThreadPool pool(n_threads);
  std::vector<float> y(n_rows * n_tokens, NAN);
  std::vector<uint8_t> scratch;
  matmul(pool, w, x.data(), n_tokens, y.data(), scratch);
  // Q8_1 stores d * sum(q) as fp16, so offset types carry its rounding.
  const double rel_tol = vdt == DType::Q8_1 ? 1e-3 : 2e-4;
  for (int64_t i = 0; i < n_tokens; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      double want = 0, mag = 0;
      for (int64_t c = 0; c < n_cols; ++c) {
        want += (double)wd[r * n_cols + c] * xd[i * n_cols + c];
        mag += std::fabs((double)wd[r * n_cols + c] * xd[i * n_cols + c]);
      }
      ASSERT_NEAR(y[i * n_rows + r], want, rel_tol * mag + 1e-5)
          << dtype_name(t) << " token " << i << " row " << r << " threads " << n_threads;
    }
  }
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesNaiveReference) {
  const DType t = GetParam();
  const int64_t n_cols = dtype_traits(t).block_size == 256 ? 512 : 96;
  for (int threads : {1, 2}) {
    for (int64_t n_tokens : {1, 2, 5, 33}) check_matmul(t, n_cols, 75, n_tokens, threads);
  }
  check_matmul(t, n_cols, 37, 130, 2);  // few rows, many tokens: token tasks
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0,
                                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                           DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Matmul, GetRowOfQ8_0) {
  const auto wf = random_floats(64 * 3, 5);
  std::vector<uint8_t> wq(row_bytes(DType::Q8_0, 64) * 3);
  for (int r = 0; r < 3; ++r) quantize_row(DType::Q8_0, wf.data() + 64 * r, wq.data() + 68 * r, 64);
  const MatView w{DType::Q8_0, wq.data(), 64, 3};
  std::vector<float> row(64);
  get_row(w, 2, row.data());
  for (int c = 0; c < 64; ++c) EXPECT_NEAR(row[c], wf[128 + c], 0.03f);
}

}  // namespace
}  // namespace spool
