// Shared by the NEON kernel files (neon/*.cpp, compiled with
// -march=armv8.2-a+dotprod+fp16): scalar half conversions through the FPU,
// the table's Q8 quantizers, and the driver that covers an nr x nc gemm tile
// with R x C micro-tiles. A kernel is a struct with
// `template <int R, int C> static void tile(...)`.
#pragma once

#include <arm_neon.h>

#include <cstring>

#include "kernels/fill.h"

namespace spool::detail {

void fill_neon_float_kernels(KernelTable& t);   // neon/float.cpp
void fill_neon_legacy_kernels(KernelTable& t);  // neon/legacy.cpp
void fill_neon_kquant_kernels(KernelTable& t);  // neon/kquant.cpp
void fill_neon_iq_kernels(KernelTable& t);      // neon/iq.cpp: the low-bit types against Q8_K
void fill_neon_iq_q8_0_kernels(KernelTable& t); // neon/iq_q8_0.cpp: IQ4_NL, Q1_0, Q2_0

// The NEON table's Q8 quantizers (neon/table.cpp): its entries for Q8_0,
// Q8_1 and Q8_K, and what the packed kernels convert activations with,
// calling them by name.
namespace neon {
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
}  // namespace neon

inline float neon_h2f(uint16_t h) {
  __fp16 x;
  std::memcpy(&x, &h, 2);
  return (float)x;
}
inline uint16_t neon_f2h(float f) {
  const __fp16 x = (__fp16)f;  // round to nearest even, as fp32_to_fp16
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

// Loops over tile rows, tile columns and registers have compile-time trip
// counts; unrolled, their accumulators stay in registers instead of memory.
#if defined(__clang__)
#define SPOOL_UNROLL _Pragma("unroll")
#else
#define SPOOL_UNROLL _Pragma("GCC unroll 16")
#endif

// One micro-tile: R weight rows from w (w_stride apart) against C activation
// rows from a (a_stride apart); writes c[j * ldc + i].
#define SPOOL_NEON_TILE_ARGS                                                              \
  int64_t n, const uint8_t *w, size_t w_stride, const uint8_t *a, size_t a_stride, float *c, \
      size_t ldc

// Covers nr x nc with R x C micro-tiles; leftover rows and columns go
// through 1-wide tiles. Columns outside, so a decode step (nc == 1) runs
// an R1 x 1 tile over all rows (with one activation row there are
// registers for more weight rows).
template <class K, int R, int C, int R1 = R>
void neon_gemm(int64_t n, const void* w, size_t w_stride, int nr, const void* a,
               size_t a_stride, int nc, float* c, size_t ldc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  int j = 0;
  for (; j + C <= nc; j += C) {
    int i = 0;
    for (; i + R <= nr; i += R) {
      K::template tile<R, C>(n, wb + i * w_stride, w_stride, ab + j * a_stride, a_stride,
                             c + j * ldc + i, ldc);
    }
    for (; i < nr; ++i) {
      K::template tile<1, C>(n, wb + i * w_stride, w_stride, ab + j * a_stride, a_stride,
                             c + j * ldc + i, ldc);
    }
  }
  for (; j < nc; ++j) {
    int i = 0;
    for (; i + R1 <= nr; i += R1) {
      K::template tile<R1, 1>(n, wb + i * w_stride, w_stride, ab + j * a_stride, a_stride,
                             c + j * ldc + i, ldc);
    }
    for (; i < nr; ++i) {
      K::template tile<1, 1>(n, wb + i * w_stride, w_stride, ab + j * a_stride, a_stride,
                             c + j * ldc + i, ldc);
    }
  }
}

// vec_dot as a 1 x 1 tile.
template <class K>
float neon_vec_dot(int64_t n, const void* w, const void* a) {
  float out;
  K::template tile<1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0,
                         &out, 1);
  return out;
}

template <class K, int R, int C, int R1 = R>
void neon_set(KernelTable& t, DType type) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.vec_dot = neon_vec_dot<K>;
  k.gemm_tile = neon_gemm<K, R, C, R1>;
}

}  // namespace spool::detail
