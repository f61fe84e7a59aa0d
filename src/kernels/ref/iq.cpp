// Scalar reference of the low-bit GGUF types: dequantization and the dot
// products with the activation types (Q8_K, Q8_0), written once over each
// format's unpack() (ref/iq_unpack.h).
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/ref/iq_unpack.h"
#include "kernels/fill.h"

namespace spool {

namespace {

using namespace detail::iq;

template <class F>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const typename F::Block*>(src);
  int8_t q[F::kBlock];
  float s[F::kBlock / F::kGroup];
  for (int64_t i = 0; i < n / F::kBlock; ++i) {
    F::unpack(x[i], q, s);
    for (int j = 0; j < F::kBlock; ++j) dst[i * F::kBlock + j] = s[j / F::kGroup] * (float)q[j];
  }
}

// Against Q8_K activations (blocks of 256, one float scale): per group an
// integer sum, scaled by the group's weight scale; per block by the activation's.
template <class F>
float vec_dot_q8_k(int64_t n, const void* w, const void* a) {
  static_assert(F::kBlock == kQKK);
  const auto* x = static_cast<const typename F::Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK];
  float s[kQKK / F::kGroup];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    F::unpack(x[i], q, s);
    float block = 0;
    for (int g = 0; g < kQKK / F::kGroup; ++g) {
      int32_t isum = 0;
      for (int j = g * F::kGroup; j < (g + 1) * F::kGroup; ++j) isum += (int32_t)q[j] * y[i].qs[j];
      block += s[g] * (float)isum;
    }
    sum += y[i].d * block;
  }
  return sum;
}

// Against Q8_0 activations (blocks of 32, fp16 scales): the weight's groups
// are whole multiples of 32 here (IQ4_NL 32, Q2_0 64, Q1_0 128).
template <class F>
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  static_assert(F::kGroup % kQK == 0 && F::kBlock == F::kGroup);
  const auto* x = static_cast<const typename F::Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  int8_t q[F::kBlock];
  float s[1];
  float sum = 0;
  for (int64_t i = 0; i < n / F::kBlock; ++i) {
    F::unpack(x[i], q, s);
    for (int c = 0; c < F::kBlock / kQK; ++c) {
      const BlockQ8_0& yb = y[i * (F::kBlock / kQK) + c];
      int32_t isum = 0;
      for (int j = 0; j < kQK; ++j) isum += (int32_t)q[c * kQK + j] * yb.qs[j];
      sum += s[0] * fp16_to_fp32(yb.d) * (float)isum;
    }
  }
  return sum;
}

template <class F>
void set_q8_k(KernelTable& t, DType type) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.dequantize = dequantize<F>;
  k.vec_dot = vec_dot_q8_k<F>;
}

template <class F>
void set_q8_0(KernelTable& t, DType type) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.dequantize = dequantize<F>;
  k.vec_dot = vec_dot_q8_0<F>;
}

}  // namespace

namespace detail {

void fill_ref_iq_kernels(KernelTable& t) {
  set_q8_k<IQ2_XXS>(t, DType::IQ2_XXS);
  set_q8_k<IQ2_XS>(t, DType::IQ2_XS);
  set_q8_k<IQ2_S>(t, DType::IQ2_S);
  set_q8_k<IQ3_XXS>(t, DType::IQ3_XXS);
  set_q8_k<IQ3_S>(t, DType::IQ3_S);
  set_q8_k<IQ1_S>(t, DType::IQ1_S);
  set_q8_k<IQ1_M>(t, DType::IQ1_M);
  set_q8_k<IQ4_XS>(t, DType::IQ4_XS);
  set_q8_k<TQ1_0>(t, DType::TQ1_0);
  set_q8_k<TQ2_0>(t, DType::TQ2_0);
  set_q8_0<IQ4_NL>(t, DType::IQ4_NL);
  set_q8_0<Q1_0>(t, DType::Q1_0);
  set_q8_0<Q2_0>(t, DType::Q2_0);
}

}  // namespace detail
}  // namespace spool
