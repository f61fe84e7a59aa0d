// Unicode code point ranges lowered to UTF-8 byte-range sequences: [lo, hi]
// becomes a few sequences of per-byte ranges whose union encodes exactly the
// code points in it (surrogates excluded), so a character class can be matched
// byte by byte.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spool::grammar {

using CodeRange = std::pair<uint32_t, uint32_t>;  // inclusive
struct ByteRange { uint8_t lo, hi; };
using ByteRangeSeq = std::vector<ByteRange>;      // 1 to 4 bytes

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged ranges.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> r);
// The complement within [0, 0x10FFFF].
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& r);
// The byte sequences for a set of ranges.
std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodeRange>& ranges);
// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace spool::grammar
