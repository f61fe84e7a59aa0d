// Checks of HTTP range responses; see http_range.h. Every number a server
// sends is parsed strictly (digits only, no sign, no overflow): a response
// that does not say exactly what was asked for is refused, never guessed at.
#include "storage/http_range.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace spool {

namespace {

bool iequals_prefix(const char* s, size_t n, const char* prefix) {
  const size_t k = std::strlen(prefix);
  if (n < k) return false;
  for (size_t i = 0; i < k; ++i)
    if (std::tolower((unsigned char)s[i]) != std::tolower((unsigned char)prefix[i])) return false;
  return true;
}

std::string trim(const char* data, size_t len) {
  size_t a = 0, b = len;
  while (b > a && (data[b - 1] == '\r' || data[b - 1] == '\n' || data[b - 1] == ' ' || data[b - 1] == '\t')) --b;
  while (a < b && (data[a] == ' ' || data[a] == '\t')) ++a;
  return std::string(data + a, b - a);
}

// Decimal digits at s[pos..]: at least one, no sign, no overflow. Advances pos.
bool parse_u64(const std::string& s, size_t& pos, uint64_t& out) {
  const size_t start = pos;
  uint64_t v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    const uint64_t d = (uint64_t)(s[pos] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
    ++pos;
  }
  out = v;
  return pos > start;
}

}  // namespace

void RangeTransfer::reset_attempt() {
  got = 0;
  status = 0;
  status_line.clear();
  content_range.clear();
  retry_after_s = 0;
  checked = false;
  fatal.clear();
  errbuf[0] = 0;
}

std::string RangeTransfer::range() const {
  return "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1);
}

bool parse_content_range(const std::string& s, uint64_t& a, uint64_t& b, uint64_t& total, bool& total_known) {
  if (!iequals_prefix(s.data(), s.size(), "bytes ")) return false;
  size_t pos = 6;
  while (pos < s.size() && s[pos] == ' ') ++pos;
  if (!parse_u64(s, pos, a) || pos >= s.size() || s[pos++] != '-') return false;
  if (!parse_u64(s, pos, b) || pos >= s.size() || s[pos++] != '/') return false;
  if (b < a) return false;
  if (pos < s.size() && s[pos] == '*') {
    total_known = false;
    total = 0;
    return pos + 1 == s.size();
  }
  total_known = true;
  if (!parse_u64(s, pos, total) || pos != s.size()) return false;
  return total > b;
}

size_t on_range_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<RangeTransfer*>(user);
  const size_t len = size * count;
  if (!t->fatal.empty()) return 0;
  if (len >= 5 && std::memcmp(data, "HTTP/", 5) == 0) {
    // A new response (after a redirect or a 100 Continue): forget the last one's headers.
    // Body bytes are only ever the final response's, so one after them is a broken stream.
    if (t->got > 0) {
      t->fatal = "a new response began after " + std::to_string(t->got) + " body bytes";
      return 0;
    }
    t->checked = false;
    t->status_line = trim(data, len);
    const size_t sp = t->status_line.find(' ');
    t->status = 0;
    if (sp != std::string::npos) {
      size_t pos = sp + 1;
      uint64_t code = 0;
      if (parse_u64(t->status_line, pos, code) && pos - sp - 1 == 3) t->status = (long)code;
    }
    t->content_range.clear();
    t->retry_after_s = 0;
  } else if (iequals_prefix(data, len, "content-range:")) {
    t->content_range = trim(data + 14, len - 14);
  } else if (iequals_prefix(data, len, "retry-after:")) {
    // Seconds only (an HTTP date is ignored); anything huge is capped by the caller's backoff limit.
    const std::string v = trim(data + 12, len - 12);
    size_t pos = 0;
    uint64_t s = 0;
    t->retry_after_s = parse_u64(v, pos, s) && pos == v.size() ? (long)std::min<uint64_t>(s, 86400) : 0;
  }
  return len;
}

size_t on_range_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<RangeTransfer*>(user);
  const size_t len = size * count;
  if (!t->fatal.empty()) return 0;  // already refused
  if (len == 0) return 0;           // nothing to check or copy (curl never passes an empty chunk)
  if (t->status < 200 || t->status >= 300) return len;  // an error page: discarded, the status tells
  if (!t->checked) {
    t->checked = true;
    if (t->status == 206) {
      uint64_t a = 0, b = 0, total = 0;
      bool known = false;
      if (!parse_content_range(t->content_range, a, b, total, known)) {
        t->fatal = "206 answer without a valid Content-Range ('" + t->content_range + "')";
        return 0;
      }
      if (a != t->offset || (!t->probe && b != t->offset + t->n - 1)) {
        t->fatal = "server sent Content-Range '" + t->content_range + "' for the requested range";
        return 0;
      }
      if (t->probe) {
        if (!known) {
          t->fatal = "server does not say the file size (Content-Range '" + t->content_range + "')";
          return 0;
        }
        t->total = total;
      }
    } else if (!(t->status == 200 && t->offset == 0 && t->n == t->whole_size)) {
      t->fatal = "server ignored the Range header (answered " + t->status_line +
                 " instead of 206 Partial Content): it does not support range requests";
      return 0;
    }
  }
  if (len > t->n - t->got) {
    t->fatal = "oversized body: the server sent more than the " + std::to_string(t->n) + " bytes requested";
    return 0;
  }
  std::memcpy(t->dst + t->got, data, len);
  t->got += len;
  return len;
}

}  // namespace spool
