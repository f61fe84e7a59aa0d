// Builds the kernel dispatch tables: asks the CPU what it supports, lets each
// compiled-in instruction set fill what it implements, and fills every gap
// from the scalar reference (gemm tiles from the table's own vec_dot). The
// environment variable SPOOL_ISA (scalar, avx2, avx512, amx, neon) caps the
// choice, for benchmarks and for checking a slower path on a faster machine
// (SPOOL_ISA=avx512 on an AMX host: AVX-512 VNNI without the AMX tiles).
#include "kernels/kernels.h"

#include <strings.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "kernels/fill.h"

#if defined(SPOOL_X86)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#if defined(SPOOL_ARM64) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#if defined(SPOOL_ARM64) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace spool {
namespace {

constexpr int kNumIsa = 5;

#if defined(SPOOL_X86)
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

// AMX tile data is an opt-in state component on Linux: the process must ask
// for it (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before its
// first tile instruction, or that instruction faults. The permission is
// process-wide, so asking once here covers the pool's threads.
bool amx_permitted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// The OS must also save the wide registers (XCR0), or using them faults.
bool cpu_supports(Isa isa) {
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave) return false;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17);
  const bool avx512bw = b & (1u << 30), avx512vl = b & (1u << 31), vnni = c & (1u << 11);
  const bool has_avx2 = ymm_ok && avx2 && fma && f16c && bmi2;
  if (isa == Isa::Avx2) return has_avx2;
  const bool has_avx512 = has_avx2 && zmm_ok && avx512f && avx512dq && avx512bw && avx512vl && vnni;
  if (isa == Isa::Avx512) return has_avx512;
  if (isa == Isa::Amx) {
    const bool amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
    const bool tiles_ok = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA
    return has_avx512 && amx_tile && amx_int8 && tiles_ok && amx_permitted();
  }
  return false;
}
#elif defined(SPOOL_ARM64)
// The NEON kernels use the dot-product instructions (ARMv8.2 dotprod).
bool cpu_supports(Isa isa) {
  if (isa != Isa::Neon) return false;
#if defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
  int value = 0;
  size_t size = sizeof value;
  if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &value, &size, nullptr, 0) != 0) return false;
  return value != 0;
#else
  return false;
#endif
}
#else
bool cpu_supports(Isa) { return false; }
#endif

KernelTable* g_tables[kNumIsa] = {};

// Fallback tile for types without a SIMD tile: the table's own vec_dot over
// every (weight row, activation row) pair.
template <int kIsa, int kType>
void gemm_by_vec_dot(int64_t n, const void* w, size_t w_stride, int nr, const void* a,
                     size_t a_stride, int nc, float* c, size_t ldc) {
  const VecDotFn dot = g_tables[kIsa]->types[kType].vec_dot;
  for (int j = 0; j < nc; ++j) {
    const auto* aj = static_cast<const uint8_t*>(a) + j * a_stride;
    for (int i = 0; i < nr; ++i) {
      c[j * ldc + i] = dot(n, static_cast<const uint8_t*>(w) + i * w_stride, aj);
    }
  }
}

template <int kIsa, size_t... kTypes>
constexpr std::array<GemmTileFn, sizeof...(kTypes)> generic_gemms(std::index_sequence<kTypes...>) {
  return {&gemm_by_vec_dot<kIsa, (int)kTypes>...};
}

template <int kIsa>
GemmTileFn generic_gemm(int type) {
  static constexpr auto kTable = generic_gemms<kIsa>(std::make_index_sequence<kNumDTypeIds>());
  return kTable[type];
}

GemmTileFn generic_gemm_for(Isa isa, int type) {
  switch (isa) {
    case Isa::Scalar: return generic_gemm<0>(type);
    case Isa::Avx2: return generic_gemm<1>(type);
    case Isa::Avx512: return generic_gemm<2>(type);
    case Isa::Amx: return generic_gemm<3>(type);
    case Isa::Neon: return generic_gemm<4>(type);
  }
  return nullptr;
}

void fill_simd(Isa isa, KernelTable& t) {
#if defined(SPOOL_X86)
  if (isa == Isa::Avx2) detail::fill_avx2_kernels(t), detail::fill_fp8_avx2_kernels(t), detail::fill_mxfp4_avx2_kernels(t);
  if (isa == Isa::Avx512 || isa == Isa::Amx)
    detail::fill_avx512_kernels(t), detail::fill_fp8_avx512_kernels(t), detail::fill_mxfp4_avx512_kernels(t);
  if (isa == Isa::Amx) detail::fill_packed_amx_kernels(t), detail::fill_packed_kquant_amx_kernels(t);
#endif
#if defined(SPOOL_ARM64)
  if (isa == Isa::Neon) detail::fill_neon_kernels(t);
#endif
}

