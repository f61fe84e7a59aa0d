// Regex -> GBNF by recursive descent; every character atom becomes a code
// point class so that the JSON-string form can subtract what JSON escapes.
#include "grammar/regex.h"

#include <cstdio>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace spool::grammar {

namespace {

using Ranges = std::vector<CodeRange>;

class RegexParser {
 public:
  RegexParser(std::string_view re, bool json) : s_(re), json_(json) {}

  std::string parse() {
    if (peek() == '^') ++i_;
    std::string e = parse_alt();
    if (peek() == '$') ++i_;
    if (i_ < s_.size()) fail(peek() == ')' ? "unmatched ')'" : "unexpected '" + std::string(1, peek()) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw GrammarError("regex: " + msg + " at offset " + std::to_string(i_) + " in '" + std::string(s_) + "'");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }

  std::string parse_alt() {
    std::vector<std::string> alts{parse_seq()};
    while (peek() == '|') {
      ++i_;
      alts.push_back(parse_seq());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return out + ")";
  }

  std::string parse_seq() {
    std::string out;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == s_.size()) break;
      std::string atom = parse_atom();
      atom = parse_quantifier(atom);
      out += (out.empty() ? "" : " ") + atom;
    }
    return out.empty() ? "\"\"" : out;
  }

  size_t parse_int() {
    size_t v = 0, n = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (size_t)(peek() - '0');
      ++i_;
      if (++n > 6) fail("repetition count too large");
    }
    if (n == 0) fail("expected a number in {m,n}");
    return v;
  }

  std::string parse_quantifier(const std::string& atom) {
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      q = std::string(1, c);
    } else if (c == '{') {
      ++i_;
      const size_t lo = parse_int();
      q = "{" + std::to_string(lo);
      if (peek() == ',') {
        ++i_;
        q += ",";
        if (peek() != '}') {
          const size_t hi = parse_int();
          if (hi < lo) fail("{m,n} with n < m");
          q += std::to_string(hi);
        }
      }
      if (peek() != '}') fail("expected '}'");
      ++i_;
      q += "}";
    } else {
      return atom;
    }
    if (peek() == '?' || peek() == '+') ++i_;  // lazy / possessive: same language
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') fail("nested quantifier");
    return "(" + atom + ")" + q;
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + (uint32_t)d;
      ++i_;
    }
    return v;
  }

  uint32_t parse_utf8() {
    const auto c0 = (uint8_t)s_[i_];
    const int n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) fail("invalid UTF-8");
    uint32_t cp = n == 1 ? c0 : n == 2 ? (c0 & 0x1F) : n == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | ((uint8_t)s_[i_ + k] & 0x3F);
    i_ += n;
    return cp;
  }

  // After a backslash: a class escape (\d ...) fills `ranges` and returns true; else a single code point in cp.
  bool parse_escape(Ranges& ranges, uint32_t& cp) {
    if (at_end()) fail("trailing backslash");
    const char c = s_[i_++];
    const Ranges digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
        space{{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd': ranges = digit; return true;
      case 'w': ranges = word; return true;
      case 's': ranges = space; return true;
      case 'D': ranges = complement_ranges(digit); return true;
      case 'W': ranges = complement_ranges(word); return true;
      case 'S': ranges = complement_ranges(space); return true;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 't': cp = '\t'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = parse_hex(2); return false;
      case 'u': cp = parse_hex(4); return false;
      case 'b': case 'B': fail("word boundaries (\\b) are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(std::string("unknown escape \\") + c);
        cp = (uint8_t)c;
        return false;
    }
  }

  Ranges parse_class() {
    ++i_;  // '['
    bool negated = false;
    if (peek() == '^') { negated = true; ++i_; }
    Ranges ranges;
    bool first = true;
    while (first || peek() != ']') {
      if (at_end()) fail("unterminated [class]");
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++i_;
        Ranges cls;
        if (parse_escape(cls, lo)) { ranges.insert(ranges.end(), cls.begin(), cls.end()); continue; }
      } else {
        lo = parse_utf8();
      }
      uint32_t hi = lo;
      if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          Ranges cls;
          if (parse_escape(cls, hi)) fail("a class escape cannot end a range");
        } else {
          hi = parse_utf8();
        }
        if (hi < lo) fail("reversed range in [class]");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    ranges = normalize_ranges(ranges);
    return negated ? complement_ranges(ranges) : ranges;
  }

  std::string parse_atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (peek() == '?') {
        if (i_ + 1 < s_.size() && s_[i_ + 1] == ':') i_ += 2;
        else fail("lookarounds and named groups are not supported");
      }
      std::string e = parse_alt();
      if (peek() != ')') fail("missing ')'");
      ++i_;
      return "(" + e + ")";
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail(std::string("'") + c + "' has nothing to repeat");
    if (c == '^' || c == '$') fail("anchors are only supported at the start and the end");
    if (c == '[') return class_expr(parse_class());
    if (c == '.') {
      ++i_;
      return class_expr(complement_ranges({{'\n', '\n'}}));
    }
    if (c == '\\') {
      ++i_;
      Ranges cls;
      uint32_t cp = 0;
      if (parse_escape(cls, cp)) return class_expr(normalize_ranges(cls));
      return class_expr({{cp, cp}});
    }
    const uint32_t cp = parse_utf8();
    return class_expr({{cp, cp}});
  }

  static void append_cp(std::string& out, uint32_t cp) {
    char buf[16];
    if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    else std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    out += buf;
  }

  // A class as GBNF; in JSON-string form '"' and '\' become their escapes and controls are dropped.
  std::string class_expr(Ranges r) {
    std::vector<std::string> alts;
    if (json_) {
      auto has = [&](uint32_t cp) {
        for (auto [lo, hi] : r)
          if (cp >= lo && cp <= hi) return true;
        return false;
      };
      if (has('"')) alts.push_back("\"\\\\\\\"\"");  // the two bytes \"
      if (has('\\')) alts.push_back("\"\\\\\\\\\"");  // the two bytes \\.
      Ranges drop{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      Ranges keep = complement_ranges(drop);
      Ranges both;  // r ∩ keep
      for (auto [a, b] : r)
        for (auto [c, d] : keep)
          if (std::max(a, c) <= std::min(b, d)) both.push_back({std::max(a, c), std::min(b, d)});
      r = both;
    }
    if (!r.empty()) {
      std::string cls = "[";
      for (auto [lo, hi] : r) {
        append_cp(cls, lo);
        if (hi != lo) { cls += "-"; append_cp(cls, hi); }
      }
      alts.insert(alts.begin(), cls + "]");
    }
    if (alts.empty()) fail("a character class that matches nothing");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return out + ")";
  }

  std::string_view s_;
  bool json_;
  size_t i_ = 0;
};

}  // namespace

std::string regex_to_gbnf_expr(std::string_view regex, bool json_string) {
  return RegexParser(regex, json_string).parse();
}

std::string regex_to_gbnf(std::string_view regex) { return "root ::= " + regex_to_gbnf_expr(regex, false) + "\n"; }

}  // namespace spool::grammar
