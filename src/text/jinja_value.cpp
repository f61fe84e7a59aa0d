// Value: kinds, truthiness, Python-style str()/repr(), equality and JSON
// conversion for the Jinja-subset template engine.
#include "text/jinja_value.h"

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace spool::jinja {

namespace {

// Namespaces are shared by reference, so a template can make one hold itself
// ({% set ns.me = ns %}); printing, comparing or serialising such a value
// stops at this depth with an error instead of recursing off the stack.
constexpr int kMaxValueDepth = 64;

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw Error("template error: a value nested more than " + std::to_string(kMaxValueDepth) +
                " levels deep (a namespace that contains itself?)");
}

}  // namespace

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::none() {
  Value v;
  v.data_ = NoneTag{};
  return v;
}

namespace {

template <class Json>
Value value_from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(int64_t(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(value_from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), value_from_json(it.value()));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

Value::Kind Value::kind() const { return Kind(data_.index()); }

double Value::as_double() const { return is_int() ? double(as_int()) : std::get<double>(data_); }

bool Value::truthy() const {
  switch (kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return as_bool();
    case Kind::Int: return as_int() != 0;
    case Kind::Float: return as_double() != 0.0;
    case Kind::String: return !as_string().empty();
    case Kind::List: return !as_list().empty();
    case Kind::Dict: return !as_dict().items.empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string repr_string(const std::string& s) {
  const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, int depth, std::string& out) {
  check_depth(depth);
  const auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * d, ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : format_float(d);
      return;
    }
    case Value::Kind::String: json_string(v.as_string(), out); return;
    case Value::Kind::List: {
      const List& l = v.as_list();
      if (l.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_value(l[i], indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      const Dict& d = v.as_dict();
      if (d.items.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(d.items[i].first, out);
        out += ": ";
        json_value(d.items[i].second, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Function: out += "null"; return;
  }
}

}  // namespace

std::string Value::str() const {
  switch (kind()) {
    case Kind::Undefined: return "";
    case Kind::String: return as_string();
    default: return repr();
  }
}

namespace {
std::string repr_at(const Value& v, int depth);
}

std::string Value::repr() const { return repr_at(*this, 0); }

namespace {
std::string repr_at(const Value& v, int depth) {
  using Kind = Value::Kind;
  check_depth(depth);
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return format_float(v.as_double());
    case Kind::String: return repr_string(v.as_string());
    case Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < v.as_list().size(); ++i) out += (i ? ", " : "") + repr_at(v.as_list()[i], depth + 1);
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = "{";
      const Dict& d = v.as_dict();
      for (size_t i = 0; i < d.items.size(); ++i)
        out += (i ? ", " : "") + repr_string(d.items[i].first) + ": " + repr_at(d.items[i].second, depth + 1);
      return out + "}";
    }
    case Kind::Function: return "<function>";
  }
  return "";
}
}  // namespace

const char* Value::type_name() const {
  static const char* names[] = {"undefined", "none", "bool", "int", "float", "string", "list", "dict", "function"};
  return names[data_.index()];
}

bool Value::same_as(const Value& o) const {
  if (kind() != o.kind()) return false;
  if (is_list()) return &as_list() == &o.as_list();
  if (is_dict()) return &as_dict() == &o.as_dict();
  if (is_function()) return &as_function() == &o.as_function();
  return *this == o;
}

List Value::iterate() const {
  switch (kind()) {
    case Kind::List: return as_list();
    case Kind::Dict: {
      List keys;
      for (const auto& kv : as_dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Kind::String: {
      List chars;
      const std::string& s = as_string();
      for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        const unsigned char c = s[i];
        if (c >= 0xF0) n = 4;
        else if (c >= 0xE0) n = 3;
        else if (c >= 0xC0) n = 2;
        chars.emplace_back(s.substr(i, n));
        i += n;
      }
      return chars;
    }
    default: return {};
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  json_value(*this, indent, 0, out);
  return out;
}

namespace {
bool equal_at(const Value& a, const Value& b, int depth);
}

bool operator==(const Value& a, const Value& b) { return equal_at(a, b, 0); }

namespace {
bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.is_bool() && b.is_number()) return double(a.as_bool()) == b.as_double();
  if (a.is_number() && b.is_bool()) return a.as_double() == double(b.as_bool());
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return a.as_bool() == b.as_bool();
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equal_at(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

}  // namespace

}  // namespace spool::jinja
