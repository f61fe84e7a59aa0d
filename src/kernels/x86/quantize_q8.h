// The Q8 row quantizers of the two x86 tables (Q8_0, Q8_1, Q8_K), one set
// per instruction set (quantize_q8_impl.h, compiled by quantize_q8_avx2.cpp
// and quantize_q8_avx512.cpp): each table's entries for those types point at
// its set, and its packed kernels convert activations by calling the same set
// by name, so nothing is looked up or stored while the tables are filled.
#pragma once

#include <cstdint>

namespace spool::detail {

namespace avx2 {
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
}  // namespace avx2

namespace avx512 {
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
}  // namespace avx512

}  // namespace spool::detail
