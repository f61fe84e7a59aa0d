// A small backtracking regex engine over Unicode codepoints, enough for the
// pre-tokenizer split patterns of Hugging Face / tiktoken tokenizers:
// alternation, (?:...), (?i:...), lookahead (?=...) (?!...), classes with
// \p{L} \p{Lu} \p{N} \p{P} \p{S} \p{M} \p{Z} \p{C} (and \P{..}), \s \S \d \D \w \W,
// greedy/lazy ? * + {n,m}, ^ and $. Matching is leftmost-first, like Oniguruma
// and Rust's regex, so splits agree with the reference tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/unicode_util.h"

namespace spool {

class UnicodeRegex {
 public:
  // Throws spool::Error on syntax it does not support.
  explicit UnicodeRegex(std::string_view pattern);

  // Tries to match starting exactly at `pos` within text[begin, end); on
  // success stores the end of the match. Lookarounds and anchors see only
  // [begin, end), as when the regex runs on that slice alone.
  bool match_at(const uint32_t* text, size_t begin, size_t end, size_t pos, size_t* match_end) const;

  const std::string& pattern() const { return pattern_; }

  // One member of a bracket class (or a lone \p{..} / \s / \d / \w escape).
  struct ClassItem {
    enum class Kind : uint8_t { kRange, kCategory, kSpace };
    Kind kind = Kind::kRange;
    bool negated = false;  // \P{..}, \S, \D, \W
    uint32_t lo = 0, hi = 0;
    unicode::CategoryMask mask = 0;
    bool matches(uint32_t c) const;
  };
  struct CharClass {
    std::vector<ClassItem> items;
    bool negated = false;
    bool icase = false;
    bool matches(uint32_t c) const;
  };
  struct Inst {
    enum class Op : uint8_t { kChar, kClass, kAny, kSplit, kJmp, kLook, kBegin, kEnd, kMatch };
    Op op = Op::kMatch;
    bool icase = false;     // kChar
    bool negative = false;  // kLook: (?!...)
    uint32_t c = 0;         // kChar: codepoint; kClass: class index; kLook: program index
    int x = 0, y = 0;       // kSplit: preferred, alternative; kJmp: target
  };
  struct Program {
    std::vector<Inst> code;
  };

 private:
  friend class RegexCompiler;
  bool run(const Program& prog, const uint32_t* text, size_t begin, size_t end, size_t pos,
           size_t* match_end) const;

  std::string pattern_;
  std::vector<CharClass> classes_;
  std::vector<Program> programs_;  // [0] is the main program, the rest lookaheads
};

}  // namespace spool
