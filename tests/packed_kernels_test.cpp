// The optional packed kernels (PackedKernels in kernels/kernels.h) of every table
// that has them: pack awkward row counts, convert activations with
// quantize_act, run gemm on token counts around the micro-tile, and compare
// with the scalar reference vec_dot on the same table's vec_dot_type
// quantization. Also matmul() with a packed copy against the unpacked path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quant_blocks.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace spool {
namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::Q4_0, DType::Q5_0, DType::Q8_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4, DType::IQ4_NL};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  for (int64_t i = 0; i < n; i += 97) v[i] *= 4.0f;  // outliers
  return v;
}

struct AlignedBytes {
  explicit AlignedBytes(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
  ~AlignedBytes() { std::free(p); }
  uint8_t* p;
};

std::vector<uint8_t> quantize_rows(const KernelTable& k, DType t, const std::vector<float>& x, int64_t n_cols) {
  const int64_t n_rows = (int64_t)x.size() / n_cols;
  std::vector<uint8_t> q(row_bytes(t, n_cols) * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) k[t].quantize(x.data() + r * n_cols, q.data() + r * row_bytes(t, n_cols), n_cols);
  return q;
}

void check_packed(Isa isa, DType t, int64_t n_cols, int64_t n_rows, int64_t n_tokens) {
  const KernelTable& k = *kernels_for(isa);
  const KernelTable& ref = *kernels_for(Isa::Scalar);
  const PackedKernels& pk = k[t].packed;
  const DType vdt = dtype_traits(t).vec_dot_type;
  const auto wf = random_floats(n_cols * n_rows, 1), xf = random_floats(n_cols * n_tokens, 2);
  const auto wq = quantize_rows(ref, t, wf, n_cols);
  const auto aq = quantize_rows(k, vdt, xf, n_cols);  // what quantize_act quantizes to
  AlignedBytes packed(pk.packed_bytes(n_rows, n_cols));
  pk.pack(wq.data(), row_bytes(t, n_cols), n_rows, n_cols, packed.p);
  const size_t as = pk.act_bytes(n_cols);
  std::vector<uint8_t> act(as * n_tokens);
  for (int64_t j = 0; j < n_tokens; ++j) pk.quantize_act(xf.data() + j * n_cols, act.data() + j * as, n_cols);
  const size_t ldc = n_rows + 3;
  std::vector<float> out(ldc * n_tokens, -12345.0f);
  pk.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, out.data(), ldc);
  for (int64_t j = 0; j < n_tokens; ++j) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* wr = wq.data() + r * row_bytes(t, n_cols);
      const uint8_t* ar = aq.data() + j * row_bytes(vdt, n_cols);
      const float want = ref[t].vec_dot(n_cols, wr, ar);
      float mag = 0;
      for (int64_t c = 0; c < n_cols; ++c) mag += std::fabs(wf[r * n_cols + c] * xf[j * n_cols + c]);
      ASSERT_NEAR(out[j * ldc + r], want, 1e-4 * mag + 1e-5)
          << isa_name(isa) << " " << dtype_name(t) << " rows " << n_rows << " token " << j << " row " << r;
    }
    for (size_t r = n_rows; r < ldc; ++r) ASSERT_EQ(out[j * ldc + r], -12345.0f);
  }
}

TEST(PackedKernels, MatchReferenceVecDot) {
  int n_checked = 0;
  for (Isa isa : available_isas()) {
    for (DType t : kTypes) {
      const PackedKernels& pk = kernels_for(isa)->types[(uint32_t)t].packed;
      if (pk.rows == 0) continue;
      ASSERT_TRUE(pk.packed_bytes && pk.pack && pk.act_bytes && pk.quantize_act && pk.gemm);
      const int64_t n_cols = dtype_traits(t).block_size == 256 ? 768 : 96;
      for (int64_t n_rows : {1, 16, 37, 50}) {
        for (int64_t n_tokens : {1, 3, 8, 9, 17}) check_packed(isa, t, n_cols, n_rows, n_tokens);
      }
      ++n_checked;
    }
  }
  if (n_checked == 0) GTEST_SKIP() << "no packed kernels on this machine";
}

// Longer rows for the K-quants (several super-blocks per row, an odd count
// included) than the 768 columns above.
TEST(PackedKernels, LongKQuantRows) {
  for (Isa isa : available_isas()) {
    for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      if (kernels_for(isa)->types[(uint32_t)t].packed.rows == 0) continue;
      for (int64_t n_cols : {2048, 2816}) {
        for (int64_t n_tokens : {1, 5}) check_packed(isa, t, n_cols, 21, n_tokens);
      }
    }
  }
}

