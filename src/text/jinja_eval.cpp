// Evaluator of the Jinja-subset template engine: walks the statement tree with a
// stack of variable scopes (one per for loop and macro call, as Jinja scopes them)
// and renders text. Expressions follow Python semantics for the operators.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "text/jinja.h"
#include "text/jinja_builtins.h"
#include "text/jinja_parser.h"

namespace spool::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

// What one render may spend (TemplateOptions); builtins reach it through
// charge_bytes() while the render runs on this thread.
struct Budget {
  uint64_t steps = 0, max_steps = 0;
  uint64_t bytes = 0, max_bytes = 0;
  int depth = 0, max_depth = 0;
};
thread_local Budget* t_budget = nullptr;

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void charge_bytes(uint64_t n) {
  Budget* b = t_budget;
  if (!b) return;
  if (n > b->max_bytes - std::min(b->bytes, b->max_bytes))
    throw BuiltinError("the template builds more than " + mib(b->max_bytes) +
                       " of text and lists (a template that grows without end?)");
  b->bytes += n;
}

void charge_product(uint64_t a, uint64_t b) {
  uint64_t n;
  charge_bytes(__builtin_mul_overflow(a, b, &n) ? UINT64_MAX : n);
}

namespace {

class Evaluator {
 public:
  Evaluator(const Value& context, const TemplateOptions& options) {
    budget_.max_steps = options.max_steps;
    budget_.max_bytes = options.max_output_bytes;
    budget_.max_depth = options.max_depth;
    outer_ = t_budget;
    t_budget = &budget_;
    scopes_.emplace_back();
    for (auto& [k, v] : global_functions().items) scopes_.back()[k] = v;
    scopes_.emplace_back();
    if (context.is_dict())
      for (auto& [k, v] : context.as_dict().items) scopes_.back()[k] = v;
    scopes_.emplace_back();  // the template's own top-level variables
  }
  ~Evaluator() {
    t_budget = outer_;
    // Namespaces are shared, so `{% set ns.me = ns %}` makes a reference cycle that would
    // outlive the render (LeakSanitizer found it). Only the template can make and assign
    // namespaces, and the render's result is a string, so emptying them frees every cycle.
    for (const Value& ns : assigned_namespaces_) ns.as_dict().items.clear();
  }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return f->second;
    return Value();
  }
  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  // One statement, expression or loop iteration: counts a step and a level of nesting.
  struct Step {
    Budget& b;
    Step(Budget& budget, const Location& at) : b(budget) {
      if (++b.steps > b.max_steps)
        fail(at, "the template ran more than " + std::to_string(b.max_steps) + " steps (a loop that does not end?)");
      if (++b.depth > b.max_depth) {
        --b.depth;
        fail(at, "the template nests more than " + std::to_string(b.max_depth) +
                     " levels deep while rendering (a macro that calls itself?)");
      }
    }
    ~Step() { --b.depth; }
  };

  // Appends rendered text to an output, within the byte budget.
  void emit(std::string& out, const std::string& text, const Location& at) {
    try {
      charge_bytes(text.size());
    } catch (const BuiltinError& e) {
      fail(at, e.what());
    }
    out += text;
  }

  struct ScopeGuard {
    Evaluator& e;
    explicit ScopeGuard(Evaluator& ev) : e(ev) { e.scopes_.emplace_back(); }
    ~ScopeGuard() { e.scopes_.pop_back(); }
  };

