// alloc_huge: see huge_alloc.h.
#include "core/huge_alloc.h"

#include <sys/mman.h>

namespace spool {

void* alloc_huge(size_t bytes) {
  constexpr size_t kHuge = 2u << 20;
  if (bytes < kHuge) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* buf = std::aligned_alloc(kHuge, size);
#ifdef MADV_HUGEPAGE
  if (buf) madvise(buf, size, MADV_HUGEPAGE);
#endif
  return buf;
}

}  // namespace spool
