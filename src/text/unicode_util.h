// Unicode helpers for the tokenizers: lenient UTF-8 decoding (invalid bytes
// become U+FFFD, one byte at a time, as llama.cpp does so that token ids agree),
// general-category tests backed by utf8proc, the regex notion of whitespace,
// and GPT-2's reversible byte <-> printable-codepoint mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spool::unicode {

constexpr uint32_t kReplacement = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes).
inline size_t utf8_seq_len(unsigned char lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes one codepoint at `pos` and advances it; malformed input yields
// kReplacement and advances by one byte.
uint32_t decode_utf8(std::string_view s, size_t& pos);
std::vector<uint32_t> decode_utf8(std::string_view s);
void append_utf8(std::string& out, uint32_t cpt);
std::string encode_utf8(uint32_t cpt);
// `s` with every malformed byte replaced by U+FFFD (valid text unchanged).
std::string valid_utf8(std::string_view s);

// General categories as a bit mask (bit = utf8proc category number), so that a
// class like \p{L} is one AND.
using CategoryMask = uint32_t;
CategoryMask category_bit(uint32_t cpt);
extern const CategoryMask kLetter, kLetterUpper, kLetterLower, kLetterTitle, kLetterModifier,
    kLetterOther, kMark, kNumber, kNumberDecimal, kPunct, kSymbol, kSeparator, kControl, kWord;

inline bool is_letter(uint32_t c) { return category_bit(c) & kLetter; }
inline bool is_number(uint32_t c) { return category_bit(c) & kNumber; }
inline bool is_punct(uint32_t c) { return category_bit(c) & kPunct; }
inline bool is_symbol(uint32_t c) { return category_bit(c) & kSymbol; }
inline bool is_mark(uint32_t c) { return category_bit(c) & kMark; }
inline bool is_control(uint32_t c) { return category_bit(c) & kControl; }
// The Unicode White_Space property (what \s means in Rust/Oniguruma regexes).
bool is_whitespace(uint32_t cpt);

uint32_t to_lower(uint32_t cpt);
uint32_t to_upper(uint32_t cpt);
// Canonical decomposition (NFD) of one codepoint, appended to `out`.
void append_nfd(std::vector<uint32_t>& out, uint32_t cpt);

// GPT-2 byte-level mapping: every byte has a printable codepoint stand-in.
const std::string& byte_to_unicode(uint8_t byte);  // UTF-8 of the stand-in
int unicode_to_byte(uint32_t cpt);                  // -1 if cpt is no stand-in

}  // namespace spool::unicode
