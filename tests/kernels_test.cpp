// Tests of the quant formats and kernel tables: traits rows, quantize ->
// dequantize error per type, and every compiled-in SIMD table against the
// scalar reference (vec_dot, gemm_tile, quantize, dequantize) on awkward
// sizes. Also checks fp16.h's scalar conversions against F16C on x86.
#include <gtest/gtest.h>

#include <algorithm>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace spool {
namespace {

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                           DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q2_K,
                           DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K,
                           DType::MXFP4};
// The low-bit types (IQ1-IQ4, TQ, Q1_0/Q2_0): their quantizers are
// nearest-point searches whose error iq_types_test.cpp bounds against ggml's;
// here their SIMD kernels are checked against the reference like the rest.
const DType kLowBitTypes[] = {DType::IQ1_S,   DType::IQ1_M,  DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                              DType::IQ3_XXS, DType::IQ3_S,  DType::IQ4_NL,  DType::IQ4_XS, DType::TQ1_0,
                              DType::TQ2_0,   DType::Q1_0,   DType::Q2_0};
std::vector<DType> every_type() {
  std::vector<DType> v(std::begin(kAllTypes), std::end(kAllTypes));
  v.insert(v.end(), std::begin(kLowBitTypes), std::end(kLowBitTypes));
  return v;
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  // A few outliers, as real weights and activations have.
  for (int64_t i = 0; i < n; i += 97) v[i] *= 4.0f;
  return v;
}

std::vector<uint8_t> quantize_with(const KernelTable& k, DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, (int64_t)x.size()));
  k[t].quantize(x.data(), q.data(), (int64_t)x.size());
  return q;
}

std::vector<float> dequantize_with(const KernelTable& k, DType t, const std::vector<uint8_t>& q,
                                   int64_t n) {
  std::vector<float> x(n);
  k[t].dequantize(q.data(), x.data(), n);
  return x;
}

// Elements in `blocks` blocks; float types count blocks of 32 so their
// lengths are as awkward as the quantized ones'.
int64_t test_len(DType t, int blocks) { return (int64_t)std::max(dtype_traits(t).block_size, 32) * blocks; }

const KernelTable& ref() { return *kernels_for(Isa::Scalar); }

TEST(DType, TraitsRows) {
  EXPECT_EQ(dtype_traits(DType::Q4_0).block_bytes, 18u);
  EXPECT_EQ(dtype_traits(DType::Q4_K).block_size, 256);
  EXPECT_EQ(dtype_traits(DType::Q6_K).block_bytes, 210u);
  EXPECT_EQ(dtype_traits(DType::Q4_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(dtype_traits(DType::Q5_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(dtype_traits(DType::Q3_K).vec_dot_type, DType::Q8_K);
  EXPECT_EQ(dtype_traits(DType::F16).vec_dot_type, DType::F32);
  EXPECT_EQ(find_dtype_traits(4), nullptr);  // Q4_2, long gone
  EXPECT_EQ(find_dtype_traits(1000), nullptr);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_FALSE(dtype_from_name("Q4_K_M").has_value());
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  for (DType t : kAllTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
}

TEST(Kernels, TablesAreComplete) {
  const auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas[0], Isa::Scalar);
  for (Isa isa : isas) {
    const KernelTable* k = kernels_for(isa);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->isa, isa);
    for (DType t : every_type()) {
      EXPECT_NE((*k)[t].quantize, nullptr) << isa_name(isa) << " " << dtype_name(t);
      EXPECT_NE((*k)[t].dequantize, nullptr);
      EXPECT_NE((*k)[t].vec_dot, nullptr);
      EXPECT_NE((*k)[t].gemm_tile, nullptr);
    }
  }
  std::printf("ISAs tested:");
  for (Isa isa : isas) std::printf(" %s", isa_name(isa));
  std::printf("; kernels(): %s\n", isa_name(kernels().isa));
}

// RMS error of quantize -> dequantize relative to the RMS of the input.
double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double)(x[i] - y[i]) * (x[i] - y[i]);
    s += (double)x[i] * x[i];
  }
  return std::sqrt(e / s);
}

