// The avx512 kernel table. AVX-512 (F/BW/VL/DQ) + VNNI: dots through vpdpbusd on 256-bit vectors and
// 32 vector registers, so 4x4 legacy tiles and 4x2 K-quant tiles.
// The kernels themselves live in x86/unpacked_*impl.h, shared with the other x86 table.
#define SPOOL_VNNI 1
#define SPOOL_TILE_R 4
#define SPOOL_TILE_C 4
#define SPOOL_KTILE_R 4
#define SPOOL_KTILE_C 2
#include "kernels/x86/quantize_q8.h"
#include "kernels/x86/unpacked_gemm_impl.h"

namespace spool::detail {

void fill_legacy_avx512_kernels(KernelTable& t);  // x86/legacy_avx512.cpp
void fill_kquant_avx512_kernels(KernelTable& t);  // x86/kquant_avx512.cpp
void fill_packed_legacy_avx512_kernels(KernelTable& t);  // x86/packed_legacy_avx512.cpp
void fill_packed_kquant_avx512_kernels(KernelTable& t);  // x86/packed_kquant_avx512.cpp
void fill_packed_q5k_avx512_kernels(KernelTable& t);  // x86/packed_q5k_avx512.cpp
void fill_packed_mxfp4_avx512_kernels(KernelTable& t);  // x86/packed_mxfp4_avx512.cpp
void fill_rows_avx512_kernels(KernelTable& t);  // x86/rows_avx512.cpp
void fill_iq_avx512_kernels(KernelTable& t);  // x86/iq_avx512.cpp

void fill_avx512_kernels(KernelTable& t) {
  fill_x86_table(t);
  // The Q8 quantizers, which the packed kernels below (and the AMX tiles'
  // activations) also call by name.
  t.types[(uint32_t)DType::Q8_0].quantize = avx512::quantize_q8_0;
  t.types[(uint32_t)DType::Q8_1].quantize = avx512::quantize_q8_1;
  t.types[(uint32_t)DType::Q8_K].quantize = avx512::quantize_q8_k;
  fill_legacy_avx512_kernels(t);  // 512-bit Q4_0 / Q8_0 replace the 256-bit ones
  fill_kquant_avx512_kernels(t);  // and the 512-bit Q4_K tile
  fill_packed_legacy_avx512_kernels(t);  // repacked-weight gemm for Q4_0 / Q8_0
  fill_packed_kquant_avx512_kernels(t);  // and for Q4_K / Q6_K
  fill_packed_q5k_avx512_kernels(t);  // and for Q5_K
  fill_packed_mxfp4_avx512_kernels(t);  // and for MXFP4
  fill_rows_avx512_kernels(t);  // attention's float row kernels
  fill_iq_avx512_kernels(t);  // the low-bit IQ / TQ types against Q8_K
}

}  // namespace spool::detail
