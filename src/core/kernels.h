// Kernel dispatch: one table of function pointers per instruction set, chosen
// once at start-up from what the CPU reports. Every entry has a scalar
// reference (kernels_ref.cpp); SIMD tables (kernels_avx2.cpp, kernels_avx512.cpp,
// kernels_neon.cpp) may leave entries null, which then fall back to the
// reference. Tests compare every compiled-in table against the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace spool {

enum class Isa { Scalar, Avx2, Avx512, Neon };
const char* isa_name(Isa isa);

// Converts a float row to a type (activations to the weight's vec_dot_type;
// also every weight type, for synth and tests). n: multiple of block size.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// Expands a row of a type to floats.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// Dot product of a weight row (type T) with an activation row already in
// T's vec_dot_type. n elements.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Tile of dot products: c[j * ldc + i] = dot(w row i, a row j) for i < nr,
// j < nc. Rows of w are w_stride bytes apart, rows of a a_stride bytes apart.
// A SIMD implementation keeps several weight rows and activation rows in
// registers at once; this is what makes batched prefill fast.
using GemmTileFn = void (*)(int64_t n, const void* w, size_t w_stride, int nr,
                            const void* a, size_t a_stride, int nc, float* c, size_t ldc);

struct TypeKernels {
  QuantizeRowFn quantize = nullptr;
  DequantizeRowFn dequantize = nullptr;
  VecDotFn vec_dot = nullptr;
  GemmTileFn gemm_tile = nullptr;
};

struct KernelTable {
  Isa isa = Isa::Scalar;
  TypeKernels types[32];  // indexed by (uint32_t)DType; BF16 = 30 fits
  const TypeKernels& operator[](DType t) const { return types[(uint32_t)t]; }
};

// Table for the best instruction set this CPU supports (built once).
const KernelTable& kernels();
// Table for a specific instruction set, complete (null entries filled from
// the reference); nullptr if not compiled in or not supported by this CPU.
const KernelTable* kernels_for(Isa isa);
// All instruction sets usable on this machine, Scalar first.
std::vector<Isa> available_isas();

// Convenience wrappers through kernels().
void quantize_row(DType t, const float* src, void* dst, int64_t n);
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace spool