double round_trip_bound(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 5e-4;
    case DType::BF16: return 4e-3;
    case DType::Q8_0: case DType::Q8_1: case DType::Q8_K: return 0.012;
    case DType::Q6_K: return 0.03;
    case DType::Q5_0: case DType::Q5_1: case DType::Q5_K: return 0.06;
    case DType::Q4_0: case DType::Q4_1: case DType::Q4_K: return 0.13;
    case DType::Q3_K: case DType::MXFP4: return 0.25;
    case DType::Q2_K: return 0.5;
    default: return 0;
  }
}

TEST(Kernels, RoundTripErrorPerType) {
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : kAllTypes) {
      const int64_t n = test_len(t, 6);
      const auto x = random_floats(n, 1 + (uint32_t)t);
      const auto y = dequantize_with(k, t, quantize_with(k, t, x), n);
      const double err = relative_rmse(x, y);
      EXPECT_LE(err, round_trip_bound(t)) << isa_name(isa) << " " << dtype_name(t);
      if (isa == Isa::Scalar) std::printf("round trip %-5s rel rmse %.5f\n", dtype_name(t), err);
    }
  }
}

TEST(Kernels, ZeroAndConstantBlocks) {
  for (DType t : kAllTypes) {
    const int64_t n = test_len(t, 2);
    std::vector<float> zero(n, 0.0f), cst(n, 0.75f);
    EXPECT_LE(relative_rmse(cst, dequantize_with(ref(), t, quantize_with(ref(), t, cst), n)),
              round_trip_bound(t) + 1e-6) << dtype_name(t);
    const auto z = dequantize_with(ref(), t, quantize_with(ref(), t, zero), n);
    for (float v : z) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// SIMD quantizers of the activation types may round differently from the
// reference at exact ties, never by more than one step; Q8_1's s and Q8_K's
// bsums must agree with their own qs.
TEST(Kernels, SimdQuantizeMatchesReference) {
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16, DType::BF16}) {
      for (int blocks : {1, 3, 7}) {
        const int64_t n = test_len(t, blocks);
        const auto x = random_floats(n, 50 + blocks);
        const auto qs = quantize_with(k, t, x), qr = quantize_with(ref(), t, x);
        const auto ys = dequantize_with(ref(), t, qs, n), yr = dequantize_with(ref(), t, qr, n);
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(ys[i], yr[i], amax / 127 * 1.01f) << isa_name(isa) << dtype_name(t) << i;
        }
        if (t == DType::Q8_1) {
          auto* b = reinterpret_cast<const BlockQ8_1*>(qs.data());
          for (int i = 0; i < blocks; ++i) {
            int sum = 0;
            for (int j = 0; j < kQK; ++j) sum += b[i].qs[j];
            EXPECT_NEAR(fp16_to_fp32(b[i].s), fp16_to_fp32(b[i].d) * sum,
                        std::fabs(fp16_to_fp32(b[i].s)) * 2e-3 + 1e-6);
          }
        }
        if (t == DType::Q8_K) {
          auto* b = reinterpret_cast<const BlockQ8_K*>(qs.data());
          for (int i = 0; i < blocks; ++i) {
            for (int j = 0; j < 16; ++j) {
              int sum = 0;
              for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * j + l];
              ASSERT_EQ(b[i].bsums[j], sum);
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, SimdDequantizeMatchesReference) {
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : every_type()) {
      const int64_t n = test_len(t, 5);
      const auto q = quantize_with(ref(), t, random_floats(n, 7));
      const auto ys = dequantize_with(k, t, q, n), yr = dequantize_with(ref(), t, q, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(ys[i], yr[i], 1e-6f * std::fabs(yr[i]) + 1e-30f) << isa_name(isa) << dtype_name(t);
      }
    }
  }
}

// Inputs for a dot test: weight rows in type t, activation rows in its
// vec_dot_type (both quantized by the reference), and sum|w||a| per pair as
// the scale for the tolerance.
struct DotCase {
  int64_t n;
  DType t, vdt;
  std::vector<std::vector<uint8_t>> w, a;
  std::vector<std::vector<float>> wf, af;
  double magnitude(int i, int j) const {
    double s = 0;
    for (int64_t l = 0; l < n; ++l) s += std::fabs((double)wf[i][l] * af[j][l]);
    return s;
  }
};

DotCase make_case(DType t, int64_t n, int n_w, int n_a, uint32_t seed) {
  DotCase c{n, t, dtype_traits(t).vec_dot_type, {}, {}, {}, {}};
  for (int i = 0; i < n_w; ++i) {
    c.w.push_back(quantize_with(ref(), t, random_floats(n, seed + i)));
    c.wf.push_back(dequantize_with(ref(), t, c.w.back(), n));
  }
  for (int j = 0; j < n_a; ++j) {
    c.a.push_back(quantize_with(ref(), c.vdt, random_floats(n, seed + 1000 + j, 3.0f)));
    c.af.push_back(dequantize_with(ref(), c.vdt, c.a.back(), n));
  }
  return c;
}

TEST(Kernels, VecDotMatchesReference) {
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : every_type()) {
      for (int blocks : {1, 2, 3, 7, 8, 9, 13}) {
        const int64_t n = test_len(t, blocks);
        const DotCase c = make_case(t, n, 2, 2, 100 + blocks);
        for (int i = 0; i < 2; ++i) {
          const float got = k[t].vec_dot(n, c.w[i].data(), c.a[i].data());
          const float want = ref()[t].vec_dot(n, c.w[i].data(), c.a[i].data());
          // The reference must also be the dot of the dequantized rows.
          double exact = 0;
          for (int64_t l = 0; l < n; ++l) exact += (double)c.wf[i][l] * c.af[i][l];
          const double tol = 1e-4 * c.magnitude(i, i) + 1e-6;
          EXPECT_NEAR(got, want, tol) << isa_name(isa) << " " << dtype_name(t) << " n=" << n;
          EXPECT_NEAR(want, exact, 2e-3 * c.magnitude(i, i) + 1e-6) << dtype_name(t);
        }
      }
    }
  }
}

