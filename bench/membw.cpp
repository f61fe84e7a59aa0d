// Memory read bandwidth of this machine, as resident decode sees it: T
// threads each stream their own slice of one large buffer (on transparent
// huge pages, as spool's packed weights are), summing 64-bit words so the
// compiler vectorises the loop with whatever the build targets. Prints the
// best of several passes in GB/s (1e9 bytes/s), as text or JSON. Used by
// bench/compare_llamacpp.sh to put decode speed beside the physical limit
// (weight bytes per token x tok/s / GB/s).
//
// usage: spool_membw [--threads T] [--mib M] [--passes P] [--json]
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Sums the words of p, one cache line per step, 16-byte loads (SSE2, every
// x86-64 has it; other targets vectorise the plain loop), with a software
// prefetch kAhead bytes on, as spool's packed kernels do: the hardware
// prefetcher alone leaves a core short of what it can stream.
uint64_t sum_words(const uint64_t* p, size_t n) {
  constexpr size_t kAhead = 2048 / 8;
  size_t i = 0;
#if defined(__SSE2__)
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + i + kAhead);
    a = _mm_add_epi64(a, _mm_load_si128((const __m128i*)(p + i)));
    b = _mm_add_epi64(b, _mm_load_si128((const __m128i*)(p + i + 2)));
    c = _mm_add_epi64(c, _mm_load_si128((const __m128i*)(p + i + 4)));
    d = _mm_add_epi64(d, _mm_load_si128((const __m128i*)(p + i + 6)));
  }
  alignas(16) uint64_t lanes[2];
  _mm_store_si128((__m128i*)lanes, _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d)));
  uint64_t sum = lanes[0] + lanes[1];
#else
  uint64_t sum = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + i + kAhead);
    for (int k = 0; k < 8; ++k) sum += p[i + k];
  }
#endif
  for (; i < n; ++i) sum += p[i];
  return sum;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "spool_membw: %s\nusage: spool_membw [--threads T] [--mib M] [--passes P] [--json]\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, passes = 5;
  size_t mib = 1024;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(next());
    else if (a == "--mib") mib = std::strtoull(next(), nullptr, 10);
    else if (a == "--passes") passes = std::atoi(next());
    else if (a == "--json") json = true;
    else usage(("unknown argument " + a).c_str());
  }
  if (threads < 1 || passes < 1 || mib < 16) usage("threads and passes must be >= 1, mib >= 16");
  const size_t bytes = mib << 20, n_words = bytes / 8;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) usage("cannot map the buffer");
  madvise(mem, bytes, MADV_HUGEPAGE);
  auto* words = static_cast<uint64_t*>(mem);
  for (size_t i = 0; i < n_words; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page

  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    const size_t per = n_words / threads;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        sink.fetch_add(sum_words(words + t * per, per), std::memory_order_relaxed);
      });
    }
    while (ready.load() < threads) {
    }
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, (double)(per * threads * 8) / s / 1e9);
  }
  if (json) {
    std::printf("{\"threads\": %d, \"mib\": %zu, \"passes\": %d, \"read_gb_s\": %.2f, \"checksum\": %llu}\n", threads,
                mib, passes, best, (unsigned long long)(sink.load() & 0xFF));
  } else {
    std::printf("read bandwidth, %d threads, %zu MiB buffer, best of %d: %.2f GB/s\n", threads, mib, passes, best);
  }
  munmap(mem, bytes);
  return 0;
}
