// Internal to the kernel library: how kernels.cpp reaches the per-ISA
// translation units. Each fill_* function sets the entries it implements and
// leaves the rest null; kernels.cpp fills the gaps from the reference.
#pragma once

#include "kernels/kernels.h"

namespace spool::detail {

void fill_ref_float_kernels(KernelTable& t);   // kernels_ref.cpp: F32, F16, BF16
void fill_ref_legacy_kernels(KernelTable& t);  // kernels_ref.cpp: Q4_0 .. Q8_1
void fill_ref_kquant_kernels(KernelTable& t);  // kernels_ref_kquant.cpp: Q2_K .. Q8_K
void fill_ref_fp8_kernels(KernelTable& t);     // kernels_fp8.cpp: F8_E4M3
void fill_ref_mxfp4_kernels(KernelTable& t);   // kernels_mxfp4.cpp: MXFP4

#if defined(SPOOL_X86)
void fill_avx2_kernels(KernelTable& t);    // kernels_avx2.cpp
void fill_avx512_kernels(KernelTable& t);  // kernels_avx512.cpp
void fill_fp8_avx2_kernels(KernelTable& t);    // kernels_fp8_avx2.cpp
void fill_fp8_avx512_kernels(KernelTable& t);  // kernels_fp8_avx512.cpp
void fill_mxfp4_avx2_kernels(KernelTable& t);    // kernels_mxfp4_avx2.cpp
void fill_mxfp4_avx512_kernels(KernelTable& t);  // kernels_mxfp4_avx512.cpp
// On top of a complete AVX-512 table: AMX tile gemm for packed prefill.
void fill_packed_amx_kernels(KernelTable& t);  // kernels_packed_amx.cpp
void fill_packed_kquant_amx_kernels(KernelTable& t);  // kernels_packed_kquant_amx.cpp
#endif
#if defined(SPOOL_ARM64)
void fill_neon_kernels(KernelTable& t);  // kernels_neon.cpp
#endif

inline int nearest_int(float f) { return (int)__builtin_lrintf(f); }

}  // namespace spool::detail