KernelTable* build_table(Isa isa) {
  KernelTable ref;
  detail::fill_ref_float_kernels(ref);
  detail::fill_ref_legacy_kernels(ref);
  detail::fill_ref_kquant_kernels(ref);
  detail::fill_ref_fp8_kernels(ref);
  detail::fill_ref_mxfp4_kernels(ref);
  detail::fill_ref_iq_kernels(ref);
  detail::fill_ref_iq_quantizers(ref);
  auto* t = new KernelTable();
  t->isa = isa;
  if (isa != Isa::Scalar) fill_simd(isa, *t);
  for (int i = 0; i < (int)kNumDTypeIds; ++i) {
    TypeKernels& k = t->types[i];
    const TypeKernels& r = ref.types[i];
    if (!k.scaled.dot) k.scaled.dot = r.scaled.dot;
    if (!k.scaled.dequantize) k.scaled.dequantize = r.scaled.dequantize;
    if (!k.quantize) k.quantize = r.quantize;
    if (!k.dequantize) k.dequantize = r.dequantize;
    if (!k.vec_dot) k.vec_dot = r.vec_dot;
    if (!k.gemm_tile && k.vec_dot) k.gemm_tile = generic_gemm_for(isa, i);
  }
  if (!t->rows.dot_rows) t->rows.dot_rows = ref.rows.dot_rows;
  if (!t->rows.axpy_rows) t->rows.axpy_rows = ref.rows.axpy_rows;
  if (!t->rows.exp_sum) t->rows.exp_sum = ref.rows.exp_sum;
  if (!t->rows.swiglu) t->rows.swiglu = ref.rows.swiglu;
  if (!t->rows.dot_rows_multi) t->rows.dot_rows_multi = ref.rows.dot_rows_multi;
  if (!t->rows.axpy_rows_multi) t->rows.axpy_rows_multi = ref.rows.axpy_rows_multi;
  if (!t->rows.dot_rows_multi_f16) t->rows.dot_rows_multi_f16 = ref.rows.dot_rows_multi_f16;
  if (!t->rows.axpy_rows_multi_f16) t->rows.axpy_rows_multi_f16 = ref.rows.axpy_rows_multi_f16;
  return t;
}

bool isa_compiled_in(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
#if defined(SPOOL_X86)
    case Isa::Avx2:
    case Isa::Avx512:
    case Isa::Amx: return true;
#endif
#if defined(SPOOL_ARM64)
    case Isa::Neon: return true;
#endif
    default: return false;
  }
}

void build_all() {
  for (int i = 0; i < kNumIsa; ++i) {
    const Isa isa = (Isa)i;
    if (isa == Isa::Scalar || (isa_compiled_in(isa) && cpu_supports(isa))) {
      g_tables[i] = build_table(isa);
    }
  }
}

void ensure_built() {
  static std::once_flag once;
  std::call_once(once, build_all);
}

// Best available ISA, capped by SPOOL_ISA when set.
const KernelTable* choose_best() {
  const char* cap = std::getenv("SPOOL_ISA");
  for (int i = kNumIsa - 1; i >= 0; --i) {
    if (!g_tables[i]) continue;
    if (cap && *cap) {
      int cap_index = -1;
      for (int j = 0; j < kNumIsa; ++j) {
        if (strcasecmp(cap, isa_name((Isa)j)) == 0) cap_index = j;
      }
      if (cap_index >= 0 && i > cap_index) continue;
    }
    return g_tables[i];
  }
  return g_tables[0];
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Amx: return "amx";
    case Isa::Neon: return "neon";
  }
  return "?";
}

const KernelTable& kernels() {
  static const KernelTable* best = [] {
    ensure_built();
    return choose_best();
  }();
  return *best;
}

const KernelTable* kernels_for(Isa isa) {
  ensure_built();
  const int i = (int)isa;
  return (i >= 0 && i < kNumIsa) ? g_tables[i] : nullptr;
}

std::vector<Isa> available_isas() {
  ensure_built();
  std::vector<Isa> out;
  for (int i = 0; i < kNumIsa; ++i) {
    if (g_tables[i]) out.push_back((Isa)i);
  }
  return out;
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const QuantizeRowFn fn = kernels()[t].quantize;
  SPOOL_CHECK(fn != nullptr);
  fn(src, dst, n);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DequantizeRowFn fn = kernels()[t].dequantize;
  SPOOL_CHECK(fn != nullptr);
  fn(src, dst, n);
}

}  // namespace spool
