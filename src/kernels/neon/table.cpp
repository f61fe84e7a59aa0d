// The NEON kernel table (ARMv8.2 with dotprod and fp16): the Q8 quantizers
// (Q8_0, Q8_1, Q8_K; neon::quantize_q8_*, common.h) live here; float, legacy
// K-quant and low-bit kernels in neon/{float,legacy,kquant,iq,iq_q8_0}.cpp, the packed ones in
// neon/packed_*.cpp. Rounding is round-to-nearest-even (fcvtns), as the
// reference's nearbyint / lrintf.
#include <cmath>
#include <cstdlib>

#if defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "core/quant_blocks.h"
#include "kernels/neon/common.h"

namespace spool::detail {

void fill_rows_neon_kernels(KernelTable& t);  // neon/rows.cpp

namespace {

// Rounds 16 floats times `scale` to int8 (saturating) and returns them, with
// their int32 sum in *sum when asked.
inline int8x16_t round16(const float* x, float scale, int32x4_t* sum) {
  int32x4_t q[4];
  SPOOL_UNROLL for (int k = 0; k < 4; ++k) q[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4 * k), scale));
  if (sum) *sum = vaddq_s32(*sum, vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
  const int16x8_t h0 = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
  const int16x8_t h1 = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
  return vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
}

inline float absmax(const float* x, int n) {
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int k = 0; k < n; k += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + k)));
  return vmaxvq_f32(m);
}

// The element of largest magnitude with its sign; on a tie between +m and
// -m the first one wins, as in the reference.
float signed_absmax_256(const float* x) {
  float32x4_t mx = vld1q_f32(x), mn = mx;
  for (int k = 4; k < kQKK; k += 4) {
    const float32x4_t v = vld1q_f32(x + k);
    mx = vmaxq_f32(mx, v);
    mn = vminq_f32(mn, v);
  }
  const float hi = vmaxvq_f32(mx), lo = vminvq_f32(mn);
  if (hi > -lo) return hi;
  if (-lo > hi) return lo;
  for (int k = 0; k < kQKK; ++k) {
    if (std::fabs(x[k]) == hi) return x[k];
  }
  return hi;
}

}  // namespace

namespace neon {

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = absmax(x, kQK) / 127.0f, id = d ? 1.0f / d : 0.0f;
    y[i].d = neon_f2h(d);
    vst1q_s8(y[i].qs, round16(x, id, nullptr));
    vst1q_s8(y[i].qs + 16, round16(x + 16, id, nullptr));
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = absmax(x, kQK) / 127.0f, id = d ? 1.0f / d : 0.0f;
    int32x4_t sum = vdupq_n_s32(0);
    vst1q_s8(y[i].qs, round16(x, id, &sum));
    vst1q_s8(y[i].qs + 16, round16(x + 16, id, &sum));
    y[i].d = neon_f2h(d);
    y[i].s = neon_f2h(d * (float)vaddvq_s32(sum));
  }
}

void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    const float max = signed_absmax_256(x);
    if (max == 0) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK / 16; ++j) {
      const int8x16_t q = round16(x + 16 * j, iscale, nullptr);
      vst1q_s8(y[i].qs + 16 * j, q);
      y[i].bsums[j] = vaddlvq_s8(q);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace neon

void fill_packed_neon_kernels(KernelTable& t);  // neon/packed_legacy.cpp
void fill_packed_i8mm_neon_kernels(KernelTable& t);  // neon/packed_legacy_i8mm.cpp

namespace {

// FEAT_I8MM (SMMLA, ARMv8.6; Cortex-A710 / X2 and later, Apple M2 / A15 and
// later). SPOOL_NO_I8MM=1 turns it off, to measure or test the dotprod
// tiles on such a CPU.
bool cpu_has_i8mm() {
  const char* off = std::getenv("SPOOL_NO_I8MM");
  if (off && *off && *off != '0') return false;
#if defined(__linux__) && defined(HWCAP2_I8MM)
  return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#elif defined(__APPLE__)
  int value = 0;
  size_t size = sizeof value;
  return sysctlbyname("hw.optional.arm.FEAT_I8MM", &value, &size, nullptr, 0) == 0 && value != 0;
#else
  return false;
#endif
}

}  // namespace

void fill_neon_kernels(KernelTable& t) {
  fill_neon_float_kernels(t);
  fill_neon_legacy_kernels(t);
  fill_neon_kquant_kernels(t);
  fill_neon_iq_kernels(t);
  fill_neon_iq_q8_0_kernels(t);
  fill_rows_neon_kernels(t);  // attention's float row kernels
  // The Q8 quantizers, which the packed kernels also call by name.
  t.types[(uint32_t)DType::Q8_0].quantize = neon::quantize_q8_0;
  t.types[(uint32_t)DType::Q8_1].quantize = neon::quantize_q8_1;
  t.types[(uint32_t)DType::Q8_K].quantize = neon::quantize_q8_k;
  fill_packed_neon_kernels(t);
  // SMMLA tiles for calls of 2+ tokens over the same packed layouts (1-token
  // calls keep the dotprod tiles); only where the CPU executes them.
  if (cpu_has_i8mm()) fill_packed_i8mm_neon_kernels(t);
}

}  // namespace spool::detail
