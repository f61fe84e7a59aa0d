// Parser, compiler and backtracking matcher for UnicodeRegex. The pattern is
// parsed into a small tree, then compiled into instructions for a backtracking
// machine (split/jump, as in Thompson/Pike VMs but run depth-first so the first
// alternative that leads to a match wins: Perl/Oniguruma "leftmost-first").
#include "text/unicode_regex.h"

#include <memory>

#include "core/error.h"

namespace spool {

namespace {

constexpr int kInfinite = -1;

struct Node {
  enum class Type { kChar, kClass, kAny, kSeq, kAlt, kRepeat, kLook, kBegin, kEnd };
  Type type = Type::kSeq;
  uint32_t c = 0;       // kChar codepoint, kClass class index
  bool icase = false;   // kChar
  bool negative = false;  // kLook
  bool greedy = true;   // kRepeat
  int min = 0, max = 0; // kRepeat
  std::vector<std::unique_ptr<Node>> kids;
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Type t) {
  auto n = std::make_unique<Node>();
  n->type = t;
  return n;
}

bool nullable(const Node& n) {
  switch (n.type) {
    case Node::Type::kChar: case Node::Type::kClass: case Node::Type::kAny: return false;
    case Node::Type::kLook: case Node::Type::kBegin: case Node::Type::kEnd: return true;
    case Node::Type::kRepeat: return n.min == 0 || nullable(*n.kids[0]);
    case Node::Type::kSeq:
      for (auto& k : n.kids) if (!nullable(*k)) return false;
      return true;
    case Node::Type::kAlt:
      for (auto& k : n.kids) if (nullable(*k)) return true;
      return false;
  }
  return true;
}

}  // namespace

// Recursive-descent parser plus code generator; a friend so it can fill the
// regex's class and program tables directly.
class RegexCompiler {
 public:
  RegexCompiler(UnicodeRegex& re, std::string_view pattern)
      : re_(re), pat_(unicode::decode_utf8(pattern)) {}

  void compile() {
    NodePtr root = parse_alt(false);
    if (pos_ != pat_.size()) fail("unbalanced ')'");
    re_.programs_.emplace_back();
    emit_program(*root, 0);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("regex '" + re_.pattern_ + "': " + why + " at position " + std::to_string(pos_));
  }
  bool at_end() const { return pos_ >= pat_.size(); }
  uint32_t peek() const { return at_end() ? 0 : pat_[pos_]; }
  bool eat(uint32_t c) {
    if (!at_end() && pat_[pos_] == c) { ++pos_; return true; }
    return false;
  }

