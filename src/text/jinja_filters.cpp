// Filters (x | name(args)) and tests (x is name) of the Jinja-subset template
// engine. tojson writes JSON as Hugging Face's chat-template tojson does
// (ensure_ascii off, keys in insertion order unless sort_keys).
#include <algorithm>
#include <cmath>
#include <map>

#include "text/jinja_builtins.h"

namespace spool::jinja {
namespace {

using FilterFn = Value (*)(const Value& v, CallArgs& a);

const Value& need_string(const Value& v, const char* filter) {
  if (!v.is_string()) throw BuiltinError(std::string(filter) + " needs a string, not " + v.type_name());
  return v;
}

// An attribute path "a.b" or index of an item, as map/sort/selectattr take it.
Value attribute(const Value& item, const Value& path) {
  if (path.is_int()) return item.is_list() && path.as_int() < int64_t(item.as_list().size())
                                ? item.as_list()[size_t(path.as_int())] : Value();
  Value cur = item;
  const std::string p = path.str();
  for (size_t b = 0; b <= p.size();) {
    size_t e = p.find('.', b);
    if (e == std::string::npos) e = p.size();
    const Value* v = cur.is_dict() ? cur.as_dict().find(p.substr(b, e - b)) : nullptr;
    cur = v ? *v : Value();
    b = e + 1;
  }
  return cur;
}

// The filter's remaining arguments after the first `skip` positional ones.
CallArgs rest(const CallArgs& a, size_t skip) {
  CallArgs r;
  for (size_t i = skip; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  return r;
}

Value f_tojson(const Value& v, CallArgs& a) {
  const Value indent = arg(a, 0, "indent");
  Value x = v;
  if (arg(a, 99, "sort_keys").truthy() && v.is_dict()) {  // top level only
    Dict d = v.as_dict();
    std::sort(d.items.begin(), d.items.end(), [](auto& l, auto& r) { return l.first < r.first; });
    x = Value(std::move(d));
  }
  // Indents past 64 spaces are clamped: nothing reads them, and a huge one would fill memory.
  const int n = indent.is_int() ? int(std::clamp<int64_t>(indent.as_int(), -1, 64)) : -1;
  std::string out = x.to_json(n);
  charge_bytes(out.size());
  return Value(std::move(out));
}

Value f_length(const Value& v, CallArgs&) {
  if (v.is_string()) return Value(int64_t(v.iterate().size()));
  if (v.is_list()) return Value(int64_t(v.as_list().size()));
  if (v.is_dict()) return Value(int64_t(v.as_dict().items.size()));
  if (v.is_undefined()) return Value(int64_t(0));
  throw BuiltinError(std::string("length of a ") + v.type_name() + " is undefined");
}

Value f_default(const Value& v, CallArgs& a) {
  const bool boolean = arg(a, 1, "boolean").truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value(""));
  return v;
}

Value f_join(const Value& v, CallArgs& a) {
  const std::string sep = arg(a, 0, "d", Value("")).str();
  const Value attr = arg(a, 1, "attribute");
  std::string out;
  const List items = v.iterate();
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string piece = (attr.is_undefined() ? items[i] : attribute(items[i], attr)).str();
    charge_bytes(sep.size() + piece.size());
    out += (i ? sep : "") + piece;
  }
  return Value(std::move(out));
}

Value f_first(const Value& v, CallArgs&) {
  const List items = v.iterate();
  return items.empty() ? Value() : items.front();
}

Value f_last(const Value& v, CallArgs&) {
  const List items = v.iterate();
  return items.empty() ? Value() : items.back();
}

Value f_items(const Value& v, CallArgs& a) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) throw BuiltinError(std::string("items needs a dict, not ") + v.type_name());
  Value r;
  call_method(v, "items", a, r);
  return r;
}

