// Where model bytes come from: a random-access byte source with two backends,
// local files (O_DIRECT into aligned buffers, falling back to pread +
// posix_fadvise(DONTNEED) where the file system refuses O_DIRECT) and HTTP(S)
// `Range` requests (libcurl). The weight store decides what to read and into
// which buffer; a backend only moves bytes and counts them.
//
// Contract every backend keeps:
// - read() is blocking, thread-safe (several I/O threads may call it at once)
//   and issues the requests of one call in parallel where it can (io_uring
//   queue depth, parallel HTTP transfers). It returns when all are complete
//   and throws spool::Error naming the source, offset and cause on any failure
//   or short read (past end of file included).
// - With direct() true, offset, n and dst of every request must be multiples
//   of alignment() (the store allocates its arena that way); use
//   read_unaligned() for small reads at arbitrary places (headers).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace spool {

struct ReadRequest {
  uint64_t offset = 0;
  size_t n = 0;
  void* dst = nullptr;
};

struct StorageCounters {
  std::atomic<uint64_t> bytes{0};     // bytes delivered
  std::atomic<uint64_t> requests{0};  // requests completed
  std::atomic<uint64_t> wait_ns{0};   // wall time spent inside read() calls, summed over callers
};

struct StorageOptions {
  bool direct = true;       // bypass the page cache (local files)
  int queue_depth = 16;     // parallel requests per read() call
  int http_retries = 4;     // HTTP: attempts after the first, with exponential backoff
};

class Storage {
 public:
  virtual ~Storage() = default;
  virtual const std::string& name() const = 0;  // path or URL, for messages
  virtual uint64_t size() const = 0;
  virtual bool direct() const = 0;        // page cache bypassed
  virtual size_t alignment() const = 0;   // 1 when reads need no alignment
  virtual void read(std::span<const ReadRequest> reqs) = 0;
  // Any offset/length/buffer; small header reads. Same errors as read().
  virtual void read_unaligned(uint64_t offset, size_t n, void* dst) = 0;
  // Requests sent again after a transient failure (HTTP: 5xx, 429, dropped
  // connections, short bodies); 0 for backends that do not retry.
  virtual uint64_t retries() const { return 0; }
  const StorageCounters& counters() const { return counters_; }

 protected:
  StorageCounters counters_;
};

// A local path or an http:// / https:// URL.
std::unique_ptr<Storage> open_storage(const std::string& path_or_url, const StorageOptions& options = {});
bool is_url(const std::string& s);

}  // namespace spool
