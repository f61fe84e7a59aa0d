// Methods of template values (str.startswith, dict.items, ...), global functions
// (range, namespace, dict, raise_exception, strftime_now), and the Python string
// and comparison helpers the filters share.
#include <algorithm>
#include <ctime>

#include "text/jinja_builtins.h"

namespace spool::jinja {

Value arg(CallArgs& args, size_t i, const char* name, Value fallback) {
  for (auto& [k, v] : args.named)
    if (k == name) return v;
  return i < args.positional.size() ? args.positional[i] : fallback;
}

bool contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) throw BuiltinError(std::string("'in <string>' needs a string, not ") + item.type_name());
    return c.as_string().find(item.as_string()) != std::string::npos;
  }
  if (c.is_list()) return std::any_of(c.as_list().begin(), c.as_list().end(), [&](const Value& v) { return v == item; });
  if (c.is_dict()) return item.is_string() && c.as_dict().find(item.as_string()) != nullptr;
  if (c.is_undefined() || c.is_none()) return false;
  throw BuiltinError(std::string("'in' needs a string, list or dict, not ") + c.type_name());
}

bool less_than(const Value& a, const Value& b) {
  const auto num = [](const Value& v) { return v.is_number() || v.is_bool(); };
  const auto dbl = [](const Value& v) { return v.is_bool() ? double(v.as_bool()) : v.as_double(); };
  if (num(a) && num(b)) return dbl(a) < dbl(b);
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_than(x[i], y[i])) return true;
      if (less_than(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw BuiltinError(std::string("cannot compare ") + a.type_name() + " and " + b.type_name());
}

// ---- strings ----------------------------------------------------------------

namespace {
bool is_py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char up(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char low(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }
}  // namespace

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const bool ws = !chars.is_string();
  const auto drop = [&](char c) { return ws ? is_py_space(c) : chars.as_string().find(c) != std::string::npos; };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string to_upper(std::string s) {
  for (char& c : s) c = up(c);
  return s;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = low(c);
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = to_lower(s);
  if (!out.empty()) out[0] = up(out[0]);
  return out;
}

// str.title(): a letter after a non-letter starts a word.
std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    c = prev_alpha ? low(c) : up(c);
    prev_alpha = is_alpha(c);
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    charge_bytes(to.size() + 1);
    if (from.empty()) {  // Python inserts `to` between characters
      if (pos > s.size()) break;
      out += to;
      if (pos < s.size()) out += s[pos];
      ++pos;
      continue;
    }
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  if (pos < s.size()) out.append(s, pos);
  return out;
}

namespace {

List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i == s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        out.emplace_back(strip(s.substr(i), Value(), false, true));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  if (d.empty()) throw BuiltinError("split(): empty separator");
  size_t pos = 0;
  for (size_t hit; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (hit = s.find(d, pos)) != std::string::npos;
       pos = hit + d.size())
    out.emplace_back(s.substr(pos, hit - pos));
  out.emplace_back(s.substr(pos));
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  const auto one = [&](const Value& a) {
    if (!a.is_string()) throw BuiltinError("startswith/endswith need a string");
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

// str.format with {}, {0} and {name} fields; format specs after ':' are ignored.
std::string format(const std::string& f, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) throw BuiltinError("format(): unmatched '{'");
    std::string field = f.substr(i + 1, close - i - 1);
    field = field.substr(0, field.find_first_of(":!"));
    Value v;
    if (field.empty()) v = arg(args, auto_index++, "");
    else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = arg(args, std::stoul(field), "");
    else v = arg(args, size_t(-1), field.c_str());
    out += v.str();
    i = close;
  }
  return out;
}

bool string_method(const std::string& s, const std::string& name, CallArgs& a, Value& r) {
  if (name == "startswith" || name == "endswith") r = Value(affix_match(s, arg(a, 0, "prefix"), name == "startswith"));
  else if (name == "strip") r = Value(strip(s, arg(a, 0, "chars"), true, true));
  else if (name == "lstrip") r = Value(strip(s, arg(a, 0, "chars"), true, false));
  else if (name == "rstrip") r = Value(strip(s, arg(a, 0, "chars"), false, true));
  else if (name == "split") {
    const Value n = arg(a, 1, "maxsplit", Value(int64_t(-1)));
    r = Value(split(s, arg(a, 0, "sep"), n.is_int() ? n.as_int() : -1));
  } else if (name == "replace") {
    const Value from = arg(a, 0, "old"), to = arg(a, 1, "new"), n = arg(a, 2, "count", Value(int64_t(-1)));
    if (!from.is_string() || !to.is_string()) throw BuiltinError("replace() needs two strings");
    r = Value(replace_all(s, from.as_string(), to.as_string(), n.is_int() ? n.as_int() : -1));
  } else if (name == "upper") r = Value(to_upper(s));
  else if (name == "lower") r = Value(to_lower(s));
  else if (name == "title") r = Value(python_title(s));
  else if (name == "capitalize") r = Value(capitalize(s));
  else if (name == "format") r = Value(format(s, a));
  else if (name == "find") {
    const Value x = arg(a, 0, "sub");
    const size_t hit = x.is_string() ? s.find(x.as_string()) : std::string::npos;
    r = Value(hit == std::string::npos ? int64_t(-1) : int64_t(hit));
  } else if (name == "count") {
    const Value x = arg(a, 0, "sub");
    int64_t n = 0;
    if (x.is_string() && !x.as_string().empty())
      for (size_t p = s.find(x.as_string()); p != std::string::npos; p = s.find(x.as_string(), p + x.as_string().size()))
        ++n;
    r = Value(n);
  } else if (name == "join") {
    std::string out;
    const List items = arg(a, 0, "iterable").iterate();
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string piece = items[i].str();
      charge_bytes(s.size() + piece.size());
      out += (i ? s : "") + piece;
    }
    r = Value(std::move(out));
  } else if (name == "splitlines") {
    List lines = split(s, Value("\n"), -1);
    if (!lines.empty() && lines.back().as_string().empty()) lines.pop_back();
    r = Value(std::move(lines));
  } else if (name == "isdigit") {
    r = Value(!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit));
  } else {
    return false;
  }
  return true;
}