// Saturated weights (every Q4_K / Q5_K level 15 / 31 with scales and minimums
// 63, every Q6_K level 63 with scales 127 / -128) against activations of full
// magnitude, both signs: the widest intermediate sums of the packed kernels
// (AVX2 adds maddubs pairs in int16) must not overflow.
TEST(PackedKernels, SaturatedLevels) {
  const KernelTable& ref = *kernels_for(Isa::Scalar);
  const int64_t n_cols = 512, n_rows = 9, n_tokens = 2;
  for (Isa isa : available_isas()) {
    const KernelTable& k = *kernels_for(isa);
    for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      const PackedKernels& pk = k[t].packed;
      if (pk.rows == 0) continue;
      const size_t rb = row_bytes(t, n_cols);
      std::vector<uint8_t> w(rb * n_rows, 0xFF);
      const uint16_t one = 0x3C00;  // fp16 1.0
      const size_t block_bytes = t == DType::Q4_K   ? sizeof(BlockQ4_K)
                                 : t == DType::Q5_K ? sizeof(BlockQ5_K)
                                                    : sizeof(BlockQ6_K);
      for (size_t off = 0; off < w.size(); off += block_bytes) {
        if (t == DType::Q4_K) {
          auto* b = reinterpret_cast<BlockQ4_K*>(w.data() + off);
          b->d = b->dmin = one;
        } else if (t == DType::Q5_K) {
          auto* b = reinterpret_cast<BlockQ5_K*>(w.data() + off);
          b->d = b->dmin = one;
        } else {
          auto* b = reinterpret_cast<BlockQ6_K*>(w.data() + off);
          b->d = one;
          for (int s = 0; s < 16; ++s) b->scales[s] = (int8_t)(s % 2 ? -128 : 127);
        }
      }
      std::vector<float> x(n_cols * n_tokens);
      for (int64_t i = 0; i < n_cols; ++i) x[i] = 1.0f, x[n_cols + i] = -1.0f;
      const DType vdt = dtype_traits(t).vec_dot_type;
      const auto aq = quantize_rows(k, vdt, x, n_cols);
      AlignedBytes packed(pk.packed_bytes(n_rows, n_cols));
      pk.pack(w.data(), rb, n_rows, n_cols, packed.p);
      const size_t as = pk.act_bytes(n_cols);
      std::vector<uint8_t> act(as * n_tokens);
      for (int64_t j = 0; j < n_tokens; ++j) pk.quantize_act(x.data() + j * n_cols, act.data() + j * as, n_cols);
      std::vector<float> out(n_rows * n_tokens);
      pk.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, out.data(), n_rows);
      for (int64_t j = 0; j < n_tokens; ++j) {
        for (int64_t r = 0; r < n_rows; ++r) {
          const float want = ref[t].vec_dot(n_cols, w.data() + r * rb, aq.data() + j * row_bytes(vdt, n_cols));
          ASSERT_NEAR(out[j * n_rows + r], want, 1e-5 * std::fabs(want))
              << isa_name(isa) << " " << dtype_name(t) << " token " << j << " row " << r;
        }
      }
    }
  }
}

// The AMX table's tile gemm (prefill-sized calls; see kernels/x86/packed_legacy_amx.cpp
// and kernels/x86/packed_kquant_amx.cpp) on awkward shapes: row counts off the
// 16-row group, token counts around the 16-token tiles (full tiles, partial
// last tiles, the VNNI fallback below 16), real row lengths. Against the
// scalar reference, and bit for bit against the AVX-512 VNNI kernel it
// stands in for (batch invariance depends on it).
void check_amx_bitwise(const KernelTable& amx_table, DType t, int64_t n_cols, int64_t n_rows,
                       const std::vector<int64_t>& token_counts) {
  const PackedKernels& amx = amx_table.types[(uint32_t)t].packed;
  const PackedKernels& vnni = kernels_for(Isa::Avx512)->types[(uint32_t)t].packed;
  ASSERT_NE(amx.gemm, vnni.gemm) << dtype_name(t) << ": no tile kernel in this table";
  ASSERT_EQ(amx.packed_bytes(n_rows, n_cols), vnni.packed_bytes(n_rows, n_cols));
  const int64_t max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
  const auto wf = random_floats(n_cols * n_rows, 5), xf = random_floats(n_cols * max_tokens, 6);
  const auto wq = quantize_rows(*kernels_for(Isa::Scalar), t, wf, n_cols);
  AlignedBytes packed(amx.packed_bytes(n_rows, n_cols));
  amx.pack(wq.data(), row_bytes(t, n_cols), n_rows, n_cols, packed.p);
  const size_t as = amx.act_bytes(n_cols);
  std::vector<uint8_t> act(as * max_tokens);
  for (int64_t j = 0; j < max_tokens; ++j) amx.quantize_act(xf.data() + j * n_cols, act.data() + j * as, n_cols);
  for (int64_t n_tokens : token_counts) {
    const size_t ldc = n_rows + 5;
    std::vector<float> got(ldc * n_tokens, -1.0f), want(ldc * n_tokens, -1.0f);
    amx.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, got.data(), ldc);
    vnni.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, want.data(), ldc);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << dtype_name(t) << " " << n_cols << "x" << n_rows << " tokens " << n_tokens;
  }
}

