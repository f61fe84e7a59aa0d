// Lexer of the Jinja-subset template engine: splits a template into text and
// the tokens inside {{ }} and {% %} tags, dropping {# #} comments, and applies
// whitespace control: {%- -%} {{- -}} strip, trim_blocks drops the newline after
// a block tag, lstrip_blocks drops the indentation before one ({%+ / +%} opt out).
#pragma once

#include <string>
#include <vector>

namespace spool::jinja {

struct Location {
  int line = 1, column = 1;
};

// Throws spool::Error "template error at line L, column C: what".
[[noreturn]] void fail(const Location& at, const std::string& what);

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Type type;
  std::string text;  // text, name, operator, or a string literal's decoded value
  Location at;
};

struct LexOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
};

std::vector<Token> lex(const std::string& source, const LexOptions& options);

}  // namespace spool::jinja
