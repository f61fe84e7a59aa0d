// Batch invariance of matmul in the engine's mode: row t of a batched matmul
// is bit-identical to the same row multiplied alone, for every weight type
// with kernels (plain and packed layouts), at batch sizes that hit the decode
// path, tile edges and token splitting. This is what lets concurrent greedy
// requests produce exactly the tokens they produce one at a time.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace spool {
namespace {

struct InvariantMode {
  InvariantMode() { set_matmul_batch_invariant(true); }
  ~InvariantMode() { set_matmul_batch_invariant(false); }
};

void check_invariant(DType t, bool packed, int64_t n_cols, int64_t n_rows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(n_cols * n_rows);
  for (auto& v : wf) v = dist(rng);
  std::vector<uint8_t> wq(row_bytes(t, n_cols) * n_rows);
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row(t, wf.data() + r * n_cols, wq.data() + r * row_bytes(t, n_cols), n_cols);
  MatView w{t, wq.data(), n_cols, n_rows};
  ThreadPool pool(2);
  std::vector<uint8_t> pk;
  if (packed) {
    const size_t bytes = packed_matrix_bytes(w);
    if (bytes == 0) return;  // no packed layout for this type here
    pk.resize(bytes + 64);
    void* p = pk.data() + (64 - (uintptr_t)pk.data() % 64) % 64;
    pack_matrix(w, p, &pool);
    w.packed = p;
  }
  const int64_t max_tokens = 70;
  std::vector<float> x(n_cols * max_tokens);
  for (auto& v : x) v = dist(rng);
  InvariantMode mode;
  std::vector<uint8_t> scratch;
  std::vector<float> alone(n_rows * max_tokens);
  for (int64_t t0 = 0; t0 < max_tokens; ++t0)
    matmul(pool, w, x.data() + t0 * n_cols, 1, alone.data() + t0 * n_rows, scratch);
  for (int64_t n = 2; n <= max_tokens; ++n) {
    std::vector<float> y(n_rows * n);
    matmul(pool, w, x.data(), n, y.data(), scratch);
    ASSERT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0)
        << dtype_name(t) << (packed ? " packed" : "") << " batch " << n << " shape " << n_cols << "x" << n_rows;
  }
}

TEST(MatmulBatchInvariance, BatchedRowsEqualRowsAlone) {
  const KernelTable& k = kernels();
  int checked = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4,
                  DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                  DType::IQ3_S, DType::IQ4_NL, DType::IQ4_XS, DType::TQ1_0, DType::TQ2_0, DType::Q1_0, DType::Q2_0}) {
    if (!k[t].vec_dot) continue;
    SCOPED_TRACE(dtype_name(t));
    for (auto [cols, rows] : {std::pair<int, int>{512, 67}, {256, 32}, {64, 160}, {32, 48}, {160, 64}}) {
      if (cols % dtype_traits(t).block_size) continue;
      check_invariant(t, false, cols, rows);
      check_invariant(t, true, cols, rows);
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace spool
