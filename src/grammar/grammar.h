// The grammar IR shared by every input form (GBNF text, JSON Schema, regex):
// rules of alternatives over a byte alphabet. Character classes are lowered
// to UTF-8 byte sequences when they are parsed (utf8_ranges.h), so the
// matcher works on bytes, accepts only valid UTF-8 inside classes, and a token
// that ends in the middle of a character needs no special case.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace spool::grammar {

// A bad grammar, schema or regex; the message names the problem (and the line
// and column for GBNF text).
class GrammarError : public Error {
 public:
  using Error::Error;
};

// 256 bits: the bytes one element accepts.
struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add((uint8_t)b);
  }
  bool operator==(const ByteSet&) const = default;
};

enum class ElemKind : uint8_t { Bytes, Rule, End };

struct Element {
  ElemKind kind = ElemKind::End;
  uint32_t value = 0;  // Bytes: index into Grammar::byte_sets; Rule: index into Grammar::rules
};

using Sequence = std::vector<Element>;  // one alternative, without a trailing End

struct Rule {
  std::string name;
  std::vector<Sequence> alts;  // an empty Sequence matches the empty string
  bool defined = false;
};

struct Grammar {
  std::vector<Rule> rules;
  std::vector<ByteSet> byte_sets;
  uint32_t root = 0;

  uint32_t add_byte_set(const ByteSet& s);  // deduplicated
  uint32_t rule_index(const std::string& name);  // creates an undefined rule on first use
  uint32_t new_rule(const std::string& base);    // a fresh generated rule named base-N
};

// Parses llama.cpp's GBNF: `name ::= alternatives`, `|`, groups, `*` `+` `?`
// `{m}` `{m,}` `{m,n}` `{,n}`, "literals", [classes] with ranges and ^, `.`,
// escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, # comments.
// Throws GrammarError (line:column and the problem) on bad text, undefined
// rules, a missing root rule, left recursion or a rule that can never end.
Grammar parse_gbnf(std::string_view text, std::string_view root = "root");

// Checks a grammar built in code: every rule defined, no left recursion,
// every rule the root reaches able to end (match some finite text).
void validate_grammar(const Grammar& g);

// Escapes bytes for a GBNF "literal" (without the quotes).
std::string gbnf_escape(std::string_view s);

}  // namespace spool::grammar