TEST(Kernels, GemmTileMatchesVecDot) {
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : every_type()) {
      const int64_t n = test_len(t, 3);
      const DotCase c = make_case(t, n, 11, 9, 300);
      const size_t ws = c.w[0].size(), as = c.a[0].size();
      std::vector<uint8_t> w(ws * 11), a(as * 9);
      for (int i = 0; i < 11; ++i) std::memcpy(w.data() + i * ws, c.w[i].data(), ws);
      for (int j = 0; j < 9; ++j) std::memcpy(a.data() + j * as, c.a[j].data(), as);
      for (auto [nr, nc] : {std::pair{1, 1}, {4, 4}, {11, 9}, {5, 3}, {8, 1}, {1, 7}, {9, 8}}) {
        const size_t ldc = 13;
        std::vector<float> out(ldc * nc, -12345.0f);
        k[t].gemm_tile(n, w.data(), ws, nr, a.data(), as, nc, out.data(), ldc);
        for (int j = 0; j < nc; ++j) {
          for (int i = 0; i < nr; ++i) {
            const float want = ref()[t].vec_dot(n, c.w[i].data(), c.a[j].data());
            EXPECT_NEAR(out[j * ldc + i], want, 1e-4 * c.magnitude(i, j) + 1e-6)
                << isa_name(isa) << " " << dtype_name(t) << " tile " << nr << "x" << nc;
          }
          for (size_t i = nr; i < ldc; ++i) ASSERT_EQ(out[j * ldc + i], -12345.0f);
        }
      }
    }
  }
}

