// MXFP4 (ggml type 39): blocks decoded by hand from the format's definition
// (e2m1 values x 2^(e - 127)), every ISA's dequantize and Q8_0 dot against the
// scalar reference on 1..7 blocks, and the GGUF type id mapping. The generic
// round-trip / table checks are in kernels_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant_blocks.h"
#include "kernels/kernels.h"

using namespace spool;

namespace {

TEST(Mxfp4, TypeRowAndGgufId) {
  const DTypeTraits* tr = find_dtype_traits(39);
  ASSERT_NE(tr, nullptr);
  EXPECT_STREQ(tr->name, "MXFP4");
  EXPECT_EQ(tr->block_size, 32);
  EXPECT_EQ(tr->block_bytes, 17u);
  EXPECT_EQ(tr->vec_dot_type, DType::Q8_0);
  EXPECT_EQ(find_dtype_traits((uint32_t)DType::F8_E4M3), nullptr);  // spool-only ids are not GGUF types
}

// e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
float e2m1(int nib) {
  const int s = nib >> 3, e = (nib >> 1) & 3, m = nib & 1;
  const float v = e == 0 ? m * 0.5f : std::ldexp(1.0f + m * 0.5f, e - 1);
  return s ? -v : v;
}

TEST(Mxfp4, DecodesByTheDefinition) {
  std::mt19937 rng(1);
  for (int e : {0, 1, 100, 127, 128, 130, 254}) {
    BlockMXFP4 b;
    b.e = (uint8_t)e;
    for (auto& q : b.qs) q = (uint8_t)rng();
    for (Isa isa : available_isas()) {
      float out[32];
      (*kernels_for(isa))[DType::MXFP4].dequantize(&b, out, 32);
      for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], e2m1(b.qs[j] & 0xF) * std::ldexp(1.0f, e - 127)) << isa_name(isa) << " e=" << e;
        EXPECT_EQ(out[j + 16], e2m1(b.qs[j] >> 4) * std::ldexp(1.0f, e - 127)) << isa_name(isa) << " e=" << e;
      }
    }
  }
}

TEST(Mxfp4, DotMatchesReferenceOnEveryIsa) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  const KernelTable& ref = *kernels_for(Isa::Scalar);
  for (int blocks : {1, 2, 3, 7}) {
    const int64_t n = 32 * blocks;
    std::vector<float> w(n), a(n);
    for (auto& v : w) v = u(rng) * 0.1f;
    for (auto& v : a) v = u(rng);
    std::vector<uint8_t> wq(blocks * sizeof(BlockMXFP4)), aq(blocks * sizeof(BlockQ8_0));
    ref[DType::MXFP4].quantize(w.data(), wq.data(), n);
    ref[DType::Q8_0].quantize(a.data(), aq.data(), n);
    std::vector<float> wd(n), ad(n);
    ref[DType::MXFP4].dequantize(wq.data(), wd.data(), n);
    ref[DType::Q8_0].dequantize(aq.data(), ad.data(), n);
    double exact = 0, bound = 0;
    for (int64_t i = 0; i < n; ++i) exact += (double)wd[i] * ad[i], bound += std::fabs((double)wd[i] * ad[i]);
    const float want = ref[DType::MXFP4].vec_dot(n, wq.data(), aq.data());
    EXPECT_NEAR(want, exact, 1e-6 * bound);  // integer sums, one rounding per block
    for (Isa isa : available_isas())
      EXPECT_NEAR((*kernels_for(isa))[DType::MXFP4].vec_dot(n, wq.data(), aq.data()), want, 1e-6 * bound)
          << isa_name(isa) << " blocks " << blocks;
  }
}

}  // namespace
