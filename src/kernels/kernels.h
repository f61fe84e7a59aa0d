// Kernel dispatch: one table of function pointers per instruction set, chosen
// once at start-up from what the CPU reports. Every entry has a scalar
// reference (kernels/ref/); SIMD tables (x86/table_avx2.cpp,
// x86/table_avx512.cpp, neon/table.cpp) may leave entries null, which then
// fall back to the reference. Tests compare every compiled-in table against
// the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace spool {

// Ordered by capability within an architecture: SPOOL_ISA=<name> caps the
// choice at that level. Amx is Avx512 plus AMX int8 tiles for packed prefill.
enum class Isa { Scalar, Avx2, Avx512, Amx, Neon };
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

// Optional packed path for a weight type (rows == 0: none, and matmul uses
// gemm_tile). A weight matrix is repacked once at load into groups of `rows`
// interleaved rows (the last group padded), so a micro-kernel streams one
// contiguous buffer and broadcasts activations; activations are converted
// by quantize_act into the kernel's own row format. The arithmetic equals
// vec_dot against vec_dot_type (same activation quantization), which is the
// reference the tests compare with.
struct PackedKernels {
  int rows = 0;  // rows per interleaved group
  // Bytes of the packed form of n_rows x n_cols (rows rounded up to groups).
  size_t (*packed_bytes)(int64_t n_rows, int64_t n_cols) = nullptr;
  // Packs n_rows rows (w_stride bytes apart, original layout) into out.
  void (*pack)(const void* w, size_t w_stride, int64_t n_rows, int64_t n_cols, void* out) = nullptr;
  size_t (*act_bytes)(int64_t n_cols) = nullptr;  // one converted activation row
  void (*quantize_act)(const float* x, void* out, int64_t n_cols) = nullptr;
  // c[t * ldc + r] = dot(row r, activation t) for r < n_rows, t < n_tokens;
  // w points at the first group, activation rows are act_stride bytes apart.
  void (*gemm)(int64_t n_cols, const void* w, int64_t n_rows, const void* act, size_t act_stride,
               int64_t n_tokens, float* c, size_t ldc) = nullptr;
};

// Block-scaled weights (F8_E4M3): a row of n codes whose element i is scaled
// by scales[i / block] (the last block may be shorter); activations stay
// float. The matrix's block shape and scale grid live in MatView.
struct ScaledKernels {
  // sum over i < n of value(w[i]) * scales[i / block] * a[i]
  float (*dot)(int64_t n, const void* w, const float* scales, int64_t block, const float* a) = nullptr;
  // out[i] = value(w[i]) * scales[i / block]
  void (*dequantize)(int64_t n, const void* w, const float* scales, int64_t block, float* out) = nullptr;
};

struct TypeKernels {
  QuantizeRowFn quantize = nullptr;
  DequantizeRowFn dequantize = nullptr;
  VecDotFn vec_dot = nullptr;
  GemmTileFn gemm_tile = nullptr;
  PackedKernels packed;  // optional; never filled from the reference
  ScaledKernels scaled;  // block-scaled types only
};

// Float kernels over rows stride floats apart (attention over cached K/V).
struct RowKernels {
  // out[p] = dot(q, k + p * stride) over d elements, for p < n.
  void (*dot_rows)(int64_t d, const float* q, const float* k, size_t stride, int64_t n, float* out) = nullptr;
  // out[i] += sum over p < n of w[p] * v[p * stride + i], for i < d.
  void (*axpy_rows)(int64_t d, const float* w, const float* v, size_t stride, int64_t n, float* out) = nullptr;
  // x[i] = exp(x[i] - max); returns the sum of the new x[i].
  float (*exp_sum)(float* x, int64_t n, float max) = nullptr;
  // g[i] = silu(g[i]) * u[i] (the SwiGLU feed-forward's gate).
  void (*swiglu)(float* g, const float* u, int64_t n) = nullptr;
  // Several queries against the same rows (the query heads sharing one KV
  // head), each row read once: out[h * out_stride + p] = dot(q + h * d,
  // k + p * stride) for h < n_q, p < n.
  void (*dot_rows_multi)(int64_t d, const float* q, int n_q, const float* k, size_t stride, int64_t n, float* out,
                         size_t out_stride) = nullptr;
  // out[h * d + i] += sum over p < n of w[h * w_stride + p] * v[p * stride + i],
  // for h < n_q, i < d.
  void (*axpy_rows_multi)(int64_t d, const float* w, size_t w_stride, int n_q, const float* v, size_t stride,
                          int64_t n, float* out) = nullptr;
  // The same two over F16 rows (an F16 KV cache).
  void (*dot_rows_multi_f16)(int64_t d, const float* q, int n_q, const uint16_t* k, size_t stride, int64_t n,
                             float* out, size_t out_stride) = nullptr;
  void (*axpy_rows_multi_f16)(int64_t d, const float* w, size_t w_stride, int n_q, const uint16_t* v,
                              size_t stride, int64_t n, float* out) = nullptr;
};

struct KernelTable {
  Isa isa = Isa::Scalar;
  TypeKernels types[kNumDTypeIds];  // indexed by (uint32_t)DType
  RowKernels rows;        // filled from the reference where an ISA has none
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
