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

uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains: the loop is bound by loads, not adds
  size_t i = 0;
  for (; i + 4 <= n; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
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
