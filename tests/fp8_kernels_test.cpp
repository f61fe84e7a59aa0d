// F8_E4M3 block-scaled kernels: the scalar decoder against the e4m3
// definition's landmarks, every compiled-in ISA's decode/dot against the
// reference on awkward lengths and block widths, and matmul / get_row /
// row_slice over a scale grid against a plain double-precision product.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

using namespace spool;

namespace {

// Random codes without the two NaN codes.
std::vector<uint8_t> random_codes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> q(n);
  for (auto& b : q) {
    do b = (uint8_t)rng(); while ((b & 0x7F) == 0x7F);
  }
  return q;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(Fp8Decode, ReferenceLandmarks) {
  EXPECT_EQ(fp8_e4m3_to_fp32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x38), 1.0f);     // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_fp32(0xB8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x7E), 448.0f);   // largest finite
  EXPECT_EQ(fp8_e4m3_to_fp32(0x08), 1.0f / 64);  // smallest normal 2^-6
  EXPECT_EQ(fp8_e4m3_to_fp32(0x01), 1.0f / 512);  // smallest subnormal 2^-9
  EXPECT_EQ(fp8_e4m3_to_fp32(0x07), 7.0f / 512);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x3C), 1.5f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_fp32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_fp32(0xFF)));
}

// All 256 codes through every ISA's scaled dequantize (scale 1, and a power of
// two so the result stays exact) equal the reference decoder, NaN included.
TEST(Fp8Kernels, EveryCodeDecodesLikeTheReference) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = (uint8_t)i;
  for (Isa isa : available_isas()) {
    const ScaledKernels& sk = (*kernels_for(isa))[DType::F8_E4M3].scaled;
    ASSERT_NE(sk.dequantize, nullptr) << isa_name(isa);
    for (float scale : {1.0f, 0.25f}) {
      const float scales[2] = {scale, scale};
      std::vector<float> out(256);
      sk.dequantize(256, codes.data(), scales, 128, out.data());
      for (int i = 0; i < 256; ++i) {
        const float want = fp8_e4m3_to_fp32((uint8_t)i) * scale;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(out[i])) << isa_name(isa) << " code " << i;
        } else {
          EXPECT_EQ(out[i], want) << isa_name(isa) << " code " << i;
        }
      }
    }
  }
}

TEST(Fp8Kernels, DotAndDequantizeMatchReferenceOnAwkwardSizes) {
  std::mt19937 rng(7);
  const KernelTable* ref = kernels_for(Isa::Scalar);
  for (int64_t block : {16, 32, 48, 128, 7}) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 100, 128, 129, 255, 300, 389}) {
      const auto q = random_codes(n, rng);
      const auto a = random_floats(n, rng);
      const auto scales = random_floats((n + block - 1) / block, rng, 0.001f, 0.1f);
      double bound = 0;  // sum of |terms|: the scale of the rounding error
      for (int64_t i = 0; i < n; ++i) bound += std::fabs(fp8_e4m3_to_fp32(q[i]) * scales[i / block] * a[i]);
      const float want = ref->types[(uint32_t)DType::F8_E4M3].scaled.dot(n, q.data(), scales.data(), block, a.data());
      std::vector<float> want_row(n);
      ref->types[(uint32_t)DType::F8_E4M3].scaled.dequantize(n, q.data(), scales.data(), block, want_row.data());
      for (Isa isa : available_isas()) {
        const ScaledKernels& sk = (*kernels_for(isa))[DType::F8_E4M3].scaled;
        EXPECT_NEAR(sk.dot(n, q.data(), scales.data(), block, a.data()), want, 1e-6 * bound + 1e-30)
            << isa_name(isa) << " n=" << n << " block=" << block;
        std::vector<float> row(n);
        sk.dequantize(n, q.data(), scales.data(), block, row.data());
        EXPECT_EQ(row, want_row) << isa_name(isa) << " n=" << n << " block=" << block;
      }
    }
  }
}