// Instruction-count probe of one table's gemm_tile (run under a qemu
// instruction counter; the difference of two runs with different
// SPOOL_PROBE_REPS is the cost of the extra calls): SPOOL_PROBE_TYPE (IQ2_XXS),
// SPOOL_PROBE_ISA (the best table; "scalar": the reference vec_dot under the
// generic tile, what a SIMD table without a kernel for the type runs),
// SPOOL_PROBE_ROWS (256) x SPOOL_PROBE_COLS (4096) weights of random bytes
// against SPOOL_PROBE_TOKENS (1) activation rows.
TEST(Kernels, DISABLED_GemmTileInstructionCountProbe) {
  auto env = [](const char* name, const char* dflt) {
    const char* v = std::getenv(name);
    return std::string(v && *v ? v : dflt);
  };
  const int reps = std::atoi(env("SPOOL_PROBE_REPS", "1").c_str());
  const int nr = std::atoi(env("SPOOL_PROBE_ROWS", "256").c_str()), nc = std::atoi(env("SPOOL_PROBE_TOKENS", "1").c_str());
  const int64_t n = std::atoi(env("SPOOL_PROBE_COLS", "4096").c_str());
  DType t = DType::IQ2_XXS;
  for (DType u : every_type())
    if (env("SPOOL_PROBE_TYPE", "IQ2_XXS") == dtype_name(u)) t = u;
  const KernelTable& k = env("SPOOL_PROBE_ISA", "best") == "scalar" ? ref() : kernels();
  const DType at = dtype_traits(t).vec_dot_type;
  const size_t ws = row_bytes(t, n), as = row_bytes(at, n);
  std::vector<uint8_t> w(ws * nr), a(as * nc);
  std::mt19937 rng(5);
  for (auto& b : w) b = (uint8_t)rng();
  const auto xf = random_floats(n * nc, 2);
  for (int j = 0; j < nc; ++j) ref()[at].quantize(xf.data() + j * n, a.data() + j * as, n);
  std::vector<float> out((size_t)nr * nc);
  for (int i = 0; i < reps; ++i) k[t].gemm_tile(n, w.data(), ws, nr, a.data(), as, nc, out.data(), nr);
  std::printf("probe: %s %s %d calls of %d rows x %lld x %d tokens\n", isa_name(k.isa), dtype_name(t), reps, nr,
              (long long)n, nc);
}

// ---- fp16.h against the hardware --------------------------------------------

std::vector<float> fp16_probe_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                          INFINITY, -INFINITY, NAN, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f,
                          6.09e-5f, 1e-10f, 3.0e-8f, -4.5e-6f};
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) v.push_back(fp32_from_bits(rng()));  // all exponents
  std::uniform_real_distribution<float> small(-7e-5f, 7e-5f);            // subnormal range
  for (int i = 0; i < 50000; ++i) v.push_back(small(rng));
  return v;
}

TEST(Fp16, BitsRoundTripAllHalfValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32((uint16_t)h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Fp16, Bf16Rounding) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808000)), 0x3f80);  // tie to even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f818000)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_fp32(0x4049), fp32_from_bits(0x40490000));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_to_fp16(float f) {
  return (uint16_t)_cvtss_sh(f, 0);
}
__attribute__((target("f16c"))) float hw_from_fp16(uint16_t h) { return _cvtsh_ss(h); }

// CPUID leaf 1, ECX bit 29 (clang 14, used by the sanitizer builds, has no "f16c" for __builtin_cpu_supports).
bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

TEST(Fp16, MatchesF16C) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C";
  for (float f : fp16_probe_values()) {
    const uint16_t want = hw_to_fp16(f);
    const uint16_t got = fp32_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(fp16_to_fp32(got)));
      continue;
    }
    ASSERT_EQ(got, want) << "f=" << f << " bits=" << std::hex << fp32_to_bits(f);
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = hw_from_fp16((uint16_t)h), got = fp16_to_fp32((uint16_t)h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got));
      continue;
    }
    ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(want)) << std::hex << h;
  }
}
#endif

}  // namespace
}  // namespace spool