Value f_int(const Value& v, CallArgs& a) {
  const Value fallback = arg(a, 0, "default", Value(int64_t(0)));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t(v.as_bool()));
  if (v.is_float()) return Value(int64_t(v.as_double()));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = strip(v.as_string(), Value(), true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(int64_t(d));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value f_float(const Value& v, CallArgs& a) {
  const Value fallback = arg(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_bool()) return Value(double(v.as_bool()));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = strip(v.as_string(), Value(), true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value f_round(const Value& v, CallArgs& a) {
  if (!v.is_number()) throw BuiltinError(std::string("round needs a number, not ") + v.type_name());
  const Value precision = arg(a, 0, "precision", Value(int64_t(0)));
  const std::string method = arg(a, 1, "method", Value("common")).str();
  const double scale = std::pow(10.0, precision.is_int() ? double(precision.as_int()) : 0.0);
  const double x = v.as_double() * scale;
  double r;
  if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else if (method == "common") r = std::nearbyint(x);  // Python rounds half to even
  else throw BuiltinError("round: method must be common, ceil or floor");
  return Value(r / scale);
}

Value f_map(const Value& v, CallArgs& a) {
  const Value attr = arg(a, 99, "attribute");
  List out;
  for (const Value& item : v.iterate()) {
    if (!attr.is_undefined()) {
      Value x = attribute(item, attr);
      out.push_back(x.is_undefined() ? arg(a, 99, "default") : x);
    } else {
      if (a.positional.empty()) throw BuiltinError("map needs a filter name or attribute=");
      CallArgs fa = rest(a, 1);
      out.push_back(apply_filter(a.positional[0].str(), item, fa));
    }
  }
  return Value(std::move(out));
}

// select/reject (test on the item) and selectattr/rejectattr (test on an attribute).
Value select(const Value& v, CallArgs& a, bool keep, bool by_attr) {
  List out;
  const size_t name_at = by_attr ? 1 : 0;
  for (const Value& item : v.iterate()) {
    const Value x = by_attr ? attribute(item, arg(a, 0, "attribute")) : item;
    bool ok;
    if (a.positional.size() > name_at) {
      CallArgs ta = rest(a, name_at + 1);
      ok = apply_test(a.positional[name_at].str(), x, ta);
    } else {
      ok = x.truthy();
    }
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_sort(const Value& v, CallArgs& a) {
  const bool reverse = arg(a, 0, "reverse").truthy();
  const bool case_sensitive = arg(a, 1, "case_sensitive").truthy();
  const Value attr = arg(a, 2, "attribute");
  List items = v.iterate();
  const auto key = [&](const Value& x) {
    Value k = attr.is_undefined() ? x : attribute(x, attr);
    return (!case_sensitive && k.is_string()) ? Value(to_lower(k.as_string())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& l, const Value& r) {
    return reverse ? less_than(key(r), key(l)) : less_than(key(l), key(r));
  });
  return Value(std::move(items));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  if (!v.is_dict()) throw BuiltinError("dictsort needs a dict");
  Dict d = v.as_dict();
  const bool by_value = arg(a, 1, "by").str() == "value", reverse = arg(a, 2, "reverse").truthy();
  std::stable_sort(d.items.begin(), d.items.end(), [&](const auto& l, const auto& r) {
    const bool lt = by_value ? less_than(l.second, r.second) : l.first < r.first;
    const bool gt = by_value ? less_than(r.second, l.second) : r.first < l.first;
    return reverse ? gt : lt;
  });
  List out;
  for (auto& [k, x] : d.items) out.emplace_back(List{Value(k), x});
  return Value(std::move(out));
}

Value f_reverse(const Value& v, CallArgs&) {
  List items = v.iterate();
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value(std::move(items));
  std::string s;
  for (const Value& c : items) s += c.as_string();
  return Value(std::move(s));
}

Value f_unique(const Value& v, CallArgs&) {
  List out;
  for (const Value& x : v.iterate())
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return Value(std::move(out));
}

Value f_sum(const Value& v, CallArgs& a) {
  const Value attr = arg(a, 0, "attribute");
  Value total = arg(a, 1, "start", Value(int64_t(0)));
  for (const Value& x : v.iterate()) {
    const Value y = attr.is_undefined() ? x : attribute(x, attr);
    if (!y.is_number()) throw BuiltinError("sum needs numbers");
    total = (total.is_int() && y.is_int()) ? Value(total.as_int() + y.as_int()) : Value(total.as_double() + y.as_double());
  }
  return total;
}

Value min_max(const Value& v, bool want_max) {
  const List items = v.iterate();
  if (items.empty()) return Value();
  Value best = items[0];
  for (const Value& x : items)
    if (want_max ? less_than(best, x) : less_than(x, best)) best = x;
  return best;
}

Value f_escape(const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_indent(const Value& v, CallArgs& a) {
  const Value w = arg(a, 0, "width", Value(int64_t(4)));
  const int64_t width = w.is_int() ? std::max<int64_t>(0, w.as_int()) : 4;
  if (!w.is_string()) charge_bytes(uint64_t(width));
  const std::string pad = w.is_string() ? w.as_string() : std::string(size_t(width), ' ');
  const bool first = arg(a, 1, "first").truthy(), blank = arg(a, 2, "blank").truthy();
  const std::string s = v.str();
  std::string out;
  size_t b = 0;
  for (bool is_first = true; b <= s.size(); is_first = false) {
    size_t e = s.find('\n', b);
    const bool last = e == std::string::npos;
    if (last) e = s.size();
    const std::string line = s.substr(b, e - b);
    charge_bytes(pad.size() + line.size() + 1);
    if ((!is_first || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (last) break;
    out += '\n';
    b = e + 1;
  }
  return Value(std::move(out));
}

// Jinja's title filter: words start after whitespace, '-', or an opening bracket.
Value f_title(const Value& v, CallArgs&) {
  std::string out = to_lower(v.str());
  bool word_start = true;
  for (char& c : out) {
    if (word_start && c >= 'a' && c <= 'z') c = char(c - 32);
    word_start = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '-' || c == '(' || c == '{' || c == '[' ||
                 c == '<' || (word_start && !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')));
  }
  return Value(std::move(out));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"trim", [](const Value& v, CallArgs& a) { return Value(strip(v.str(), arg(a, 0, "chars"), true, true)); }},
      {"tojson", f_tojson},
      {"length", f_length},
      {"count", f_length},
      {"default", f_default},
      {"d", f_default},
      {"upper", [](const Value& v, CallArgs&) { return Value(to_upper(v.str())); }},
      {"lower", [](const Value& v, CallArgs&) { return Value(to_lower(v.str())); }},
      {"title", f_title},
      {"capitalize", [](const Value& v, CallArgs&) { return Value(capitalize(v.str())); }},
      {"replace", [](const Value& v, CallArgs& a) {
         const Value n = arg(a, 2, "count");
         return Value(replace_all(need_string(v, "replace").as_string(), arg(a, 0, "old").str(),
                                  arg(a, 1, "new").str(), n.is_int() ? n.as_int() : -1));
       }},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"list", [](const Value& v, CallArgs&) { return Value(v.iterate()); }},
      {"items", f_items},
      {"string", [](const Value& v, CallArgs&) { return Value(v.str()); }},
      {"int", f_int},
      {"float", f_float},
      {"round", f_round},
      {"abs", [](const Value& v, CallArgs&) {
         if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         if (v.is_float()) return Value(std::fabs(v.as_double()));
         throw BuiltinError("abs needs a number");
       }},
      {"map", f_map},
      {"select", [](const Value& v, CallArgs& a) { return select(v, a, true, false); }},
      {"reject", [](const Value& v, CallArgs& a) { return select(v, a, false, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select(v, a, false, true); }},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"reverse", f_reverse},
      {"unique", f_unique},
      {"sum", f_sum},
      {"min", [](const Value& v, CallArgs&) { return min_max(v, false); }},
      {"max", [](const Value& v, CallArgs&) { return min_max(v, true); }},
      {"safe", [](const Value& v, CallArgs&) { return v; }},
      {"escape", f_escape},
      {"e", f_escape},
      {"indent", f_indent},
      {"wordcount", [](const Value& v, CallArgs&) {
         CallArgs none;
         Value words;
         call_method(Value(v.str()), "split", none, words);
         return Value(int64_t(words.as_list().size()));
       }},
  };
  return table;
}

using TestFn = bool (*)(const Value& v, CallArgs& a);

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"boolean", [](const Value& v, CallArgs&) { return v.is_bool(); }},
      {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](const Value& v, CallArgs&) { return v.is_int(); }},
      {"float", [](const Value& v, CallArgs&) { return v.is_float(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_dict(); }},
      {"iterable", [](const Value& v, CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"sequence", [](const Value& v, CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"callable", [](const Value& v, CallArgs&) { return v.is_function(); }},
      {"sameas", [](const Value& v, CallArgs& a) { return v.same_as(arg(a, 0, "other")); }},
      {"eq", [](const Value& v, CallArgs& a) { return v == arg(a, 0, "b"); }},
      {"ne", [](const Value& v, CallArgs& a) { return !(v == arg(a, 0, "b")); }},
      {"lt", [](const Value& v, CallArgs& a) { return less_than(v, arg(a, 0, "b")); }},
      {"gt", [](const Value& v, CallArgs& a) { return less_than(arg(a, 0, "b"), v); }},
      {"le", [](const Value& v, CallArgs& a) { return !less_than(arg(a, 0, "b"), v); }},
      {"ge", [](const Value& v, CallArgs& a) { return !less_than(v, arg(a, 0, "b")); }},
      {"in", [](const Value& v, CallArgs& a) { return contains(arg(a, 0, "seq"), v); }},
      {"even", [](const Value& v, CallArgs&) { return v.is_int() && v.as_int() % 2 == 0; }},
      {"odd", [](const Value& v, CallArgs&) { return v.is_int() && v.as_int() % 2 != 0; }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         const Value n = arg(a, 0, "num");
         return v.is_int() && n.is_int() && n.as_int() != 0 && v.as_int() % n.as_int() == 0;
       }},
      {"lower", [](const Value& v, CallArgs&) { return v.is_string() && to_lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value& v, CallArgs&) { return v.is_string() && to_upper(v.as_string()) == v.as_string(); }},
      {"escaped", [](const Value&, CallArgs&) { return false; }},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) throw BuiltinError("unknown filter '" + name + "'");
  return it->second(v, args);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  static const std::map<std::string, std::string> aliases = {
      {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"}, {">", "gt"},
      {"<=", "le"}, {">=", "ge"}, {"lessthan", "lt"}, {"greaterthan", "gt"}};
  const auto alias = aliases.find(name);
  const std::string& key = alias == aliases.end() ? name : alias->second;
  const auto& table = tests();
  const auto it = table.find(key);
  if (it == table.end()) throw BuiltinError("unknown test '" + name + "'");
  return it->second(v, args);
}

}  // namespace spool::jinja