  Flow exec(const Node& n, std::string& out) {
    const Step step(budget_, n.at);
    switch (n.kind) {
      case Node::Kind::Text: emit(out, n.text, n.at); return Flow::Normal;
      case Node::Kind::Output: emit(out, eval(*n.expr).str(), n.at); return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond).truthy()) return exec(body, out);
        return exec(n.else_body, out);
      case Node::Kind::For: return exec_for(n, out);
      case Node::Kind::Set: exec_set(n); return Flow::Normal;
      case Node::Kind::Macro: assign(n.text, make_macro(n)); return Flow::Normal;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::CallBlock: emit(out, call_block(n).str(), n.at); return Flow::Normal;
      case Node::Kind::FilterBlock: {
        std::string inner;
        exec(n.body, inner);
        emit(out, apply_filters(*n.expr, Value(std::move(inner))).str(), n.at);
        return Flow::Normal;
      }
      case Node::Kind::Generation: return exec(n.body, out);
    }
    return Flow::Normal;
  }

  static Value loop_info(const List& items, size_t i) {
    const int64_t n = int64_t(items.size()), k = int64_t(i);
    Dict d;
    d.set("index", Value(k + 1));
    d.set("index0", Value(k));
    d.set("revindex", Value(n - k));
    d.set("revindex0", Value(n - k - 1));
    d.set("first", Value(k == 0));
    d.set("last", Value(k == n - 1));
    d.set("length", Value(n));
    d.set("previtem", k > 0 ? items[i - 1] : Value());
    d.set("nextitem", k + 1 < n ? items[i + 1] : Value());
    d.set("cycle", Value(Function([k](CallArgs& a) {
            if (a.positional.empty()) throw BuiltinError("loop.cycle() needs arguments");
            return a.positional[size_t(k) % a.positional.size()];
          })));
    return Value(std::move(d));
  }

  void bind_targets(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      assign(n.targets[0], item);
      return;
    }
    const List parts = item.iterate();
    if (parts.size() != n.targets.size())
      fail(n.at, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                     std::to_string(n.targets.size()) + " loop variables");
    for (size_t t = 0; t < parts.size(); ++t) assign(n.targets[t], parts[t]);
  }

  Flow exec_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    if (!seq.is_list() && !seq.is_dict() && !seq.is_string() && !seq.is_undefined() && !seq.is_none())
      fail(n.expr->at, std::string("cannot loop over a ") + seq.type_name());
    ScopeGuard scope(*this);
    List items;
    for (Value& item : seq.iterate()) {
      if (n.cond) {
        bind_targets(n, item);
        if (!eval(*n.cond).truthy()) continue;
      }
      items.push_back(std::move(item));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const Step step(budget_, n.at);
      bind_targets(n, items[i]);
      assign("loop", loop_info(items, i));
      if (exec(n.body, out) == Flow::Break) break;
    }
    if (items.empty()) exec(n.else_body, out);
    return Flow::Normal;
  }

  void exec_set(const Node& n) {
    Value v;
    if (n.expr) {
      v = eval(*n.expr);
    } else {
      std::string inner;
      exec(n.body, inner);
      v = Value(std::move(inner));
    }
    if (!n.attr.empty()) {
      Value target = lookup(n.targets[0]);
      if (!target.is_dict() || !target.as_dict().is_namespace)
        fail(n.at, "cannot assign attribute '" + n.attr + "' of '" + n.targets[0] + "': not a namespace");
      target.as_dict().set(n.attr, std::move(v));
      if (assigned_seen_.insert(&target.as_dict()).second) assigned_namespaces_.push_back(target);
      return;
    }
    if (n.targets.size() == 1) {
      assign(n.targets[0], std::move(v));
      return;
    }
    const List parts = v.iterate();
    if (parts.size() != n.targets.size()) fail(n.at, "cannot unpack " + std::to_string(parts.size()) + " values");
    for (size_t t = 0; t < parts.size(); ++t) assign(n.targets[t], parts[t]);
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value(Function([this, node](CallArgs& args) {
      ScopeGuard scope(*this);
      for (size_t p = 0; p < node->params.size(); ++p) {
        const auto& [name, def] = node->params[p];
        Value v = p < args.positional.size() ? args.positional[p] : Value();
        for (auto& [k, kv] : args.named)
          if (k == name) v = kv;
        if (v.is_undefined() && def) v = eval(*def);
        assign(name, std::move(v));
      }
      for (auto& [k, kv] : args.named)
        if (k == "caller") assign("caller", kv);
      std::string out;
      exec(node->body, out);
      return Value(std::move(out));
    }));
  }

  Value call_block(const Node& n) {
    const Node* node = &n;
    Value caller(Function([this, node](CallArgs& args) {
      ScopeGuard scope(*this);
      for (size_t p = 0; p < node->params.size() && p < args.positional.size(); ++p)
        assign(node->params[p].first, args.positional[p]);
      std::string out;
      exec(node->body, out);
      return Value(std::move(out));
    }));
    const Expr& call = *n.expr;
    Value fn = eval(*call.a);
    CallArgs args = eval_args(call);
    args.named.emplace_back("caller", caller);
    return invoke(fn, args, call.at);
  }

  // ---- expressions ----------------------------------------------------------

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (const ExprPtr& a : e.args) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : e.kwargs) args.named.emplace_back(k, eval(*v));
    return args;
  }

  Value invoke(const Value& fn, CallArgs& args, const Location& at) {
    if (!fn.is_function()) fail(at, std::string("cannot call a ") + fn.type_name());
    try {
      return fn.as_function()(args);
    } catch (const BuiltinError& e) {
      fail(at, e.what());
    }
  }

  Value eval(const Expr& e) {
    const Step step(budget_, e.at);
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::ListLit: {
        List l;
        for (const ExprPtr& a : e.args) l.push_back(eval(*a));
        return Value(std::move(l));
      }
      case Expr::Kind::DictLit: {
        Dict d;
        for (const auto& [k, v] : e.pairs) d.set(eval(*k).str(), eval(*v));
        return Value(std::move(d));
      }
      case Expr::Kind::Attr: return get_attr(eval(*e.a), e.name);
      case Expr::Kind::Subscript: return subscript(eval(*e.a), eval(*e.b), e.at);
      case Expr::Kind::Slice: return slice(e);
      case Expr::Kind::Call: return eval_call(e);
      case Expr::Kind::Filter: return apply_filters(e, Value());
      case Expr::Kind::Test: {
        const Value v = eval(*e.a);
        CallArgs args = eval_args(e);
        try {
          return Value(apply_test(e.name, v, args) != e.negated);
        } catch (const BuiltinError& err) {
          fail(e.at, err.what());
        }
      }
      case Expr::Kind::Unary: return unary(e);
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Ternary:
        if (eval(*e.b).truthy()) return eval(*e.a);
        return e.c ? eval(*e.c) : Value();
    }
    return Value();
  }

  // A filter chain; a null innermost operand (a {% filter %} block) takes `input`.
  Value apply_filters(const Expr& e, Value input) {
    const Value v = e.a ? (e.a->kind == Expr::Kind::Filter ? apply_filters(*e.a, input) : eval(*e.a)) : input;
    CallArgs args = eval_args(e);
    try {
      return apply_filter(e.name, v, args);
    } catch (const BuiltinError& err) {
      fail(e.at, err.what());
    }
  }

  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_dict())
      if (const Value* v = obj.as_dict().find(name)) return *v;
    return Value();
  }

  static Value subscript(const Value& obj, const Value& key, const Location& at) {
    if (obj.is_dict()) {
      if (!key.is_string() && !key.is_number()) return Value();
      const Value* v = obj.as_dict().find(key.str());
      return v ? *v : Value();
    }
    if (obj.is_list() || obj.is_string()) {
      if (!key.is_int()) {
        if (key.is_string()) return Value();  // message['x'] on a non-dict: undefined
        fail(at, std::string("index must be an integer, not ") + key.type_name());
      }
      const List items = obj.is_list() ? List() : obj.iterate();
      const List& seq = obj.is_list() ? obj.as_list() : items;
      int64_t i = key.as_int();
      if (i < 0) i += int64_t(seq.size());
      if (i < 0 || i >= int64_t(seq.size())) return Value();
      return seq[size_t(i)];
    }
    return Value();
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.a);
    if (!obj.is_list() && !obj.is_string()) fail(e.at, std::string("cannot slice a ") + obj.type_name());
    const List seq = obj.iterate();
    const int64_t n = int64_t(seq.size());
    const auto bound = [&](const ExprPtr& p, const char* what) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      const Value v = eval(*p);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int()) fail(p->at, std::string("slice ") + what + " must be an integer");
      return v.as_int();
    };
    const int64_t step = bound(e.d, "step").value_or(1);
    if (step == 0) fail(e.at, "slice step cannot be zero");
    const auto clamp = [&](std::optional<int64_t> b, int64_t def) {
      if (!b) return def;
      int64_t i = *b < 0 ? *b + n : *b;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = clamp(bound(e.b, "start"), step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bound(e.c, "stop"), step > 0 ? n : -1);
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(seq[size_t(i)]);
      if (step > n || step < -n) break;  // one item; and i += step must not overflow
    }
    if (obj.is_list()) return Value(std::move(out));
    std::string s;
    for (const Value& c : out) s += c.as_string();
    return Value(std::move(s));
  }

  Value eval_call(const Expr& e) {
    if (e.a->kind == Expr::Kind::Attr) {
      const Value obj = eval(*e.a->a);
      const Value member = get_attr(obj, e.a->name);
      if (!member.is_function()) {
        CallArgs args = eval_args(e);
        Value result;
        try {
          if (call_method(obj, e.a->name, args, result)) return result;
        } catch (const BuiltinError& err) {
          fail(e.at, err.what());
        }
        fail(e.a->at, std::string("a ") + obj.type_name() + " has no method '" + e.a->name + "'");
      }
      CallArgs args = eval_args(e);
      return invoke(member, args, e.at);
    }
    const Value fn = eval(*e.a);
    if (fn.is_undefined() && e.a->kind == Expr::Kind::Name) fail(e.at, "unknown function '" + e.a->name + "'");
    CallArgs args = eval_args(e);
    return invoke(fn, args, e.at);
  }

  Value unary(const Expr& e) {
    const Value v = eval(*e.a);
    if (e.name == "not") return Value(!v.truthy());
    if (!v.is_number() && !v.is_bool()) fail(e.at, std::string("bad operand for unary ") + e.name + ": " + v.type_name());
    if (e.name == "+") return v.is_bool() ? Value(int64_t(v.as_bool())) : v;
    if (v.is_float()) return Value(-v.as_double());
    const int64_t x = v.is_bool() ? int64_t(v.as_bool()) : v.as_int();
    if (x == INT64_MIN) fail(e.at, "integer overflow in unary -");
    return Value(-x);
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value a = eval(*e.a);
    if (op == "and") return a.truthy() ? eval(*e.b) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.b);
    const Value b = eval(*e.b);
    try {
      if (op == "==") return Value(a == b);
      if (op == "!=") return Value(!(a == b));
      if (op == "<") return Value(less_than(a, b));
      if (op == ">") return Value(less_than(b, a));
      if (op == "<=") return Value(!less_than(b, a));
      if (op == ">=") return Value(!less_than(a, b));
      if (op == "in") return Value(contains(b, a));
      if (op == "not in") return Value(!contains(b, a));
      if (op == "~") {
        std::string l = a.str();
        const std::string r = b.str();
        charge_bytes(l.size() + r.size());
        return Value(l + r);
      }
      return arithmetic(op, a, b);
    } catch (const BuiltinError& err) {
      fail(e.at, err.what());
    }
  }

  static Value repeat(const Value& seq, int64_t n) {
    if (n < 0) n = 0;
    // An empty operand repeats to itself: no loop of n (up to 2^63) empty appends,
    // which the byte budget cannot see (found by fuzzing: '' * 9223307268 ran for minutes).
    if (seq.is_string() ? seq.as_string().empty() : seq.as_list().empty()) n = 0;
    charge_product(uint64_t(n), seq.is_string() ? seq.as_string().size() : seq.as_list().size() * sizeof(Value));
    if (seq.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += seq.as_string();
      return Value(std::move(s));
    }
    List l;
    for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq.as_list().begin(), seq.as_list().end());
    return Value(std::move(l));
  }

  static Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (op == "+") {
      if ((a.is_string() || a.is_undefined()) && (b.is_string() || b.is_undefined())) {
        charge_bytes(a.str().size() + b.str().size());
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list()) {
        charge_product(a.as_list().size() + b.as_list().size(), sizeof(Value));
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(l));
      }
    }
    if (op == "*" && (a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
    if (op == "*" && a.is_int() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
    const auto num = [](const Value& v) { return v.is_number() || v.is_bool(); };
    if (!num(a) || !num(b))
      throw BuiltinError("unsupported operand types for " + op + ": " + a.type_name() + " and " + b.type_name());
    const auto as_i = [](const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); };
    const auto as_d = [](const Value& v) { return v.is_bool() ? double(v.as_bool()) : v.as_double(); };
    const bool ints = !a.is_float() && !b.is_float();
    if ((op == "/" || op == "//" || op == "%") && as_d(b) == 0) throw BuiltinError("division by zero");
    if (ints) {
      // Python's integers do not overflow; ours are 64-bit and say so instead of wrapping.
      const int64_t x = as_i(a), y = as_i(b);
      int64_t r = 0;
      const auto overflow = [&] { return BuiltinError("integer overflow in " + op); };
      if (op == "+") { if (__builtin_add_overflow(x, y, &r)) throw overflow(); return Value(r); }
      if (op == "-") { if (__builtin_sub_overflow(x, y, &r)) throw overflow(); return Value(r); }
      if (op == "*") { if (__builtin_mul_overflow(x, y, &r)) throw overflow(); return Value(r); }
      if (op == "/") return Value(double(x) / double(y));
      if (op == "//" || op == "%") {
        if (y == -1) {  // x / -1 overflows for INT64_MIN; x % -1 is 0
          if (op == "%") return Value(int64_t(0));
          if (__builtin_sub_overflow(int64_t(0), x, &r)) throw overflow();
          return Value(r);
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // floor, as Python
        return Value(op == "//" ? q : m);
      }
      if (op == "**" && y >= 0) {
        const double p = std::pow(double(x), double(y));
        if (!(std::fabs(p) < 9.2e18)) throw overflow();
        return Value(int64_t(std::llround(p)));
      }
    }
    const double x = as_d(a), y = as_d(b);
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") return Value(x / y);
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") return Value(x - y * std::floor(x / y));
    if (op == "**") return Value(std::pow(x, y));
    throw BuiltinError("unknown operator " + op);
  }

  std::vector<Scope> scopes_;
  Budget budget_;
  Budget* outer_ = nullptr;  // a render inside a render (a builtin rendering a template) restores it
  std::vector<Value> assigned_namespaces_;  // every namespace an attribute was set on
  std::unordered_set<const Dict*> assigned_seen_;
};

}  // namespace

Template::Template(const std::string& source, TemplateOptions options) : options_(options) {
  LexOptions lex_options;
  lex_options.trim_blocks = options.trim_blocks;
  lex_options.lstrip_blocks = options.lstrip_blocks;
  body_ = std::make_shared<const Body>(parse(lex(source, lex_options)));
}

std::string Template::render(const Value& context) const {
  Evaluator ev(context, options_);
  std::string out;
  ev.exec(*body_, out);
  return out;
}

}  // namespace spool::jinja
