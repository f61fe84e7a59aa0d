// HTTP(S) backend of Storage: a remote file read with `Range: bytes=A-B`
// requests through libcurl. The size comes from a one-byte range probe (a
// server that answers it without 206 / Content-Range does not support ranges
// and is refused). One read() runs its requests in parallel on a curl multi
// handle (at most queue_depth transfers at once; requests larger than the
// chunk size are split), connections are kept alive and reused across calls
// (a pool of multi handles, one per concurrent caller), and connection errors,
// 5xx, 429 and short bodies are retried with exponential backoff. Requests go
// straight to where the last one was redirected (Hugging Face's resolve/ URLs
// redirect to a CDN), and back through the given URL if that target fails
// (signed URLs expire). Errors name the URL, the byte range and the HTTP
// status or curl error. HTTPS peers are verified against the system CAs (or
// $CURL_CA_BUNDLE).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/storage.h"

namespace spool {

struct HttpTuning {
  uint64_t chunk_bytes = 8u << 20;        // a request longer than this is split into ranges of this size
  uint64_t header_block_bytes = 1u << 20;  // read_unaligned fetches (and caches) aligned blocks of this size
  int header_blocks = 8;                   // how many such blocks are kept (LRU)
  int backoff_ms = 100;                    // first retry delay; doubles per attempt
  int max_backoff_ms = 5000;
  long connect_timeout_s = 15;
  long stall_timeout_s = 60;  // a transfer with no progress this long fails (and is retried)
  std::string ca_file;        // HTTPS: CA bundle to trust; empty: $CURL_CA_BUNDLE, else the system's
};

class HttpStorage final : public Storage {
 public:
  HttpStorage(const std::string& url, const StorageOptions& options, const HttpTuning& tuning = {});
  ~HttpStorage() override;

  const std::string& name() const override { return url_; }
  uint64_t size() const override { return size_; }
  bool direct() const override { return false; }
  size_t alignment() const override { return 1; }
  void read(std::span<const ReadRequest> reqs) override;
  void read_unaligned(uint64_t offset, size_t n, void* dst) override;

  // HTTP requests retried so far (tests, stats).
  uint64_t retries() const override { return retries_.load(); }

  struct Context;  // a curl multi handle with its easy handles and connection cache

 private:
  void run(std::span<const ReadRequest> reqs);  // no counters, no header cache
  std::unique_ptr<Context> take_context();
  void give_context(std::unique_ptr<Context> c);

  std::string url_;
  StorageOptions options_;
  HttpTuning tuning_;
  uint64_t size_ = 0;
  std::atomic<uint64_t> retries_{0};

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Context>> idle_;
  std::string target_;  // where requests go: url_ after the redirects the last request followed

  struct Block {
    uint64_t start = 0;
    std::vector<uint8_t> data;
    uint64_t last_use = 0;
  };
  std::mutex cache_mu_;
  std::vector<Block> blocks_;
  uint64_t use_clock_ = 0;
};

}  // namespace spool