std::vector<int64_t> token_range(int64_t first, int64_t last) {
  std::vector<int64_t> v;
  for (int64_t n = first; n <= last; ++n) v.push_back(n);
  return v;
}

const DType kAmxTypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};

TEST(PackedKernels, AmxTilesMatchReferenceAndVnni) {
  if (!kernels_for(Isa::Amx)) GTEST_SKIP() << "no AMX on this machine (AmxEmulatedTiles checks the kernels' logic)";
  for (DType t : kAmxTypes) {
    for (int64_t n_cols : {2048, 2816}) {
      for (int64_t n_rows : {37, 64}) check_amx_bitwise(*kernels_for(Isa::Amx), t, n_cols, n_rows, token_range(1, 70));
      for (int64_t n_tokens : {1, 15, 16, 17, 33, 70}) check_packed(Isa::Amx, t, n_cols, 37, n_tokens);
    }
  }
}

#if defined(SPOOL_HAVE_AMX_EMULATED)
}  // namespace
namespace detail::amx_emulated {
void fill_packed_amx_kernels(KernelTable& t);
void fill_packed_kquant_amx_kernels(KernelTable& t);
}  // namespace detail::amx_emulated
namespace {

// The same AMX kernels built over a C++ model of the tile registers
// (SPOOL_AMX_EMULATE, kernels/x86/amx.h), so their tiling, unpacking,
// padding and epilogues are checked on every AVX-512 machine; fewer shapes,
// as the model is slow.
TEST(PackedKernels, AmxEmulatedTilesMatchVnni) {
  if (!kernels_for(Isa::Avx512)) GTEST_SKIP() << "the tile kernels' epilogues need AVX-512";
  KernelTable emulated = *kernels_for(Isa::Avx512);
  detail::amx_emulated::fill_packed_amx_kernels(emulated);
  detail::amx_emulated::fill_packed_kquant_amx_kernels(emulated);
  for (DType t : kAmxTypes) {
    for (int64_t n_cols : {512, 2816}) {
      check_amx_bitwise(emulated, t, n_cols, 37, {1, 15, 16, 17, 31, 32, 33, 47});
    }
  }
}
#endif

TEST(PackedKernels, MatmulPackedMatchesUnpacked) {
  for (DType t : kTypes) {
    const int64_t n_cols = dtype_traits(t).block_size == 256 ? 512 : 128, n_rows = 83;
    const auto wf = random_floats(n_cols * n_rows, 3);
    const auto wq = quantize_rows(*kernels_for(Isa::Scalar), t, wf, n_cols);
    MatView w{t, wq.data(), n_cols, n_rows};
    const size_t bytes = packed_matrix_bytes(w);
    if (bytes == 0) continue;
    ThreadPool pool(2);
    AlignedBytes packed(bytes);
    pack_matrix(w, packed.p, &pool);
    MatView wp = w;
    wp.packed = packed.p;
    for (int64_t n_tokens : {1, 2, 7, 40}) {
      const auto x = random_floats(n_cols * n_tokens, 4);
      std::vector<float> y0(n_rows * n_tokens), y1(n_rows * n_tokens);
      std::vector<uint8_t> scratch;
      matmul(pool, w, x.data(), n_tokens, y0.data(), scratch);
      matmul(pool, wp, x.data(), n_tokens, y1.data(), scratch);
      for (size_t i = 0; i < y0.size(); ++i)
        ASSERT_NEAR(y1[i], y0[i], 1e-3 * (std::fabs(y0[i]) + 1.0)) << dtype_name(t) << " tokens " << n_tokens;
    }
  }
}

// NEON: calls of 2+ tokens may run other tiles than 1-token calls (SMMLA
// tiles where the CPU has FEAT_I8MM, kernels/neon/packed_legacy_i8mm.cpp; dotprod
// tiles of 8 tokens with partial tiles otherwise). Every token of a batched
// call must equal, bit for bit, the same token computed alone.
bool neon_i8mm_active() {
#if defined(__aarch64__) && defined(__linux__) && defined(HWCAP2_I8MM)
  const char* off = std::getenv("SPOOL_NO_I8MM");
  return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) && !(off && *off && *off != '0');
#else
  return false;
#endif
}

