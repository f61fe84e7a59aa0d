// The avx2 kernel table. AVX2 + FMA + F16C: u8 x s8 dots through maddubs/madd; 16 vector registers,
// so 2x4 legacy tiles and 2x2 K-quant tiles for the unpacked layout; repacked weights (8 rows
// interleaved) for Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K / MXFP4, and attention's row kernels.
// The unpacked kernels live in x86/unpacked_*impl.h, shared with the other x86 table.
#define SPOOL_VNNI 0
#define SPOOL_TILE_R 2
#define SPOOL_TILE_C 4
#define SPOOL_KTILE_R 2
#define SPOOL_KTILE_C 2
#include "kernels/x86/quantize_q8.h"
#include "kernels/x86/unpacked_gemm_impl.h"

namespace spool::detail {

void fill_packed_legacy_avx2_kernels(KernelTable& t);  // x86/packed_legacy_avx2.cpp
void fill_packed_kquant_avx2_kernels(KernelTable& t);  // x86/packed_kquant_avx2.cpp
void fill_packed_q5k_avx2_kernels(KernelTable& t);     // x86/packed_q5k_avx2.cpp
void fill_packed_mxfp4_avx2_kernels(KernelTable& t);   // x86/packed_mxfp4_avx2.cpp
void fill_rows_avx2_kernels(KernelTable& t);           // x86/rows_avx2.cpp
void fill_iq_avx2_kernels(KernelTable& t);            // x86/iq_avx2.cpp

void fill_avx2_kernels(KernelTable& t) {
  fill_x86_table(t);
  // The Q8 quantizers, which the packed kernels below also call by name.
  t.types[(uint32_t)DType::Q8_0].quantize = avx2::quantize_q8_0;
  t.types[(uint32_t)DType::Q8_1].quantize = avx2::quantize_q8_1;
  t.types[(uint32_t)DType::Q8_K].quantize = avx2::quantize_q8_k;
  fill_packed_legacy_avx2_kernels(t);  // repacked-weight gemm for Q4_0 / Q8_0
  fill_packed_kquant_avx2_kernels(t);  // and for Q4_K / Q6_K
  fill_packed_q5k_avx2_kernels(t);     // and for Q5_K
  fill_packed_mxfp4_avx2_kernels(t);   // and for MXFP4
  fill_rows_avx2_kernels(t);           // attention's float row kernels
  fill_iq_avx2_kernels(t);  // the low-bit IQ / TQ types against Q8_K
}

}  // namespace spool::detail
