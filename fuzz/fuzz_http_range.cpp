// Fuzz entry for the HTTP weight source's range-response handling: a request
// (offset, length, probe or not, file size) taken from the first 8 bytes, then
// a stream of header lines and body chunks fed to the same callbacks libcurl
// calls, until one refuses. The destination buffer is exactly the requested
// size (AddressSanitizer sees any write past it); the invariants a caller
// relies on are checked after every call.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_targets.h"
#include "storage/http_range.h"

namespace spool::fuzz {

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz http_range: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

int http_range(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint32_t offset = data[0] | (data[1] << 8) | (data[2] << 16);
  const uint32_t n = 1 + ((data[3] | (data[4] << 8)) % 4096);
  const uint8_t flags = data[5];
  const uint32_t whole = (data[6] | (data[7] << 8)) + 1;
  RangeTransfer t;
  t.probe = flags & 1;
  if (t.probe) {
    t.offset = 0;
    t.n = 1;
  } else if (flags & 2) {  // a read of the whole file: a 200 answer is acceptable
    t.offset = 0;
    t.n = whole;
  } else {
    t.offset = offset;
    t.n = n;
  }
  t.whole_size = t.probe ? 0 : flags & 2 ? t.n : whole;  // as HttpStorage sets them
  std::vector<uint8_t> dst(t.n);
  t.dst = dst.data();
  t.reset_attempt();
  size_t pos = 8;
  while (pos + 2 <= size) {
    const uint8_t tag = data[pos];
    const size_t len = std::min<size_t>(data[pos + 1], size - pos - 2);
    std::vector<char> chunk(data + pos + 2, data + pos + 2 + len);  // exactly len bytes, as curl passes them
    pos += 2 + len;
    if (tag == 0xff) {  // a new attempt
      t.reset_attempt();
      continue;
    }
    size_t taken;
    if (tag & 1) {
      taken = on_range_body(chunk.data(), 1, len, &t);
    } else {
      if (tag & 2) chunk.insert(chunk.end(), {'\r', '\n'});
      taken = on_range_header(chunk.data(), 1, chunk.size(), &t);
      if (taken == chunk.size()) continue;
      if (t.fatal.empty()) broken("a header line was refused without a reason");
      break;  // curl aborts the transfer
    }
    if (t.got > t.n) broken("more bytes taken than requested");
    if (taken != len) {
      if (t.fatal.empty()) broken("a body was refused without a reason");
      break;  // curl aborts the transfer
    }
    if (t.status >= 200 && t.status < 300 && len > 0 && !t.checked) broken("a body taken unchecked");
    if (t.probe && t.checked && t.status == 206 && t.total == 0) broken("a probe learnt a zero size");
  }
  return 0;
}

}  // namespace spool::fuzz
