// The avx2 kernel table. AVX2 + FMA + F16C: u8 x s8 dots through maddubs/madd; 16 vector registers,
// so 2x4 legacy tiles and 2x2 K-quant tiles.
// The kernels themselves live in kernels_x86_*impl.h, shared with the other x86 table.
#define SPOOL_VNNI 0
#define SPOOL_TILE_R 2
#define SPOOL_TILE_C 4
#define SPOOL_KTILE_R 2
#define SPOOL_KTILE_C 2
#include "core/kernels_x86_gemm_impl.h"

namespace spool::detail {

void fill_avx2_kernels(KernelTable& t) { fill_x86_table(t); }

}  // namespace spool::detail
