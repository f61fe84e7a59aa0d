// The libFuzzer binary (build-asan/fuzz/spool_fuzz, built with -DSPOOL_FUZZ=ON):
// one binary for every target, picked by $SPOOL_FUZZ_TARGET (fuzz/fuzz_targets.h),
// so a device bundle carries one executable instead of eight.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fuzz_targets.h"

namespace {
spool::fuzz::Entry g_entry = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* name = std::getenv("SPOOL_FUZZ_TARGET");
  for (const spool::fuzz::Target& t : spool::fuzz::targets())
    if (name && std::strcmp(name, t.name) == 0) g_entry = t.entry;
  if (!g_entry) {
    std::fprintf(stderr, "error: set SPOOL_FUZZ_TARGET to one of:");
    for (const spool::fuzz::Target& t : spool::fuzz::targets()) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return g_entry(data, size); }
