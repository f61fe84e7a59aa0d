// Recursive-descent parser for the Jinja subset: statements ({% if %}, {% for %},
// {% set %}, {% macro %}, {% call %}, {% filter %}, break/continue, generation)
// and expressions with Jinja's precedence. Errors name the token's line/column.
#include "text/jinja_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "text/jinja_builtins.h"

namespace spool::jinja {
namespace {

using T = Token::Type;

// Nesting of blocks and parenthesised / unary expressions, and tokens in one
// tag: the parser recurses on both, and a template is outside data, so they
// are bounded (real chat templates nest about 10 deep and use < 200 tokens a tag).
constexpr int kMaxNesting = 100;
constexpr size_t kMaxTagTokens = 4096;

// Refuses a tag of more than kMaxTagTokens tokens: a long left-deep chain
// (a ~ b ~ c ...) would otherwise build a tree too deep to evaluate or free.
void check_tag_lengths(const std::vector<Token>& toks) {
  size_t in_tag = 0;
  for (const Token& t : toks) {
    if (t.type == T::VarBegin || t.type == T::BlockBegin) in_tag = 0;
    else if (++in_tag > kMaxTagTokens)
      fail(t.at, "a tag with more than " + std::to_string(kMaxTagTokens) + " tokens");
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : toks_(t) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end, Location{});
    return body;
  }

 private:
  // One level of nesting (a block, a parenthesis, a unary operator).
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Location& at) : p(parser) {
      if (++p.depth_ > kMaxNesting) fail(at, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nest() { --p.depth_; }
  };
  int depth_ = 0;

  const Token& peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[std::min(i_++, toks_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == T::Op && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == T::Name && peek(k).text == n; }
  bool accept_op(const char* op) { return is_op(op) ? (++i_, true) : false; }
  bool accept_name(const char* n) { return is_name(n) ? (++i_, true) : false; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::End: return "end of template";
      case T::BlockEnd: return "end of tag '%}'";
      case T::VarEnd: return "end of tag '}}'";
      case T::Text: return "text";
      case T::String: return "string '" + t.text + "'";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek().at, std::string("expected '") + op + "', found " + describe(peek()));
  }
  void expect(T type, const char* what) {
    if (peek().type != type) fail(peek().at, std::string("expected ") + what + ", found " + describe(peek()));
    ++i_;
  }
  std::string expect_name() {
    if (peek().type != T::Name) fail(peek().at, "expected a name, found " + describe(peek()));
    return next().text;
  }

  // A 64-bit integer literal; a longer one is an error (Python's would be a bignum).
  static int64_t int_literal(const Token& t) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail(t.at, "integer literal " + t.text.substr(0, 40) + " does not fit in 64 bits");
    return v;
  }

  static ExprPtr make(Expr::Kind kind, const Location& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->at = at;
    return e;
  }

  // Statements up to one of `ends` (its "{% name" is consumed, the name returned in `end`).
  Body parse_body(std::vector<std::string> ends, std::string& end, const Location& opened) {
    const Nest nest(*this, opened);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == T::End) {
        if (ends.empty()) return body;
        fail(opened, "unclosed block: expected '{% " + ends.back() + " %}' before the end of the template");
      }
      if (t.type == T::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->at = t.at;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (t.type == T::VarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->at = t.at;
        n->expr = parse_expression();
        expect(T::VarEnd, "'}}'");
        body.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        if (peek(1).type == T::Name && std::count(ends.begin(), ends.end(), peek(1).text)) {
          end = peek(1).text;
          i_ += 2;
          return body;
        }
        ++i_;
        body.push_back(parse_statement());
      } else {
        fail(t.at, "unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    const Token& kw = peek();
    if (kw.type != T::Name) fail(kw.at, "expected a statement name, found " + describe(kw));
    auto n = std::make_unique<Node>();
    n->at = kw.at;
    const std::string name = next().text;
    if (name == "if") parse_if(*n);
    else if (name == "for") parse_for(*n);
    else if (name == "set") parse_set(*n);
    else if (name == "macro") parse_macro(*n);
    else if (name == "call") parse_call_block(*n);
    else if (name == "filter") parse_filter_block(*n);
    else if (name == "generation") parse_simple_block(*n, Node::Kind::Generation, "endgeneration");
    else if (name == "break" || name == "continue") {
      n->kind = name == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect(T::BlockEnd, "'%}'");
    } else {
      fail(kw.at, "unknown statement '" + name + "'");
    }
    return n;
  }

  void parse_if(Node& n) {
    n.kind = Node::Kind::If;
    ExprPtr cond = parse_expression();
    for (;;) {
      expect(T::BlockEnd, "'%}'");
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, end, n.at);
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = parse_expression();
        continue;
      }
      if (end == "else") {
        expect(T::BlockEnd, "'%}'");
        n.else_body = parse_body({"endif"}, end, n.at);
      }
      expect(T::BlockEnd, "'%}'");
      return;
    }
  }