bool dict_method(const Dict& d, const std::string& name, CallArgs& a, Value& r) {
  if (name == "items") {
    List l;
    for (const auto& [k, v] : d.items) l.emplace_back(List{Value(k), v});
    r = Value(std::move(l));
  } else if (name == "keys" || name == "values") {
    List l;
    for (const auto& [k, v] : d.items) l.push_back(name == "keys" ? Value(k) : v);
    r = Value(std::move(l));
  } else if (name == "get") {
    const Value key = arg(a, 0, "key");
    const Value* v = key.is_string() ? d.find(key.as_string()) : nullptr;
    r = v ? *v : arg(a, 1, "default", Value::none());
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool call_method(const Value& obj, const std::string& name, CallArgs& args, Value& result) {
  if (obj.is_string()) return string_method(obj.as_string(), name, args, result);
  if (obj.is_dict()) return dict_method(obj.as_dict(), name, args, result);
  if (obj.is_list() && (name == "index" || name == "count")) {
    const Value x = arg(args, 0, "value");
    const List& l = obj.as_list();
    const int64_t n = std::count(l.begin(), l.end(), x);
    if (name == "count") result = Value(n);
    else if (n == 0) throw BuiltinError("list.index(): value is not in the list");
    else result = Value(int64_t(std::find(l.begin(), l.end(), x) - l.begin()));
    return true;
  }
  return false;
}

// ---- globals ------------------------------------------------------------------

namespace {

Value range(CallArgs& a) {
  int64_t v[3] = {0, 0, 1};
  const size_t n = a.positional.size();
  if (n < 1 || n > 3) throw BuiltinError("range() takes 1 to 3 arguments");
  for (size_t i = 0; i < n; ++i) {
    if (!a.positional[i].is_int()) throw BuiltinError("range() arguments must be integers");
    v[n == 1 ? 1 : i] = a.positional[i].as_int();
  }
  if (v[2] == 0) throw BuiltinError("range() step cannot be zero");
  // The item count in 128 bits: start, stop and step may be any 64-bit values.
  const __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1];
  const __int128 step = v[2] > 0 ? (__int128)v[2] : -(__int128)v[2];
  const __int128 count = span <= 0 ? 0 : (span + step - 1) / step;
  if (count > kMaxRangeItems)
    throw BuiltinError("range() of " + std::to_string((long long)std::min<__int128>(count, INT64_MAX)) +
                       " items; at most " + std::to_string(kMaxRangeItems) + " are allowed");
  charge_product(uint64_t(count), sizeof(Value));
  List out;
  for (int64_t k = 0; k < (int64_t)count; ++k) out.emplace_back(int64_t(v[0] + (__int128)k * v[2]));
  return Value(std::move(out));
}

Value make_dict(CallArgs& a, bool is_namespace) {
  Dict d;
  d.is_namespace = is_namespace;
  for (const Value& p : a.positional)
    if (p.is_dict())
      for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
  for (auto& [k, v] : a.named) d.set(k, v);
  return Value(std::move(d));
}

Value strftime_now(CallArgs& a) {
  const Value fmt = arg(a, 0, "format");
  if (!fmt.is_string()) throw BuiltinError("strftime_now() needs a format string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, fmt.as_string().c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

Dict global_functions() {
  Dict g;
  g.set("range", Value(Function(range)));
  g.set("namespace", Value(Function([](CallArgs& a) { return make_dict(a, true); })));
  g.set("dict", Value(Function([](CallArgs& a) { return make_dict(a, false); })));
  g.set("raise_exception", Value(Function([](CallArgs& a) -> Value {
          throw BuiltinError("raise_exception: " + arg(a, 0, "message").str());
        })));
  g.set("strftime_now", Value(Function(strftime_now)));
  return g;
}

}  // namespace spool::jinja
