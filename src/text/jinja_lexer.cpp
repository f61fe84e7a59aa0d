// Jinja-subset lexer: text between tags with whitespace control applied, and the
// tokens inside tags (names, string and number literals, operators). Brackets are
// balanced so a dict literal's "}}" does not end a {{ }} tag.
#include "text/jinja_lexer.h"

#include <algorithm>

#include <cctype>
#include <cstring>

#include "core/error.h"

namespace spool::jinja {

void fail(const Location& at, const std::string& what) {
  throw Error("template error at line " + std::to_string(at.line) + ", column " + std::to_string(at.column) + ": " +
              what);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& o) : src_(src), opt_(o) {}

  std::vector<Token> run() {
    bool line_starting = true, strip_next = false;
    while (pos_ < src_.size()) {
      size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      const Location text_at = location(pos_);
      if (strip_next) text.erase(0, count_leading_space(text));
      strip_next = false;
      if (start == src_.size()) {
        emit_text(text, text_at);
        break;
      }
      const char kind = src_[start + 1];
      const char sign = src_[start + 2];
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (opt_.lstrip_blocks && kind != '{' && sign != '+') {
        lstrip_line(text, line_starting);
      }
      emit_text(text, text_at);
      pos_ = start + 2 + (sign == '-' || sign == '+');
      bool right_strip = false, keep_newline = false;
      if (kind == '#') lex_comment(start, right_strip, keep_newline);
      else lex_tag(kind, start, right_strip, keep_newline);
      line_starting = false;
      if (right_strip) {
        strip_next = true;
      } else if (opt_.trim_blocks && kind != '{' && !keep_newline) {
        if (src_.compare(pos_, 2, "\r\n") == 0) pos_ += 2, line_starting = true;
        else if (pos_ < src_.size() && src_[pos_] == '\n') pos_ += 1, line_starting = true;
      }
      if (raw_pending_) lex_raw_body(strip_next);
    }
    tokens_.push_back({Token::Type::End, "", location(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  static size_t count_leading_space(const std::string& s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
  }

  // lstrip_blocks: drop spaces and tabs between the line start and a block tag.
  static void lstrip_line(std::string& text, bool line_starting) {
    const size_t nl = text.rfind('\n');
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (size_t i = line_start; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.resize(line_start);
  }

  void emit_text(const std::string& text, const Location& at) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, text, at});
  }

  Location location(size_t p) {
    for (; loc_pos_ < p && loc_pos_ < src_.size(); ++loc_pos_) {
      if (src_[loc_pos_] == '\n') ++loc_.line, loc_.column = 1;
      else ++loc_.column;
    }
    return loc_;
  }

  void lex_comment(size_t start, bool& right_strip, bool& keep_newline) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(location(start), "unclosed comment '{#'");
    right_strip = end > pos_ && src_[end - 1] == '-';
    keep_newline = end > pos_ && src_[end - 1] == '+';
    pos_ = end + 2;
  }

  // The tokens of one {{ }} or {% %} tag, up to and including its end marker.
  void lex_tag(char kind, size_t start, bool& right_strip, bool& keep_newline) {
    const Location begin_at = location(start);
    tokens_.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", begin_at});
    const size_t first_token = tokens_.size();
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(begin_at, std::string("unclosed tag '{") + kind + "'");
      const char c = src_[pos_];
      if (depth == 0 && (c == '-' || c == '+') && pos_ + 2 < src_.size() && src_[pos_ + 1] == close &&
          src_[pos_ + 2] == '}') {
        right_strip = c == '-';
        keep_newline = c == '+';
        pos_ += 3;
        break;
      }
      if (depth == 0 && c == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        pos_ += 2;
        break;
      }
      lex_token(depth);
    }
    tokens_.push_back({kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd, "", location(pos_)});
    if (kind == '%' && tokens_.size() == first_token + 2 && tokens_[first_token].type == Token::Type::Name &&
        tokens_[first_token].text == "raw") {
      tokens_.resize(first_token - 1);  // the raw tag itself produces nothing
      raw_pending_ = true;
      raw_at_ = begin_at;
    }
  }

  // {% raw %}...{% endraw %}: the body is text, tags in it are not interpreted.
  void lex_raw_body(bool& strip_next) {
    raw_pending_ = false;
    for (size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 2)) {
      size_t q = p + 2;
      const bool left_strip = q < src_.size() && src_[q] == '-';
      if (left_strip || (q < src_.size() && src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      const bool right_strip = q < src_.size() && src_[q] == '-';
      if (right_strip || (q < src_.size() && src_[q] == '+')) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, p - pos_);
      if (strip_next) text.erase(0, count_leading_space(text));
      if (left_strip)
        while (!text.empty() && is_space(text.back())) text.pop_back();
      emit_text(text, location(pos_));
      pos_ = q + 2;
      strip_next = right_strip;
      if (!right_strip && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
      return;
    }
    fail(raw_at_, "'raw' block is never closed with 'endraw'");
  }

  void lex_token(int& depth) {
    const Location at = location(pos_);
    const char c = src_[pos_];
    if (std::isalpha((unsigned char)c) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() && (std::isalnum((unsigned char)src_[e]) || src_[e] == '_')) ++e;
      tokens_.push_back({Token::Type::Name, src_.substr(pos_, e - pos_), at});
      pos_ = e;
    } else if (std::isdigit((unsigned char)c)) {
      lex_number(at);
    } else if (c == '\'' || c == '"') {
      lex_string(at);
    } else {
      static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
      for (const char* op : two)
        if (src_.compare(pos_, 2, op) == 0) {
          tokens_.push_back({Token::Type::Op, op, at});
          pos_ += 2;
          return;
        }
      if (!std::strchr("+-*/%~|.,:()[]{}<>=", c)) fail(at, std::string("unexpected character '") + c + "'");
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      tokens_.push_back({Token::Type::Op, std::string(1, c), at});
      ++pos_;
    }
  }

  void lex_number(const Location& at) {
    size_t e = pos_;
    bool is_float = false;
    while (e < src_.size() && std::isdigit((unsigned char)src_[e])) ++e;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit((unsigned char)src_[e + 1])) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit((unsigned char)src_[e])) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit((unsigned char)src_[x])) {
        is_float = true;
        e = x;
        while (e < src_.size() && std::isdigit((unsigned char)src_[e])) ++e;
      }
    }
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Int, src_.substr(pos_, e - pos_), at});
    pos_ = e;
  }

  void lex_string(const Location& at) {
    const char quote = src_[pos_++];
    std::string value;
    for (;;) {
      if (pos_ >= src_.size()) fail(at, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\' || pos_ >= src_.size()) {
        value += c;
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': value += '\0'; break;
        case '\\': case '\'': case '"': value += e; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size() || !std::all_of(src_.begin() + pos_, src_.begin() + pos_ + n, ::isxdigit))
            fail(at, std::string("bad \\") + e + " escape in string literal (needs " + std::to_string(n) + " hex digits)");
          const uint32_t cp = uint32_t(std::stoul(src_.substr(pos_, n), nullptr, 16));
          if (cp > 0x10FFFF) fail(at, "\\U escape past the last Unicode code point");
          append_utf8(cp, value);
          pos_ += n;
          break;
        }
        default: value += '\\', value += e;
      }
    }
    tokens_.push_back({Token::Type::String, value, at});
  }

  const std::string& src_;
  LexOptions opt_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  size_t loc_pos_ = 0;
  Location loc_;
  bool raw_pending_ = false;
  Location raw_at_;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace spool::jinja
