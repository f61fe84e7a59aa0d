// The value type of the Jinja-subset template engine (chat templates): undefined,
// none, bool, int, float, string, list, dict (insertion-ordered, string keys) and
// callables. Lists, dicts and namespaces are shared by reference as in Python, so
// `ns.a = 1` inside a loop is seen outside it. Conversion to and from JSON, and
// Python-style printing (str() and repr()) as templates see them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace spool::jinja {

class Value;
using List = std::vector<Value>;

// Arguments of a call: positional then keyword, as written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};
using Function = std::function<Value(CallArgs&)>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // undefined
  static Value none();
  Value(bool b) : data_(b) {}
  Value(int v) : data_(int64_t(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(List l) : data_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : data_(std::make_shared<Dict>(std::move(d))) {}
  Value(Function f) : data_(std::make_shared<Function>(std::move(f))) {}
  // Objects keep their key order with ordered_json (Python dicts do); json sorts keys.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_function() const { return kind() == Kind::Function; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_double() const;  // int or float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(data_); }

  bool truthy() const;
  // Python str(): what {{ v }} prints. Undefined prints as "".
  std::string str() const;
  // Python repr(): how values print inside lists and dicts.
  std::string repr() const;
  const char* type_name() const;
  // Same object (lists, dicts, functions) or equal scalars.
  bool same_as(const Value& o) const;
  // The elements a for loop visits: list items, dict keys, string characters (UTF-8).
  List iterate() const;

  // JSON as Python's json.dumps writes it with ensure_ascii=False: indent < 0 is one
  // line with ", " and ": " separators; indent >= 0 puts one item per line.
  std::string to_json(int indent = -1) const;

 private:
  struct NoneTag {
    bool operator==(const NoneTag&) const = default;
  };
  using Data = std::variant<std::monostate, NoneTag, bool, int64_t, double, std::string, std::shared_ptr<List>,
                            std::shared_ptr<Dict>, std::shared_ptr<Function>>;
  Data data_;
};

bool operator==(const Value& a, const Value& b);
// Python float repr: shortest round-trip digits, always with a '.' or exponent.
std::string format_float(double v);

}  // namespace spool::jinja
