// Large buffers on transparent huge pages. Weights and the KV cache are read
// in full every step; on 4 KiB pages that is a TLB miss every 4 KiB
// (expensive under virtualisation), and the usual "madvise" THP mode gives
// huge pages only to memory that asks for them. Buffers of 2 MiB or more are
// 2 MiB aligned and marked MADV_HUGEPAGE; smaller ones are 64-byte aligned.
// Memory is not touched here: pages appear on first use.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace spool {

// Returns nullptr when the allocation fails; release with std::free.
void* alloc_huge(size_t bytes);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using HugeArray = std::unique_ptr<T[], FreeDeleter>;

// An uninitialised array of n T on huge pages; throws std::bad_alloc on failure.
template <class T>
HugeArray<T> make_huge_array(size_t n) {
  void* p = alloc_huge(n * sizeof(T));
  if (!p) throw std::bad_alloc();
  return HugeArray<T>(static_cast<T*>(p));
}

}  // namespace spool