TEST(PackedKernels, NeonBatchedTokensMatchTokensAloneBitwise) {
  const KernelTable* k = kernels_for(Isa::Neon);
  if (!k) GTEST_SKIP() << "no NEON table on this machine";
  std::printf("neon packed tiles for 2+ tokens: %s\n", neon_i8mm_active() ? "i8mm" : "dotprod");
  for (DType t : kTypes) {
    const PackedKernels& pk = (*k)[t].packed;
    if (pk.rows == 0) continue;
    const int64_t n_cols = dtype_traits(t).block_size == 256 ? 768 : 1024, n_rows = 37, max_tokens = 19;
    const auto wf = random_floats(n_cols * n_rows, 8), xf = random_floats(n_cols * max_tokens, 9);
    const auto wq = quantize_rows(*kernels_for(Isa::Scalar), t, wf, n_cols);
    AlignedBytes packed(pk.packed_bytes(n_rows, n_cols));
    pk.pack(wq.data(), row_bytes(t, n_cols), n_rows, n_cols, packed.p);
    const size_t as = pk.act_bytes(n_cols), ldc = n_rows + 2;
    std::vector<uint8_t> act(as * max_tokens);
    for (int64_t j = 0; j < max_tokens; ++j) pk.quantize_act(xf.data() + j * n_cols, act.data() + j * as, n_cols);
    std::vector<float> alone(ldc * max_tokens, -1.0f);
    for (int64_t j = 0; j < max_tokens; ++j)
      pk.gemm(n_cols, packed.p, n_rows, act.data() + j * as, as, 1, alone.data() + j * ldc, ldc);
    for (int64_t n_tokens = 2; n_tokens <= max_tokens; ++n_tokens) {
      std::vector<float> got(ldc * n_tokens, -1.0f);
      pk.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, got.data(), ldc);
      ASSERT_EQ(std::memcmp(got.data(), alone.data(), got.size() * sizeof(float)), 0)
          << dtype_name(t) << " tokens " << n_tokens;
    }
  }
}

// Instruction-count probe (not a test; run under qemu with an instruction
// counting plugin, twice with different SPOOL_PROBE_REPS, and divide the
// difference): SPOOL_PROBE_REPS packed gemm calls of SPOOL_PROBE_TOKENS
// tokens on SPOOL_PROBE_ROWS (default 32) rows x 4096 columns of
// SPOOL_PROBE_TYPE (default Q4_0).
TEST(PackedKernels, DISABLED_InstructionCountProbe) {
  auto env = [](const char* name, const char* dflt) {
    const char* v = std::getenv(name);
    return std::string(v && *v ? v : dflt);
  };
  const int reps = std::atoi(env("SPOOL_PROBE_REPS", "1").c_str());
  const int64_t n_tokens = std::atoi(env("SPOOL_PROBE_TOKENS", "8").c_str()),
                n_rows = std::atoi(env("SPOOL_PROBE_ROWS", "32").c_str()), n_cols = 4096;
  DType t = DType::Q4_0;
  for (DType u : kTypes)
    if (env("SPOOL_PROBE_TYPE", "Q4_0") == dtype_name(u)) t = u;
  const PackedKernels& pk = kernels()[t].packed;
  ASSERT_GT(pk.rows, 0);
  const auto wf = random_floats(n_cols * n_rows, 1), xf = random_floats(n_cols * n_tokens, 2);
  const auto wq = quantize_rows(*kernels_for(Isa::Scalar), t, wf, n_cols);
  AlignedBytes packed(pk.packed_bytes(n_rows, n_cols));
  pk.pack(wq.data(), row_bytes(t, n_cols), n_rows, n_cols, packed.p);
  const size_t as = pk.act_bytes(n_cols);
  std::vector<uint8_t> act(as * n_tokens);
  for (int64_t j = 0; j < n_tokens; ++j) pk.quantize_act(xf.data() + j * n_cols, act.data() + j * as, n_cols);
  std::vector<float> out(n_rows * n_tokens);
  for (int i = 0; i < reps; ++i) pk.gemm(n_cols, packed.p, n_rows, act.data(), as, n_tokens, out.data(), n_rows);
  std::printf("probe: %s %d calls of %lld tokens\n", dtype_name(t), reps, (long long)n_tokens);
}

}  // namespace
}  // namespace spool
