// GBNF text -> Grammar. A recursive-descent parser over the whole text: a
// rule's body runs until the next `name ::=` (so alternatives and sequences
// may span lines freely); repetitions are lowered to generated rules
// (X* -> r ::= X r | ε, X{m,n} -> m copies then nested optionals).
#include <map>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace spool::grammar {

uint32_t Grammar::add_byte_set(const ByteSet& s) {
  for (size_t i = 0; i < byte_sets.size(); ++i)
    if (byte_sets[i] == s) return (uint32_t)i;
  byte_sets.push_back(s);
  return (uint32_t)byte_sets.size() - 1;
}

uint32_t Grammar::rule_index(const std::string& name) {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return (uint32_t)i;
  rules.push_back({name, {}, false});
  return (uint32_t)rules.size() - 1;
}

uint32_t Grammar::new_rule(const std::string& base) {
  const uint32_t i = (uint32_t)rules.size();
  rules.push_back({base + "-" + std::to_string(i), {}, true});
  return i;
}

std::string gbnf_escape(std::string_view s) {
  std::string out;
  static const char* hex = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += (char)c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) { out += "\\x"; out += hex[c >> 4]; out += hex[c & 15]; }
    else out += (char)c;  // UTF-8 bytes pass through: the literal is UTF-8 text
  }
  return out;
}

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : s_(text), g_(g) {}

  void parse_all() {
    skip_space();
    while (i_ < s_.size()) {
      const size_t at = i_;
      const std::string name = parse_name();
      skip_space();
      if (!s_.substr(i_).starts_with("::=")) fail(at, "expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const uint32_t r = g_.rule_index(name);
      if (g_.rules[r].defined) fail(at, "rule '" + name + "' is defined twice");
      g_.rules[r].defined = true;
      auto alts = parse_alternatives(false);
      g_.rules[r].alts = std::move(alts);
      skip_space();
    }
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') { ++line; col = 1; } else ++col;
    }
    throw GrammarError("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg);
  }

  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }

  void skip_space() {
    while (!at_end()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++i_;
      else if (c == '#') { while (!at_end() && s_[i_] != '\n') ++i_; }
      else break;
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && is_name_char(s_[i_])) ++i_;
    if (i_ == start) fail(start, std::string("expected a rule name, found '") + peek() + "'");
    return std::string(s_.substr(start, i_ - start));
  }

  // Is the text at i_ `name ::=` (the start of the next rule)?
  bool at_rule_start() const {
    size_t k = i_;
    while (k < s_.size() && is_name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r')) ++k;
    return s_.substr(k).starts_with("::=");
  }

  std::vector<Sequence> parse_alternatives(bool nested) {
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++i_;
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail(i_, "expected " + std::to_string(n) + " hex digits in an escape");
      v = v * 16 + (uint32_t)d;
      ++i_;
    }
    return v;
  }

  // One character of a literal or class (an escape or a UTF-8 character).
  uint32_t parse_char() {
    if (at_end()) fail(i_, "unexpected end of grammar");
    if (s_[i_] == '\\') {
      ++i_;
      if (at_end()) fail(i_, "unexpected end after '\\'");
      const char c = s_[i_++];
      switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return (uint8_t)c;
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: fail(i_ - 2, std::string("unknown escape '\\") + c + "'");
      }
    }
    const auto c0 = (uint8_t)s_[i_];
    const int n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) fail(i_, "invalid UTF-8 in the grammar text");
    uint32_t cp = n == 1 ? c0 : n == 2 ? (c0 & 0x1F) : n == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto b = (uint8_t)s_[i_ + k];
      if ((b & 0xC0) != 0x80) fail(i_, "invalid UTF-8 in the grammar text");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += n;
    return cp;
  }

  void append_literal_char(Sequence& seq, uint32_t cp) {
    if (cp > kMaxCodePoint) fail(i_, "code point out of range");
    std::string bytes;
    append_utf8(bytes, cp);
    for (unsigned char b : bytes) {
      ByteSet set;
      set.add(b);
      seq.push_back({ElemKind::Bytes, g_.add_byte_set(set)});
    }
  }

  // A code point class as one element: a byte set when it is all ASCII, else a rule of UTF-8 sequences.
  Element class_element(const std::vector<CodeRange>& ranges) {
    const std::vector<ByteRangeSeq> seqs = utf8_sequences(ranges);
    if (seqs.empty()) fail(i_, "the character class matches nothing");
    ByteSet single;
    bool any_single = false, all_single = true;
    for (const ByteRangeSeq& q : seqs) {
      if (q.size() == 1) { single.add_range(q[0].lo, q[0].hi); any_single = true; }
      else all_single = false;
    }
    if (all_single) return {ElemKind::Bytes, g_.add_byte_set(single)};
    std::string key;
    for (const auto& [lo, hi] : ranges) key += std::to_string(lo) + "-" + std::to_string(hi) + ",";
    if (auto it = class_rules_.find(key); it != class_rules_.end()) return {ElemKind::Rule, it->second};
    const uint32_t r = g_.new_rule("char-class");
    std::vector<Sequence> alts;
    if (any_single) alts.push_back({{ElemKind::Bytes, g_.add_byte_set(single)}});
    for (const ByteRangeSeq& q : seqs) {
      if (q.size() == 1) continue;
      Sequence seq;
      for (const ByteRange& b : q) {
        ByteSet set;
        set.add_range(b.lo, b.hi);
        seq.push_back({ElemKind::Bytes, g_.add_byte_set(set)});
      }
      alts.push_back(std::move(seq));
    }
    g_.rules[r].alts = std::move(alts);
    class_rules_[key] = r;
    return {ElemKind::Rule, r};
  }

  Element parse_class() {
    const size_t start = i_;
    ++i_;  // '['
    bool negated = false;
    if (peek() == '^') { negated = true; ++i_; }
    std::vector<CodeRange> ranges;
    while (peek() != ']') {
      if (at_end()) fail(start, "unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        hi = parse_char();
        if (hi < lo) fail(start, "character class range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    ranges = normalize_ranges(ranges);
    if (negated) ranges = complement_ranges(ranges);
    return class_element(ranges);
  }

  size_t parse_count() {
    const size_t start = i_;
    size_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (size_t)(peek() - '0');
      if (v > 100000) fail(start, "repetition count too large");
      ++i_;
    }
    return v;
  }

  // Replaces seq[from..] (the last item) by its repetition {lo, hi} (hi < 0: unbounded).
  void repeat(Sequence& seq, size_t from, size_t lo, long hi, size_t at) {
    if (hi >= 0 && (size_t)hi < lo) fail(at, "repetition {m,n} has n < m");
    const Sequence item(seq.begin() + (long)from, seq.end());
    seq.resize(from);
    for (size_t k = 0; k < lo; ++k) seq.insert(seq.end(), item.begin(), item.end());
    if (hi < 0) {
      const uint32_t r = g_.new_rule("star");
      Sequence loop = item;
      loop.push_back({ElemKind::Rule, r});
      g_.rules[r].alts = {loop, {}};
      seq.push_back({ElemKind::Rule, r});
      return;
    }
    uint32_t prev = UINT32_MAX;  // nested optionals: q_k ::= item q_{k-1} | ε
    for (long k = 0; k < hi - (long)lo; ++k) {
      const uint32_t r = g_.new_rule("opt");
      Sequence body = item;
      if (prev != UINT32_MAX) body.push_back({ElemKind::Rule, prev});
      g_.rules[r].alts = {body, {}};
      prev = r;
    }
    if (prev != UINT32_MAX) seq.push_back({ElemKind::Rule, prev});
  }

  Sequence parse_sequence(bool nested) {
    Sequence seq;
    size_t last = SIZE_MAX;  // where the last item starts in seq
    while (true) {
      skip_space();
      const char c = peek();
      const size_t at = i_;
      if (at_end() || c == '|' || c == ')') {
        if (c == ')' && !nested) fail(at, "unmatched ')'");
        break;
      }
      if (c == '"') {
        last = seq.size();
        ++i_;
        while (peek() != '"') {
          if (at_end()) fail(at, "unterminated string literal");
          append_literal_char(seq, parse_char());
        }
        ++i_;
      } else if (c == '[') {
        last = seq.size();
        seq.push_back(parse_class());
      } else if (c == '.') {
        ++i_;
        last = seq.size();
        seq.push_back(class_element({{0, kMaxCodePoint}}));
      } else if (c == '(') {
        ++i_;
        auto alts = parse_alternatives(true);
        if (peek() != ')') fail(at, "unclosed '('");
        ++i_;
        const uint32_t r = g_.new_rule("group");
        g_.rules[r].alts = std::move(alts);
        last = seq.size();
        seq.push_back({ElemKind::Rule, r});
      } else if (is_name_char(c)) {
        if (at_rule_start()) {
          if (nested) fail(at, "a new rule starts inside '(' (missing ')')");
          break;
        }
        last = seq.size();
        seq.push_back({ElemKind::Rule, g_.rule_index(parse_name())});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == SIZE_MAX) fail(at, std::string("'") + c + "' has nothing to repeat");
        ++i_;
        if (c == '*') repeat(seq, last, 0, -1, at);
        else if (c == '+') repeat(seq, last, 1, -1, at);
        else if (c == '?') repeat(seq, last, 0, 1, at);
        else {
          skip_space();
          const size_t digits_at = i_;
          const size_t lo = parse_count();
          long hi = (long)lo;
          skip_space();
          if (peek() == ',') {
            ++i_;
            skip_space();
            hi = peek() == '}' ? -1 : (long)parse_count();
          } else if (i_ == digits_at) {
            fail(at, "expected a count after '{'");
          }
          skip_space();
          if (peek() != '}') fail(at, "expected '}' to close the repetition");
          ++i_;
          repeat(seq, last, lo, hi, at);
        }
        last = SIZE_MAX;  // x** is an error, as in llama.cpp
      } else {
        fail(at, std::string("unexpected character '") + c + "'");
      }
    }
    return seq;
  }

  std::string_view s_;
  size_t i_ = 0;
  Grammar& g_;
  std::map<std::string, uint32_t> class_rules_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root) {
  Grammar g;
  Parser(text, g).parse_all();
  bool found = false;
  for (size_t i = 0; i < g.rules.size(); ++i)
    if (g.rules[i].name == root) { g.root = (uint32_t)i; found = true; }
  if (!found) throw GrammarError("grammar: no '" + std::string(root) + "' rule (the start rule)");
  validate_grammar(g);
  return g;
}

}  // namespace spool::grammar
