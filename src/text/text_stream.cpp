// TextStream: UTF-8 completeness and stop-string matching over a byte buffer.
#include "text/text_stream.h"

#include <algorithm>

namespace spool {
namespace {

// Length of the longest prefix of s that ends on a complete UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  // Look back at most 3 bytes for a lead byte whose sequence is cut off.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

std::string TextStream::push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    const size_t at = pending_.find(s);
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  // Keep back the longest tail that is a prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    if (!s.empty())
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) { hold = k; break; }
  size_t emit = std::min(pending_.size() - hold, complete_utf8_prefix(pending_));
  std::string out = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string TextStream::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace spool
