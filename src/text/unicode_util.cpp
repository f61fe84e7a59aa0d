// Unicode helpers for the tokenizers (see unicode_util.h). Categories, case
// mapping and decomposition come from utf8proc; the only tables here are the
// White_Space property's few members and GPT-2's byte mapping, which are
// definitions rather than Unicode data.
#include "text/unicode_util.h"

#include <array>
#include <utf8proc.h>

namespace spool::unicode {

namespace {
constexpr CategoryMask bit(int category) { return CategoryMask{1} << category; }
}  // namespace

const CategoryMask kLetterUpper = bit(UTF8PROC_CATEGORY_LU);
const CategoryMask kLetterLower = bit(UTF8PROC_CATEGORY_LL);
const CategoryMask kLetterTitle = bit(UTF8PROC_CATEGORY_LT);
const CategoryMask kLetterModifier = bit(UTF8PROC_CATEGORY_LM);
const CategoryMask kLetterOther = bit(UTF8PROC_CATEGORY_LO);
const CategoryMask kLetter = kLetterUpper | kLetterLower | kLetterTitle | kLetterModifier | kLetterOther;
const CategoryMask kMark = bit(UTF8PROC_CATEGORY_MN) | bit(UTF8PROC_CATEGORY_MC) | bit(UTF8PROC_CATEGORY_ME);
const CategoryMask kNumberDecimal = bit(UTF8PROC_CATEGORY_ND);
const CategoryMask kNumber = kNumberDecimal | bit(UTF8PROC_CATEGORY_NL) | bit(UTF8PROC_CATEGORY_NO);
const CategoryMask kPunct = bit(UTF8PROC_CATEGORY_PC) | bit(UTF8PROC_CATEGORY_PD) | bit(UTF8PROC_CATEGORY_PS) |
                            bit(UTF8PROC_CATEGORY_PE) | bit(UTF8PROC_CATEGORY_PI) | bit(UTF8PROC_CATEGORY_PF) |
                            bit(UTF8PROC_CATEGORY_PO);
const CategoryMask kSymbol = bit(UTF8PROC_CATEGORY_SM) | bit(UTF8PROC_CATEGORY_SC) | bit(UTF8PROC_CATEGORY_SK) |
                             bit(UTF8PROC_CATEGORY_SO);
const CategoryMask kSeparator = bit(UTF8PROC_CATEGORY_ZS) | bit(UTF8PROC_CATEGORY_ZL) | bit(UTF8PROC_CATEGORY_ZP);
// Unassigned codepoints (Cn) are deliberately not "control": BERT-style
// cleaning drops only real control/format/private/surrogate codepoints.
const CategoryMask kControl = bit(UTF8PROC_CATEGORY_CC) | bit(UTF8PROC_CATEGORY_CF) | bit(UTF8PROC_CATEGORY_CS) |
                              bit(UTF8PROC_CATEGORY_CO);
const CategoryMask kWord = kLetter | kMark | kNumberDecimal | bit(UTF8PROC_CATEGORY_PC);

uint32_t decode_utf8(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  // Length from the lead byte; every following byte must be a continuation.
  size_t n = 0;
  uint32_t cpt = 0;
  if ((lead & 0xE0) == 0xC0) { n = 2; cpt = lead & 0x1F; }
  else if ((lead & 0xF0) == 0xE0) { n = 3; cpt = lead & 0x0F; }
  else if ((lead & 0xF8) == 0xF0) { n = 4; cpt = lead & 0x07; }
  if (n == 0 || pos + n > s.size()) {
    pos += 1;
    return kReplacement;
  }
  for (size_t i = 1; i < n; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) {
      pos += 1;
      return kReplacement;
    }
    cpt = (cpt << 6) | (byte(pos + i) & 0x3F);
  }
  pos += n;
  return cpt;
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(decode_utf8(s, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    append_utf8(out, kReplacement);
  }
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) append_utf8(out, decode_utf8(s, pos));
  return out;
}

std::string encode_utf8(uint32_t cpt) {
  std::string s;
  append_utf8(s, cpt);
  return s;
}

CategoryMask category_bit(uint32_t cpt) {
  // ASCII dominates real text: answer it from a table built once.
  static const std::array<CategoryMask, 128> ascii = [] {
    std::array<CategoryMask, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = bit(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
    return t;
  }();
  if (cpt < 128) return ascii[cpt];
  if (cpt > 0x10FFFF) return bit(UTF8PROC_CATEGORY_CN);
  return bit(utf8proc_category(static_cast<utf8proc_int32_t>(cpt)));
}

bool is_whitespace(uint32_t cpt) {
  if (cpt == ' ' || (cpt >= 0x09 && cpt <= 0x0D)) return true;
  if (cpt < 0x80) return false;
  if (cpt == 0x85) return true;  // NEXT LINE is White_Space but category Cc
  return (category_bit(cpt) & kSeparator) != 0;
}

uint32_t to_lower(uint32_t cpt) {
  return cpt > 0x10FFFF ? cpt : static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cpt)));
}

uint32_t to_upper(uint32_t cpt) {
  return cpt > 0x10FFFF ? cpt : static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cpt)));
}

void append_nfd(std::vector<uint32_t>& out, uint32_t cpt) {
  utf8proc_int32_t buf[8];
  int last_boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cpt), buf, 8,
                                                     static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE),
                                                     &last_boundclass);
  if (n <= 0 || n > 8) {
    out.push_back(cpt);
    return;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(buf[i]));
}

namespace {
// GPT-2 keeps printable Latin-1 bytes as themselves and moves the other 68
// bytes (controls, space, DEL, NBSP, soft hyphen) to U+0100.. in byte order.
struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<uint32_t, 256> cpt_of;
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cpt_of[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_unicode[b] = encode_utf8(cpt_of[b]);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}
}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(uint32_t cpt) {
  if (cpt < 256) {
    const bool printable = (cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) || (cpt >= 0xAE);
    return printable ? static_cast<int>(cpt) : -1;
  }
  if (cpt < 256 + 68) {
    const auto& m = byte_map().cpt_of;
    for (int b = 0; b < 256; ++b)
      if (m[b] == cpt) return b;
  }
  return -1;
}

}  // namespace spool::unicode
