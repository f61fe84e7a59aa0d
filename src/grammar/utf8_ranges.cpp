// UTF-8 range splitting: a code point range is cut where the encoded length
// changes and where the continuation bytes would not cover their full span,
// until every piece is a plain cross product of byte ranges.
#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace spool::grammar {

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> r) {
  for (auto& [lo, hi] : r)
    if (lo > hi) std::swap(lo, hi);
  std::sort(r.begin(), r.end());
  std::vector<CodeRange> out;
  for (const CodeRange& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& in) {
  const std::vector<CodeRange> r = normalize_ranges(in);
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

namespace {

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// lo and hi have the same encoded length.
void split_same_length(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  const int n = encoded_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {  // a ragged start: its own piece
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {  // a ragged end
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  ByteRangeSeq seq;
  for (int i = 0; i < n; ++i) seq.push_back({(uint8_t)a[i], (uint8_t)b[i]});
  out.push_back(seq);
}

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodeRange>& ranges) {
  std::vector<ByteRangeSeq> out;
  static const uint32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (auto [lo, hi] : normalize_ranges(ranges)) {
    hi = std::min(hi, kMaxCodePoint);
    // Cut out the surrogates (not encodable in UTF-8).
    std::vector<CodeRange> parts;
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) parts.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) parts.push_back({0xE000, hi});
    } else if (lo <= hi) {
      parts.push_back({lo, hi});
    }
    for (auto [a, b] : parts) {
      for (uint32_t bound : kBounds) {
        if (a > b) break;
        if (a > bound) continue;
        const uint32_t end = std::min(b, bound);
        split_same_length(a, end, out);
        a = end + 1;
      }
    }
  }
  return out;
}

}  // namespace spool::grammar
