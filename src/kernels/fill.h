// Internal to the kernel library: how kernels.cpp reaches the reference
// (ref/) and each instruction set's files (x86/, neon/). Each fill_* function
// sets the entries it implements and leaves the rest null; kernels.cpp fills
// the gaps from the reference. A fill writes into its table and nothing else:
// a kernel that needs another (an activation quantizer, a fallback gemm)
// names it at compile time, never through state set while tables are built.
#pragma once

#include "kernels/kernels.h"

namespace spool::detail {

void fill_ref_float_kernels(KernelTable& t);   // ref/float_legacy.cpp: F32, F16, BF16
void fill_ref_legacy_kernels(KernelTable& t);  // ref/float_legacy.cpp: Q4_0 .. Q8_1
void fill_ref_kquant_kernels(KernelTable& t);  // ref/kquant.cpp: Q2_K .. Q8_K
void fill_ref_fp8_kernels(KernelTable& t);     // ref/fp8.cpp: F8_E4M3
void fill_ref_mxfp4_kernels(KernelTable& t);   // ref/mxfp4.cpp: MXFP4
// ref/iq.cpp: dequantize and vec_dot of IQ1_S .. IQ4_XS, TQ1_0, TQ2_0, Q1_0, Q2_0
void fill_ref_iq_kernels(KernelTable& t);
void fill_ref_iq_quantizers(KernelTable& t);   // ref/iq_quant.cpp: their quantizers

#if defined(SPOOL_X86)
void fill_avx2_kernels(KernelTable& t);    // x86/table_avx2.cpp
void fill_avx512_kernels(KernelTable& t);  // x86/table_avx512.cpp
void fill_fp8_avx2_kernels(KernelTable& t);    // x86/fp8_avx2.cpp
void fill_fp8_avx512_kernels(KernelTable& t);  // x86/fp8_avx512.cpp
void fill_mxfp4_avx2_kernels(KernelTable& t);    // x86/mxfp4_avx2.cpp
void fill_mxfp4_avx512_kernels(KernelTable& t);  // x86/mxfp4_avx512.cpp
// On top of a complete AVX-512 table: AMX tile gemm for packed prefill.
void fill_packed_amx_kernels(KernelTable& t);  // x86/packed_legacy_amx.cpp
void fill_packed_kquant_amx_kernels(KernelTable& t);  // x86/packed_kquant_amx.cpp
#endif
#if defined(SPOOL_ARM64)
void fill_neon_kernels(KernelTable& t);  // neon/table.cpp
#endif

inline int nearest_int(float f) { return (int)__builtin_lrintf(f); }

}  // namespace spool::detail
