// avx512 kernels (placeholder while the SIMD paths are written): fills nothing,
// so the table falls back to the scalar reference.
#include "core/kernels_impl.h"

namespace spool::detail {
void fill_avx512_kernels(KernelTable&) {}
}  // namespace spool::detail