  NodePtr parse_alt(bool icase) {
    auto alt = make(Node::Type::kAlt);
    alt->kids.push_back(parse_seq(icase));
    while (eat('|')) alt->kids.push_back(parse_seq(icase));
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  NodePtr parse_seq(bool icase) {
    auto seq = make(Node::Type::kSeq);
    while (!at_end() && peek() != '|' && peek() != ')') {
      NodePtr atom = parse_atom(icase);
      seq->kids.push_back(parse_quantifier(std::move(atom)));
    }
    return seq;
  }

  NodePtr parse_quantifier(NodePtr atom) {
    for (;;) {
      int mn = 0, mx = 0;
      if (eat('?')) { mn = 0; mx = 1; }
      else if (eat('*')) { mn = 0; mx = kInfinite; }
      else if (eat('+')) { mn = 1; mx = kInfinite; }
      else if (peek() == '{' && parse_braces(&mn, &mx)) {}
      else return atom;
      auto rep = make(Node::Type::kRepeat);
      rep->min = mn;
      rep->max = mx;
      rep->greedy = !eat('?');
      if (peek() == '+') fail("possessive quantifiers are not supported");
      if (atom->type == Node::Type::kBegin || atom->type == Node::Type::kEnd) fail("quantified anchor");
      rep->kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
  }

  // {n}, {n,}, {n,m}; anything else is a literal '{' (as in Oniguruma).
  bool parse_braces(int* mn, int* mx) {
    size_t p = pos_ + 1;
    auto number = [&](int* out) {
      size_t start = p;
      int v = 0;
      while (p < pat_.size() && pat_[p] >= '0' && pat_[p] <= '9') v = v * 10 + int(pat_[p++] - '0');
      *out = v;
      return p > start;
    };
    if (!number(mn)) return false;
    *mx = *mn;
    if (p < pat_.size() && pat_[p] == ',') {
      ++p;
      if (!number(mx)) *mx = kInfinite;
    }
    if (p >= pat_.size() || pat_[p] != '}') return false;
    if (*mx != kInfinite && *mx < *mn) fail("bad repetition bounds");
    pos_ = p + 1;
    return true;
  }

  NodePtr parse_atom(bool icase) {
    const uint32_t c = pat_[pos_++];
    switch (c) {
      case '(': return parse_group(icase);
      case '[': return class_node(parse_bracket(icase));
      case '.': return make(Node::Type::kAny);
      case '^': return make(Node::Type::kBegin);
      case '$': return make(Node::Type::kEnd);
      case '\\': return parse_escape(icase);
      case '*': case '+': case '?': fail("quantifier without operand");
      default: {
        auto n = make(Node::Type::kChar);
        n->c = c;
        n->icase = icase;
        return n;
      }
    }
  }

  NodePtr parse_group(bool icase) {
    NodePtr inner;
    if (eat('?')) {
      if (eat(':')) {
        inner = parse_alt(icase);
      } else if (eat('=') || peek() == '!') {
        const bool negative = eat('!');
        auto look = make(Node::Type::kLook);
        look->negative = negative;
        look->kids.push_back(parse_alt(icase));
        inner = std::move(look);
      } else if (eat('i')) {
        if (!eat(':')) fail("only (?i:...) groups are supported");
        inner = parse_alt(true);
      } else {
        fail("unsupported group syntax");
      }
    } else {
      inner = parse_alt(icase);  // captures are not needed for splitting
    }
    if (!eat(')')) fail("missing ')'");
    return inner;
  }

  NodePtr class_node(UnicodeRegex::CharClass cls) {
    auto n = make(Node::Type::kClass);
    n->c = static_cast<uint32_t>(re_.classes_.size());
    re_.classes_.push_back(std::move(cls));
    return n;
  }

  // Escapes that stand for a set: \p{..} \P{..} \s \S \d \D \w \W.
  bool parse_set_escape(uint32_t e, UnicodeRegex::ClassItem* item) {
    using Kind = UnicodeRegex::ClassItem::Kind;
    switch (e) {
      case 's': case 'S':
        item->kind = Kind::kSpace;
        item->negated = (e == 'S');
        return true;
      case 'd': case 'D':
        item->kind = Kind::kCategory;
        item->mask = unicode::kNumberDecimal;
        item->negated = (e == 'D');
        return true;
      case 'w': case 'W':
        item->kind = Kind::kCategory;
        item->mask = unicode::kWord;
        item->negated = (e == 'W');
        return true;
      case 'p': case 'P':
        item->kind = Kind::kCategory;
        item->mask = parse_property();
        item->negated = (e == 'P');
        return true;
      default:
        return false;
    }
  }

  unicode::CategoryMask parse_property() {
    std::string name;
    if (eat('{')) {
      while (!at_end() && peek() != '}') name.push_back(static_cast<char>(pat_[pos_++]));
      if (!eat('}')) fail("unterminated \\p{");
    } else if (!at_end()) {
      name.push_back(static_cast<char>(pat_[pos_++]));
    }
    using namespace unicode;
    if (name == "L") return kLetter;
    if (name == "Lu") return kLetterUpper;
    if (name == "Ll") return kLetterLower;
    if (name == "Lt") return kLetterTitle;
    if (name == "Lm") return kLetterModifier;
    if (name == "Lo") return kLetterOther;
    if (name == "M") return kMark;
    if (name == "N") return kNumber;
    if (name == "Nd") return kNumberDecimal;
    if (name == "P") return kPunct;
    if (name == "S") return kSymbol;
    if (name == "Z") return kSeparator;
    if (name == "C") return kControl | 1u;  // bit 0 is Cn (unassigned)
    fail("unsupported property \\p{" + name + "}");
  }

  // Escapes that stand for one codepoint.
  uint32_t escaped_char(uint32_t e) {
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': {
        uint32_t v = 0;
        for (int i = 0; i < 2; ++i) {
          const uint32_t h = at_end() ? 0 : pat_[pos_++];
          if (h >= '0' && h <= '9') v = v * 16 + (h - '0');
          else if (h >= 'a' && h <= 'f') v = v * 16 + (h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') v = v * 16 + (h - 'A' + 10);
          else fail("bad \\x escape");
        }
        return v;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          fail(std::string("unsupported escape \\") + static_cast<char>(e));
        return e;  // escaped punctuation is itself
    }
  }

  NodePtr parse_escape(bool icase) {
    if (at_end()) fail("trailing backslash");
    const uint32_t e = pat_[pos_++];
    UnicodeRegex::ClassItem item;
    if (parse_set_escape(e, &item)) {
      UnicodeRegex::CharClass cls;
      cls.items.push_back(item);
      cls.icase = icase;
      return class_node(std::move(cls));
    }
    auto n = make(Node::Type::kChar);
    n->c = escaped_char(e);
    n->icase = icase;
    return n;
  }

  UnicodeRegex::CharClass parse_bracket(bool icase) {
    UnicodeRegex::CharClass cls;
    cls.icase = icase;
    cls.negated = eat('^');
    bool first = true;
    for (;;) {
      if (at_end()) fail("unterminated '['");
      uint32_t c = pat_[pos_++];
      if (c == ']' && !first) break;
      first = false;
      UnicodeRegex::ClassItem item;
      if (c == '\\') {
        if (at_end()) fail("trailing backslash");
        const uint32_t e = pat_[pos_++];
        if (parse_set_escape(e, &item)) {
          cls.items.push_back(item);
          continue;
        }
        c = escaped_char(e);
      } else if (c == '[') {
        fail("nested classes are not supported");
      }
      item.lo = item.hi = c;
      // A '-' between two literals makes a range; at either end it is literal.
      if (peek() == '-' && pos_ + 1 < pat_.size() && pat_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = pat_[pos_++];
        if (hi == '\\') {
          if (at_end()) fail("trailing backslash");
          hi = escaped_char(pat_[pos_++]);
        }
        if (hi < c) fail("reversed class range");
        item.hi = hi;
      }
      cls.items.push_back(item);
    }
    return cls;
  }

  // ---- code generation ------------------------------------------------------
  using Inst = UnicodeRegex::Inst;
  using Op = Inst::Op;

  int emit(int prog, Inst inst) {
    auto& code = re_.programs_[prog].code;
    code.push_back(inst);
    return static_cast<int>(code.size()) - 1;
  }
  Inst& at(int prog, int i) { return re_.programs_[prog].code[i]; }
  int here(int prog) const { return static_cast<int>(re_.programs_[prog].code.size()); }

  void emit_program(const Node& root, int prog) {
    gen(root, prog);
    Inst m;
    m.op = Op::kMatch;
    emit(prog, m);
  }

  void gen(const Node& n, int prog) {
    Inst inst;
    switch (n.type) {
      case Node::Type::kChar:
        inst.op = Op::kChar;
        inst.c = n.icase ? unicode::to_lower(n.c) : n.c;
        inst.icase = n.icase;
        emit(prog, inst);
        return;
      case Node::Type::kClass: inst.op = Op::kClass; inst.c = n.c; emit(prog, inst); return;
      case Node::Type::kAny: inst.op = Op::kAny; emit(prog, inst); return;
      case Node::Type::kBegin: inst.op = Op::kBegin; emit(prog, inst); return;
      case Node::Type::kEnd: inst.op = Op::kEnd; emit(prog, inst); return;
      case Node::Type::kSeq:
        for (auto& k : n.kids) gen(*k, prog);
        return;
      case Node::Type::kAlt: gen_alt(n, prog); return;
      case Node::Type::kRepeat: gen_repeat(n, prog); return;
      case Node::Type::kLook: {
        const int sub = static_cast<int>(re_.programs_.size());
        re_.programs_.emplace_back();
        emit_program(*n.kids[0], sub);
        inst.op = Op::kLook;
        inst.c = static_cast<uint32_t>(sub);
        inst.negative = n.negative;
        emit(prog, inst);
        return;
      }
    }
  }

  // a|b|c  =>  split L1, L2; L1: a; jmp end; L2: split L3, L4; ...
  void gen_alt(const Node& n, int prog) {
    std::vector<int> jumps;
    for (size_t i = 0; i < n.kids.size(); ++i) {
      if (i + 1 < n.kids.size()) {
        Inst s;
        s.op = Op::kSplit;
        const int split = emit(prog, s);
        at(prog, split).x = here(prog);
        gen(*n.kids[i], prog);
        Inst j;
        j.op = Op::kJmp;
        jumps.push_back(emit(prog, j));
        at(prog, split).y = here(prog);
      } else {
        gen(*n.kids[i], prog);
      }
    }
    for (int j : jumps) at(prog, j).x = here(prog);
  }

  void gen_repeat(const Node& n, int prog) {
    const Node& body = *n.kids[0];
    for (int i = 0; i < n.min; ++i) gen(body, prog);
    Inst s;
    s.op = Op::kSplit;
    if (n.max == kInfinite) {
      // A body that can match empty would loop forever in this machine.
      if (nullable(body)) fail("unbounded repetition of an expression that can be empty");
      const int split = emit(prog, s);
      const int body_start = here(prog);
      gen(body, prog);
      Inst j;
      j.op = Op::kJmp;
      j.x = split;
      emit(prog, j);
      set_split(prog, split, body_start, here(prog), n.greedy);
      return;
    }
    std::vector<int> splits;
    for (int i = n.min; i < n.max; ++i) {
      splits.push_back(emit(prog, s));
      at(prog, splits.back()).x = here(prog);
      gen(body, prog);
    }
    for (int sp : splits) set_split(prog, sp, at(prog, sp).x, here(prog), n.greedy);
  }

  void set_split(int prog, int split, int take, int skip, bool greedy) {
    at(prog, split).x = greedy ? take : skip;
    at(prog, split).y = greedy ? skip : take;
  }

  UnicodeRegex& re_;
  std::vector<uint32_t> pat_;
  size_t pos_ = 0;
};

bool UnicodeRegex::ClassItem::matches(uint32_t c) const {
  bool hit = false;
  switch (kind) {
    case Kind::kRange: hit = c >= lo && c <= hi; break;
    case Kind::kCategory: hit = (unicode::category_bit(c) & mask) != 0; break;
    case Kind::kSpace: hit = unicode::is_whitespace(c); break;
  }
  return hit != negated;
}

bool UnicodeRegex::CharClass::matches(uint32_t c) const {
  auto any = [&](uint32_t x) {
    for (const auto& it : items)
      if (it.matches(x)) return true;
    return false;
  };
  bool hit = any(c);
  if (!hit && icase) hit = any(unicode::to_lower(c)) || any(unicode::to_upper(c));
  return hit != negated;
}

UnicodeRegex::UnicodeRegex(std::string_view pattern) : pattern_(pattern) {
  RegexCompiler(*this, pattern).compile();
}

bool UnicodeRegex::match_at(const uint32_t* text, size_t begin, size_t end, size_t pos,
                            size_t* match_end) const {
  return run(programs_[0], text, begin, end, pos, match_end);
}

bool UnicodeRegex::run(const Program& prog, const uint32_t* text, size_t begin, size_t end, size_t pos,
                       size_t* match_end) const {
  struct Thread {
    int pc;
    size_t pos;
  };
  // Depth-first: a split pushes its alternative and follows the preferred
  // branch, so the first Match reached is the leftmost-first match.
  std::vector<Thread> stack;
  stack.push_back({0, pos});
  while (!stack.empty()) {
    Thread t = stack.back();
    stack.pop_back();
    for (;;) {
      const Inst& in = prog.code[t.pc];
      bool ok = true;
      switch (in.op) {
        case Inst::Op::kChar:
          ok = t.pos < end && (in.icase ? unicode::to_lower(text[t.pos]) == in.c : text[t.pos] == in.c);
          if (ok) { ++t.pos; ++t.pc; }
          break;
        case Inst::Op::kClass:
          ok = t.pos < end && classes_[in.c].matches(text[t.pos]);
          if (ok) { ++t.pos; ++t.pc; }
          break;
        case Inst::Op::kAny:
          ok = t.pos < end && text[t.pos] != '\n';
          if (ok) { ++t.pos; ++t.pc; }
          break;
        case Inst::Op::kSplit:
          stack.push_back({in.y, t.pos});
          t.pc = in.x;
          break;
        case Inst::Op::kJmp: t.pc = in.x; break;
        case Inst::Op::kBegin: ok = t.pos == begin; ++t.pc; break;
        case Inst::Op::kEnd: ok = t.pos == end; ++t.pc; break;
        case Inst::Op::kLook: {
          size_t ignored = 0;
          ok = run(programs_[in.c], text, begin, end, t.pos, &ignored) != in.negative;
          ++t.pc;
          break;
        }
        case Inst::Op::kMatch:
          *match_end = t.pos;
          return true;
      }
      if (!ok) break;
    }
  }
  return false;
}

}  // namespace spool