  void parse_for(Node& n) {
    n.kind = Node::Kind::For;
    do n.targets.push_back(expect_name());
    while (accept_op(","));
    if (!accept_name("in")) fail(peek().at, "expected 'in' in for loop, found " + describe(peek()));
    n.expr = parse_or();
    if (accept_name("if")) n.cond = parse_or();
    if (is_name("recursive")) fail(peek().at, "recursive for loops are not supported");
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({"else", "endfor"}, end, n.at);
    if (end == "else") {
      expect(T::BlockEnd, "'%}'");
      n.else_body = parse_body({"endfor"}, end, n.at);
    }
    expect(T::BlockEnd, "'%}'");
  }

  void parse_set(Node& n) {
    n.kind = Node::Kind::Set;
    n.targets.push_back(expect_name());
    if (accept_op(".")) n.attr = expect_name();
    while (n.attr.empty() && accept_op(",")) n.targets.push_back(expect_name());
    if (accept_op("=")) {
      n.expr = parse_expression();
      if (is_op(",")) {  // a tuple on the right: `set a, b = 1, 2`
        auto list = make(Expr::Kind::ListLit, n.expr->at);
        list->args.push_back(std::move(n.expr));
        while (accept_op(",")) list->args.push_back(parse_expression());
        n.expr = std::move(list);
      }
      expect(T::BlockEnd, "'%}'");
      return;
    }
    if (n.targets.size() != 1 || !n.attr.empty()) fail(peek().at, "expected '=' in set");
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({"endset"}, end, n.at);
    expect(T::BlockEnd, "'%}'");
  }

  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!accept_op(")")) {
      std::string p = expect_name();
      ExprPtr def = accept_op("=") ? parse_expression() : nullptr;
      params.emplace_back(std::move(p), std::move(def));
      if (!is_op(")")) expect_op(",");
    }
  }

  void parse_macro(Node& n) {
    n.kind = Node::Kind::Macro;
    n.text = expect_name();
    parse_params(n.params);
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({"endmacro"}, end, n.at);
    if (peek().type == T::Name) ++i_;  // {% endmacro name %}
    expect(T::BlockEnd, "'%}'");
  }

  void parse_call_block(Node& n) {
    n.kind = Node::Kind::CallBlock;
    if (is_op("(")) parse_params(n.params);
    n.expr = parse_expression();
    if (n.expr->kind != Expr::Kind::Call) fail(n.expr->at, "{% call %} needs a macro call");
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({"endcall"}, end, n.at);
    expect(T::BlockEnd, "'%}'");
  }

  void parse_filter_block(Node& n) {
    n.kind = Node::Kind::FilterBlock;
    n.expr = parse_filter_call(nullptr);
    while (accept_op("|")) n.expr = parse_filter_call(std::move(n.expr));
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({"endfilter"}, end, n.at);
    expect(T::BlockEnd, "'%}'");
  }

  void parse_simple_block(Node& n, Node::Kind kind, const char* end_name) {
    n.kind = kind;
    expect(T::BlockEnd, "'%}'");
    std::string end;
    n.body = parse_body({end_name}, end, n.at);
    expect(T::BlockEnd, "'%}'");
  }

  // ---- expressions ----------------------------------------------------------

  ExprPtr parse_expression() {
    const Nest nest(*this, peek().at);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto t = make(Expr::Kind::Ternary, next().at);
      t->b = parse_or();
      if (accept_name("else")) t->c = parse_expression();
      t->a = std::move(e);
      e = std::move(t);
    }
    return e;
  }

  ExprPtr binary(ExprPtr l, std::string op, ExprPtr r, const Location& at) {
    auto e = make(Expr::Kind::Binary, at);
    e->name = std::move(op);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Location at = next().at;
      e = binary(std::move(e), "or", parse_and(), at);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Location at = next().at;
      e = binary(std::move(e), "and", parse_not(), at);
    }
    return e;
  }

  ExprPtr parse_not() {
    const Nest nest(*this, peek().at);
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary, next().at);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    for (;;) {
      const Location at = peek().at;
      std::string op;
      if (peek().type == T::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                   peek().text == ">" || peek().text == "<=" || peek().text == ">="))
        op = next().text;
      else if (accept_name("in")) op = "in";
      else if (is_name("not") && is_name("in", 1)) i_ += 2, op = "not in";
      else return e;
      e = binary(std::move(e), op, parse_math1(), at);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      e = binary(std::move(e), op.text, parse_concat(), op.at);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Location at = next().at;
      e = binary(std::move(e), "~", parse_math2(), at);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      e = binary(std::move(e), op.text, parse_pow(), op.at);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Location at = next().at;
      e = binary(std::move(e), "**", parse_unary(true), at);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this, peek().at);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::Unary, peek().at);
      e->name = next().text;
      e->a = parse_unary(false);
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.type == T::Name) {
      ++i_;
      auto e = make(Expr::Kind::Literal, t.at);
      if (t.text == "true" || t.text == "True") e->value = Value(true);
      else if (t.text == "false" || t.text == "False") e->value = Value(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::none();
      else e->kind = Expr::Kind::Name, e->name = t.text;
      return e;
    }
    if (t.type == T::String) {
      auto e = make(Expr::Kind::Literal, t.at);
      std::string s;
      while (peek().type == T::String) s += next().text;  // adjacent literals concatenate
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == T::Int || t.type == T::Float) {
      ++i_;
      auto e = make(Expr::Kind::Literal, t.at);
      e->value = t.type == T::Int ? Value(int_literal(t)) : Value(std::strtod(t.text.c_str(), nullptr));
      return e;
    }
    if (is_op("(")) return parse_paren();
    if (is_op("[")) {
      auto e = make(Expr::Kind::ListLit, next().at);
      while (!accept_op("]")) {
        e->args.push_back(parse_expression());
        if (!is_op("]")) expect_op(",");
      }
      return e;
    }
    if (is_op("{")) {
      auto e = make(Expr::Kind::DictLit, next().at);
      while (!accept_op("}")) {
        ExprPtr k = parse_expression();
        expect_op(":");
        e->pairs.emplace_back(std::move(k), parse_expression());
        if (!is_op("}")) expect_op(",");
      }
      return e;
    }
    fail(t.at, "expected an expression, found " + describe(t));
  }

  // (expr) or a tuple (a, b), which behaves as a list.
  ExprPtr parse_paren() {
    const Location at = next().at;
    if (accept_op(")")) return make(Expr::Kind::ListLit, at);
    ExprPtr e = parse_expression();
    if (accept_op(")")) return e;
    auto list = make(Expr::Kind::ListLit, at);
    list->args.push_back(std::move(e));
    while (accept_op(",")) {
      if (is_op(")")) break;
      list->args.push_back(parse_expression());
    }
    expect_op(")");
    return list;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        const Location at = next().at;
        if (peek().type == T::Int) {  // x.0 is x[0]
          auto s = make(Expr::Kind::Subscript, at);
          s->a = std::move(e);
          s->b = make(Expr::Kind::Literal, at);
          s->b->value = Value(int_literal(next()));
          e = std::move(s);
          continue;
        }
        auto a = make(Expr::Kind::Attr, at);
        a->a = std::move(e);
        a->name = expect_name();
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::Call, peek().at);
        c->a = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Location at = next().at;
    ExprPtr parts[3];
    int n_colon = 0;
    while (!is_op("]")) {
      if (accept_op(":")) {
        if (++n_colon > 2) fail(at, "too many ':' in slice");
        continue;
      }
      if (parts[n_colon]) fail(peek().at, "expected ':' or ']' in subscript");
      parts[n_colon] = parse_expression();
    }
    expect_op("]");
    if (n_colon == 0 && !parts[0]) fail(at, "empty subscript");
    auto e = make(n_colon ? Expr::Kind::Slice : Expr::Kind::Subscript, at);
    e->a = std::move(target);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    e->d = std::move(parts[2]);
    return e;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().type == T::Name && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        call.args.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_filter_call(ExprPtr operand) {
    auto f = make(Expr::Kind::Filter, peek().at);
    f->name = expect_name();
    if (!has_filter(f->name)) fail(f->at, "unknown filter '" + f->name + "'");
    f->a = std::move(operand);
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_filters(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        e = parse_filter_call(std::move(e));
      } else if (is_name("is")) {
        auto t = make(Expr::Kind::Test, next().at);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else if (starts_test_argument()) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // `x is divisibleby 3`, `x is sameas none`: a test takes one bare argument.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.type == T::String || t.type == T::Int || t.type == T::Float) return true;
    if (t.type == T::Op) return t.text == "[" || t.text == "{";
    if (t.type != T::Name) return false;
    static const char* stop[] = {"else", "or", "and", "if", "is", "in", "not"};
    for (const char* s : stop)
      if (t.text == s) return false;
    return true;
  }

  const std::vector<Token>& toks_;
  size_t i_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  check_tag_lengths(tokens);
  return Parser(tokens).parse_template();
}

}  // namespace spool::jinja
