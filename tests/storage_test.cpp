// Local Storage backend: exact bytes at aligned and unaligned ranges with
// O_DIRECT (batched through io_uring, more requests than the queue depth,
// several threads at once), the buffered fallback on tmpfs (/dev/shm), and
// clear errors for misaligned direct reads and reads past the end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "storage/storage.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

struct TempFile {
  fs::path dir, path;
  std::vector<uint8_t> bytes;
  TempFile(const std::string& base, size_t n) {
    std::string tmpl = base + "/spool_storage_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + base);
    dir = tmpl;
    path = dir / "data.bin";
    std::mt19937 rng(n);
    bytes.resize(n);
    for (auto& b : bytes) b = (uint8_t)rng();
    std::ofstream(path, std::ios::binary).write((const char*)bytes.data(), (std::streamsize)n);
  }
  ~TempFile() { fs::remove_all(dir); }
};

struct AlignedBuf {
  uint8_t* p;
  explicit AlignedBuf(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~AlignedBuf() { std::free(p); }
};

std::string tmp_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// Reads [offset, offset + n) the way the streaming store does: the aligned
// superset through read(), the part past the last whole block unaligned.
std::vector<uint8_t> read_range(Storage& s, uint64_t offset, size_t n) {
  const uint64_t a = s.alignment();
  const uint64_t lo = offset / a * a, hi = (offset + n + a - 1) / a * a;
  AlignedBuf buf(hi - lo + 4096);
  uint64_t direct_end = std::min<uint64_t>(hi, s.size() / a * a);
  if (direct_end > lo) s.read(std::vector<ReadRequest>{{lo, (size_t)(direct_end - lo), buf.p}});
  if (hi > direct_end) {
    const uint64_t from = std::max(lo, direct_end);
    s.read_unaligned(from, s.size() - from, buf.p + (from - lo));
  }
  return std::vector<uint8_t>(buf.p + (offset - lo), buf.p + (offset - lo) + n);
}

TEST(LocalStorage, DirectReadsExactBytesAtUnalignedRanges) {
  TempFile f(tmp_base(), (3u << 20) + 12345);  // ends off a block boundary
  auto s = open_storage(f.path.string());
  ASSERT_TRUE(s->direct()) << "the file system holding " << tmp_base() << " should accept O_DIRECT";
  ASSERT_GE(s->alignment(), 512u);
  EXPECT_EQ(s->size(), f.bytes.size());
  const std::pair<uint64_t, size_t> ranges[] = {{0, 1}, {1, 4095}, {4095, 2}, {100000, 1234567}, {777, 3u << 20},
                                                {f.bytes.size() - 5, 5}, {f.bytes.size() - 70000, 70000}};
  for (auto [off, n] : ranges) {
    const std::vector<uint8_t> got = read_range(*s, off, n);
    ASSERT_EQ(0, std::memcmp(got.data(), f.bytes.data() + off, n)) << "range " << off << "+" << n;
  }
  EXPECT_GT(s->counters().bytes.load(), 0u);
  EXPECT_GT(s->counters().requests.load(), 0u);
}

TEST(LocalStorage, ManyRequestsInOneCallBeyondQueueDepth) {
  TempFile f(tmp_base(), 8u << 20);
  StorageOptions o;
  o.queue_depth = 4;
  auto s = open_storage(f.path.string(), o);
  ASSERT_TRUE(s->direct());
  const size_t a = s->alignment();
  AlignedBuf buf(8u << 20);
  std::vector<ReadRequest> reqs;  // 3 MiB pieces split into 1 MiB chunks, interleaved with small ones, out of order
  uint64_t at = 0;
  for (uint64_t off : {5u << 20, 0u, 1u << 20, 4u << 20}) {
    const size_t n = off == (5u << 20) ? (3u << 20) : a * 7;
    reqs.push_back({off, n, buf.p + at});
    at += n;
  }
  const uint64_t before = s->counters().bytes;
  s->read(reqs);
  for (const ReadRequest& r : reqs)
    ASSERT_EQ(0, std::memcmp(r.dst, f.bytes.data() + r.offset, r.n)) << "offset " << r.offset;
  EXPECT_EQ(s->counters().bytes - before, at);
}

TEST(LocalStorage, ThreadsReadAtOnce) {
  TempFile f(tmp_base(), 4u << 20);
  auto s = open_storage(f.path.string());
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      int good = 1;
      for (int k = 0; k < 8; ++k) {
        const uint64_t off = (uint64_t)(t * 8 + k) * 100003 % (3u << 20);
        const std::vector<uint8_t> got = read_range(*s, off, 300000);
        good &= std::memcmp(got.data(), f.bytes.data() + off, got.size()) == 0;
      }
      ok[t] = good;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 1) << "thread " << t;
}

TEST(LocalStorage, TmpfsFallsBackToBufferedReads) {
  if (!fs::is_directory("/dev/shm")) GTEST_FAIL() << "/dev/shm is missing";
  TempFile f("/dev/shm", (1u << 20) + 333);
  auto s = open_storage(f.path.string());
  EXPECT_FALSE(s->direct()) << "tmpfs reports no direct-I/O alignment";
  EXPECT_EQ(s->alignment(), 1u);
  std::vector<uint8_t> a(5000), b(70001);
  s->read(std::vector<ReadRequest>{{3, a.size(), a.data()}, {f.bytes.size() - b.size(), b.size(), b.data()}});
  EXPECT_EQ(0, std::memcmp(a.data(), f.bytes.data() + 3, a.size()));
  EXPECT_EQ(0, std::memcmp(b.data(), f.bytes.data() + f.bytes.size() - b.size(), b.size()));
}

TEST(LocalStorage, BufferedWhenDirectIsOff) {
  TempFile f(tmp_base(), 100000);
  StorageOptions o;
  o.direct = false;
  auto s = open_storage(f.path.string(), o);
  EXPECT_FALSE(s->direct());
  std::vector<uint8_t> a(99);
  s->read(std::vector<ReadRequest>{{12345, a.size(), a.data()}});
  EXPECT_EQ(0, std::memcmp(a.data(), f.bytes.data() + 12345, a.size()));
}

TEST(LocalStorage, ClearErrors) {
  TempFile f(tmp_base(), 1u << 20);
  auto s = open_storage(f.path.string());
  ASSERT_TRUE(s->direct());
  AlignedBuf buf(1u << 21);
  try {
    s->read(std::vector<ReadRequest>{{1, 4096, buf.p}});
    FAIL() << "misaligned direct read accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not aligned"), std::string::npos) << e.what();
  }
  try {
    s->read(std::vector<ReadRequest>{{1u << 20, 4096, buf.p}});
    FAIL() << "read past the end accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past its end"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.path.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(s->read_unaligned((1u << 20) - 2, 3, buf.p), Error);
  EXPECT_THROW(open_storage(f.dir.string() + "/missing.bin"), Error);
  EXPECT_TRUE(is_url("https://example.com/m.gguf"));
  EXPECT_TRUE(is_url("http://127.0.0.1:8080/m.gguf"));
  EXPECT_FALSE(is_url("/models/http.gguf"));
}

}  // namespace
