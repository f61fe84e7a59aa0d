// The checks of one HTTP range response, apart from libcurl so that they can
// be tested and fuzzed on their own: the status line, Content-Range and
// Retry-After headers, and the body bytes of a `Range: bytes=A-B` request
// (or the one-byte size probe) as curl's header and write callbacks see them.
// A response the caller cannot use sets `fatal` and refuses the body.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace spool {

// One HTTP range request (a whole read or a chunk of one) and what came back.
struct RangeTransfer {
  uint64_t offset = 0, n = 0;
  uint8_t* dst = nullptr;    // n bytes
  bool probe = false;        // the size probe: bytes=0-0, learns the total from Content-Range
  uint64_t whole_size = 0;   // a 200 answer is accepted only for a request covering the whole file
  // Per attempt:
  uint64_t got = 0;
  long status = 0;
  std::string status_line;
  std::string content_range;
  long retry_after_s = 0;    // a 429/503's Retry-After (seconds form)
  bool checked = false;      // status and Content-Range verified at the first body byte
  std::string fatal;         // set by the callbacks: a failure retrying cannot fix
  char errbuf[256] = {0};    // libcurl's error text (CURL_ERROR_SIZE)
  // Across attempts:
  int attempt = 0;
  std::chrono::steady_clock::time_point due{};
  uint64_t total = 0;  // probe: the file size

  void reset_attempt();
  std::string range() const;  // "bytes=A-B"
};

// Parses "bytes A-B/T" (T may be "*"); false if it is not exactly that, or B < A, or T <= B.
bool parse_content_range(const std::string& s, uint64_t& a, uint64_t& b, uint64_t& total, bool& total_known);

// libcurl's CURLOPT_HEADERFUNCTION / CURLOPT_WRITEFUNCTION with `user` a
// RangeTransfer*. Each returns less than size * count to abort the transfer,
// with the reason in `fatal`.
size_t on_range_header(char* data, size_t size, size_t count, void* user);
size_t on_range_body(char* data, size_t size, size_t count, void* user);

}  // namespace spool
