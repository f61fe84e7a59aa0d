// Syntax tree of the Jinja-subset template engine: expressions (Expr) and
// statements (Node), plain data built by the parser and walked by the evaluator.
// Every node keeps its source location so evaluation errors can name it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_lexer.h"
#include "text/jinja_value.h"

namespace spool::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    ListLit,    // args
    DictLit,    // kwargs-like pairs in `pairs` (key expr, value expr)
    Attr,       // a.name
    Subscript,  // a[b]
    Slice,      // a[b:c:d], absent parts are null
    Call,       // a(args, kwargs)
    Filter,     // a | name(args, kwargs)
    Test,       // a is [not] name(args)
    Unary,      // name is "not", "-" or "+"; operand a
    Binary,     // a name b; name is the operator ("and", "or", "in", "not in", "~", "+", ...)
    Ternary,    // a if b else c (c may be null)
  };
  Kind kind;
  Location at;
  Value value;
  std::string name;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (cond, body) then else_body
    For,       // targets in expr [if cond]: body, else_body
    Set,       // targets = expr; target "ns.attr" when attr is set; or block set (expr null, body)
    Macro,     // name(params with defaults): body
    Break,
    Continue,
    CallBlock,  // {% call m(args) %}body{% endcall %}: expr is the call, body is caller()
    FilterBlock,  // {% filter name(args) %}body: expr is a Filter over a null operand
    Generation,   // {% generation %}body (HF's assistant-mask marker): rendered as is
  };
  Kind kind;
  Location at;
  std::string text;
  ExprPtr expr, cond;
  std::vector<std::string> targets;
  std::string attr;  // Set: the attribute of targets[0] being assigned (ns.attr = ...)
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters (default may be null)
};

}  // namespace spool::jinja
