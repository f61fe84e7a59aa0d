// The AVX-512 table's MXFP4 entries (x86/mxfp4_impl.h, with VNNI).
#include "kernels/x86/mxfp4_impl.h"

namespace spool::detail {

void fill_mxfp4_avx512_kernels(KernelTable& t) {
  TypeKernels& k = t.types[(uint32_t)DType::MXFP4];
  k.vec_dot = vec_dot_mxfp4_x86;
  k.dequantize = dequantize_mxfp4_x86;
}

}  // namespace spool::detail