// A [n_rows, n_cols] F8 matrix with a (block_rows x block_cols) scale grid.
struct Fp8Matrix {
  int64_t n_rows, n_cols, br, bc;
  std::vector<uint8_t> codes;
  std::vector<float> scales;  // [ceil(n_rows / br), ceil(n_cols / bc)]
  MatView view() const {
    MatView m;
    m.type = DType::F8_E4M3;
    m.data = codes.data();
    m.n_rows = n_rows;
    m.n_cols = n_cols;
    m.block_scale = scales.data();
    m.block_rows = br;
    m.block_cols = bc;
    m.scale_cols = (n_cols + bc - 1) / bc;
    return m;
  }
  double value(int64_t r, int64_t c) const {
    return (double)fp8_e4m3_to_fp32(codes[r * n_cols + c]) * scales[(r / br) * ((n_cols + bc - 1) / bc) + c / bc];
  }
};

Fp8Matrix random_matrix(int64_t n_rows, int64_t n_cols, int64_t br, int64_t bc, std::mt19937& rng) {
  Fp8Matrix m{n_rows, n_cols, br, bc, random_codes(n_rows * n_cols, rng), {}};
  m.scales = random_floats(((n_rows + br - 1) / br) * ((n_cols + bc - 1) / bc), rng, 1e-3f, 2e-2f);
  return m;
}

TEST(Fp8Matmul, MatchesDoubleProductForDecodeAndPrefill) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  std::vector<uint8_t> scratch;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 300}, {129, 128}, {1, 17}, {300, 520}}) {
    const Fp8Matrix w = random_matrix(rows, cols, 128, 128, rng);
    for (int64_t n_tokens : {1, 2, 3, 37}) {
      const auto x = random_floats(n_tokens * cols, rng);
      std::vector<float> y(n_tokens * rows);
      matmul(pool, w.view(), x.data(), n_tokens, y.data(), scratch);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0, bound = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += w.value(r, c) * x[t * cols + c];
            bound += std::fabs(w.value(r, c) * x[t * cols + c]);
          }
          ASSERT_NEAR(y[t * rows + r], want, 2e-6 * bound + 1e-12)
              << rows << "x" << cols << " tokens " << n_tokens << " row " << r << " token " << t;
        }
      }
    }
  }
}

// Rows 100..179 as their own view: scale rows keep following the full
// matrix's grid (row 128 starts the second block row).
TEST(Fp8Matmul, RowSliceAndGetRowFollowTheScaleGrid) {
  std::mt19937 rng(3);
  const Fp8Matrix w = random_matrix(200, 160, 128, 64, rng);
  const MatView slice = row_slice(w.view(), 100, 80);
  std::vector<float> row(160);
  for (int64_t r = 0; r < 80; ++r) {
    get_row(slice, r, row.data());
    for (int64_t c = 0; c < 160; ++c) ASSERT_FLOAT_EQ(row[c], (float)w.value(100 + r, c)) << r << "," << c;
  }
  ThreadPool pool(2);
  std::vector<uint8_t> scratch;
  const auto x = random_floats(160 * 5, rng);
  std::vector<float> y_full(5 * 200), y_slice(5 * 80);
  matmul(pool, w.view(), x.data(), 5, y_full.data(), scratch);
  matmul(pool, slice, x.data(), 5, y_slice.data(), scratch);
  for (int t = 0; t < 5; ++t)
    for (int r = 0; r < 80; ++r) EXPECT_FLOAT_EQ(y_slice[t * 80 + r], y_full[t * 200 + 100 + r]);
}

TEST(Fp8Matmul, WithoutScalesIsAnErrorNotGarbage) {
  std::mt19937 rng(5);
  Fp8Matrix w = random_matrix(16, 32, 128, 128, rng);
  MatView v = w.view();
  v.block_scale = nullptr;
  ThreadPool pool(1);
  std::vector<uint8_t> scratch;
  std::vector<float> x(32, 1.0f), y(16);
  EXPECT_THROW(matmul(pool, v, x.data(), 1, y.data(), scratch), std::exception);
}

}  // namespace
