// The avx512 table's kernels of the low-bit types (x86/iq_impl.h, iq_gemm_impl.h and
// x86/iq_q8_0_impl.h compiled with the avx512 flags).
#define SPOOL_X86_ISA avx512
#include "kernels/x86/iq_gemm_impl.h"
#include "kernels/x86/iq_q8_0_impl.h"

namespace spool::detail {

void fill_iq_avx512_kernels(KernelTable& t) {
  avx512::fill_iq_kernels(t);
  avx512::fill_iq_q8_0_kernels(t);
}

}  // namespace spool::detail
