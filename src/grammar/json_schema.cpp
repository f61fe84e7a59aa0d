// The schema walk: each subschema becomes a GBNF expression; objects,
// arrays, enums and $ref targets get named rules. Primitive rules are shared.
#include "grammar/json_schema.h"

#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "grammar/grammar.h"
#include "grammar/number_range.h"
#include "grammar/regex.h"

namespace spool::grammar {

using json = nlohmann::ordered_json;

namespace {

const char* kFreeSpace = R"(ws ::= | " " | "\n" [ \t]{0,20}
)";
const char* kNoSpace = "ws ::= \"\"\n";
const char* kPrimitives = R"(json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-member ::= json-string ws ":" ws json-value ws
json-object ::= "{" ws (json-member ("," ws json-member)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

const std::set<std::string> kUnsupported = {
    "multipleOf", "not", "if", "then", "else",
    "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies", "minProperties",
    "maxProperties", "uniqueItems", "contains", "minContains", "maxContains", "prefixItems", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems"};

std::string literal(const std::string& bytes) { return "\"" + gbnf_escape(bytes) + "\""; }

class SchemaConverter {
 public:
  SchemaConverter(const json& root, const std::string& prefix) : root_(root), prefix_(prefix) {}

  std::string convert(const JsonGbnfOptions& o) {
    const std::string e = visit(root_, "#", "root");
    out_ = o.root + " ::= " + e + "\n" + out_;
    if (o.primitives) out_ += std::string(o.compact ? kNoSpace : kFreeSpace) + kPrimitives;
    return out_;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& msg) const {
    throw GrammarError("json schema at " + where + ": " + msg);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += (std::isalnum((unsigned char)c) ? c : '-');
    if (name.empty() || name.size() > 40) name = "schema";
    name = prefix_ + "-" + name + "-" + std::to_string(n_rules_++);
    out_ += name + " ::= " + body + "\n";
    return name;
  }

  const json& resolve(const std::string& ref, const std::string& where) const {
    if (ref == "#") return root_;
    if (!ref.starts_with("#/")) fail(where, "only local $ref (\"#/...\") is supported, got '" + ref + "'");
    try {
      const json& target = root_.at(json::json_pointer(ref.substr(1)));
      return target;
    } catch (const std::exception&) {
      fail(where, "$ref '" + ref + "' does not point into this schema");
    }
  }

  std::string visit_ref(const std::string& ref, const std::string& where) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json& target = resolve(ref, where);
    std::string hint = ref.substr(ref.find_last_of('/') + 1);
    std::string name;
    for (char c : hint) name += (std::isalnum((unsigned char)c) ? c : '-');
    name = prefix_ + "-ref-" + (name.empty() ? std::string("root") : name) + "-" + std::to_string(n_rules_++);
    refs_[ref] = name;  // before visiting: recursion refers to the name
    const std::string body = visit(target, ref, hint);
    out_ += name + " ::= " + body + "\n";
    return name;
  }

  std::string alternatives(const json& list, const char* kw, const std::string& where) {
    if (!list.is_array() || list.empty()) fail(where, std::string("'") + kw + "' must be a non-empty array");
    std::string body;
    for (size_t k = 0; k < list.size(); ++k)
      body += (k ? " | " : "") + visit(list[k], where + "/" + kw + "/" + std::to_string(k), kw);
    return "(" + body + ")";
  }

  std::string visit(const json& s, const std::string& where, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "the schema false matches nothing");
      return "json-value";
    }
    if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (kUnsupported.count(k)) fail(where, "'" + k + "' is not supported in constrained decoding");
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) fail(where, "'$ref' must be a string");
      return visit_ref(it->get<std::string>(), where);
    }
    if (auto it = s.find("const"); it != s.end()) return literal(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) fail(where, "'enum' must be a non-empty array");
      std::string body;
      for (size_t k = 0; k < it->size(); ++k) body += (k ? " | " : "") + literal((*it)[k].dump());
      return new_rule(hint + "-enum", body);
    }
    if (auto it = s.find("anyOf"); it != s.end()) return alternatives(*it, "anyOf", where);
    if (auto it = s.find("oneOf"); it != s.end()) return alternatives(*it, "oneOf", where);
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) fail(where, "'allOf' is supported with exactly one schema");
      return visit((*it)[0], where + "/allOf/0", hint);
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      else if (it->is_array() && !it->empty())
        for (const json& t : *it) {
          if (!t.is_string()) fail(where, "'type' entries must be strings");
          types.push_back(t.get<std::string>());
        }
      else fail(where, "'type' must be a string or a non-empty array of strings");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return "json-value";
    }
    if (auto it = s.find("nullable"); it != s.end() && it->is_boolean() && it->get<bool>()) types.push_back("null");
    std::string body;
    for (size_t k = 0; k < types.size(); ++k) body += (k ? " | " : "") + visit_type(s, types[k], where, hint);
    return types.size() == 1 ? body : "(" + body + ")";
  }

  std::string visit_type(const json& s, const std::string& type, const std::string& where, const std::string& hint) {
    if (type == "object") return visit_object(s, where, hint);
    if (type == "array") return visit_array(s, where, hint);
    if (type == "string") return visit_string(s, where, hint);
    if (type == "integer") return visit_integer(s, where, hint);
    if (type == "number") return visit_number(s, where, hint);
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    fail(where, "unknown type '" + type + "'");
  }

  // minimum/maximum (and the exclusive forms) as a grammar over the decimal digits.
  std::string visit_integer(const json& s, const std::string& where, const std::string& hint) {
    constexpr int64_t kLimit = 9999999999999999;  // 16 digits, as json-integer
    int64_t lo = -kLimit, hi = kLimit;
    bool bounded = false;
    const auto bound = [&](const char* kw, bool upper, int64_t shift) {
      auto it = s.find(kw);
      if (it == s.end()) return;
      if (!it->is_number()) fail(where, std::string("'") + kw + "' must be a number");
      const double v = it->get<double>();
      if (!(std::fabs(v) < 1e16)) return;  // beyond what the grammar generates anyway
      const int64_t x = upper ? (int64_t)std::floor(v) - (shift && v == std::floor(v) ? 1 : 0)
                              : (int64_t)std::ceil(v) + (shift && v == std::ceil(v) ? 1 : 0);
      if (upper) hi = std::min(hi, x);
      else lo = std::max(lo, x);
      bounded = true;
    };
    bound("minimum", false, 0);
    bound("exclusiveMinimum", false, 1);
    bound("maximum", true, 0);
    bound("exclusiveMaximum", true, 1);
    if (!bounded) return "json-integer";
    if (lo > hi) fail(where, "no integer lies between the minimum and the maximum");
    return new_rule(hint + "-int", integer_range_gbnf(lo, hi));
  }

  // Numbers between bounds (with decimals, exclusive or not): integer part and
  // fraction digits, no exponent.
  std::string visit_number(const json& s, const std::string& where, const std::string& hint) {
    std::optional<NumberBound> lo, hi;
    const auto bound = [&](const char* kw, bool exclusive, std::optional<NumberBound>& b, bool upper) {
      auto it = s.find(kw);
      if (it == s.end()) return;
      if (!it->is_number()) fail(where, std::string("'") + kw + "' must be a number");
      const NumberBound nb{it->get<double>(), exclusive};
      // The tighter bound wins (both minimum and exclusiveMinimum may be given).
      if (!b || (upper ? nb.value < b->value || (nb.value == b->value && exclusive)
                       : nb.value > b->value || (nb.value == b->value && exclusive)))
        b = nb;
    };
    bound("minimum", false, lo, false);
    bound("exclusiveMinimum", true, lo, false);
    bound("maximum", false, hi, true);
    bound("exclusiveMaximum", true, hi, true);
    if (!lo && !hi) return "json-number";
    try {
      return new_rule(hint + "-num", number_range_gbnf(lo, hi));
    } catch (const GrammarError& e) {
      fail(where, e.what());
    }
  }

  size_t count(const json& s, const char* kw, const std::string& where, size_t dflt) {
    auto it = s.find(kw);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) fail(where, std::string("'") + kw + "' must be a non-negative integer");
    if (it->get<int64_t>() > 10000) fail(where, std::string("'") + kw + "' is larger than 10000");
    return (size_t)it->get<int64_t>();
  }

  static std::string repeat(size_t lo, size_t hi) {  // hi == SIZE_MAX: unbounded
    if (hi == SIZE_MAX) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  std::string visit_string(const json& s, const std::string& where, const std::string& hint) {
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) fail(where, "'pattern' must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        fail(where, "'pattern' together with minLength/maxLength is not supported");
      try {
        return new_rule(hint + "-pattern", "\"\\\"\" " + regex_to_gbnf_expr(it->get<std::string>(), true) + " \"\\\"\"");
      } catch (const GrammarError& e) {
        fail(where, std::string("bad 'pattern': ") + e.what());
      }
    }
    const size_t lo = count(s, "minLength", where, 0), hi = count(s, "maxLength", where, SIZE_MAX);
    if (hi != SIZE_MAX && hi < lo) fail(where, "maxLength < minLength");
    if (lo == 0 && hi == SIZE_MAX) return "json-string";
    return new_rule(hint + "-string", "\"\\\"\" json-char" + repeat(lo, hi) + " \"\\\"\"");
  }

  std::string visit_array(const json& s, const std::string& where, const std::string& hint) {
    std::string item = "json-value";
    if (auto it = s.find("items"); it != s.end()) item = visit(*it, where + "/items", hint + "-item");
    const size_t lo = count(s, "minItems", where, 0), hi = count(s, "maxItems", where, SIZE_MAX);
    if (hi != SIZE_MAX && hi < lo) fail(where, "maxItems < minItems");
    if (hi == 0) return new_rule(hint + "-array", "\"[\" ws \"]\"");
    const std::string more = "(\",\" ws " + item + " ws)" + repeat(lo == 0 ? 0 : lo - 1, hi == SIZE_MAX ? SIZE_MAX : hi - 1);
    std::string list = item + " ws " + more;
    if (lo == 0) list = "(" + list + ")?";
    return new_rule(hint + "-array", "\"[\" ws " + list + " \"]\"");
  }

  std::string visit_object(const json& s, const std::string& where, const std::string& hint) {
    struct Member { std::string kv; bool required; };
    std::vector<Member> members;
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail(where, "'required' must be an array of strings");
      for (const json& r : *it) {
        if (!r.is_string()) fail(where, "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    std::set<std::string> listed;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) fail(where, "'properties' must be an object");
      for (const auto& [key, sub] : it->items()) {
        listed.insert(key);
        const std::string value = visit(sub, where + "/properties/" + key, key);
        members.push_back({literal(json(key).dump()) + " ws \":\" ws " + value + " ws", required.count(key) > 0});
      }
    }
    for (const std::string& r : required)
      if (!listed.count(r)) fail(where, "required property '" + r + "' is not in 'properties'");
    // Extra members only when additionalProperties says so (true or a schema).
    std::string extra;
    if (auto it = s.find("additionalProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>())) {
      const std::string value = it->is_boolean() ? "json-value" : visit(*it, where + "/additionalProperties", hint + "-extra");
      extra = "json-string ws \":\" ws " + value + " ws";
    } else if (it == s.end() && members.empty()) {
      return "json-object";
    }
    // tail(i, first): members i.. where `first` means none was written yet (no comma before the next).
    std::string next_first = extra.empty() ? "" : "(" + extra + " (\",\" ws " + extra + ")*)?";
    std::string next_rest = extra.empty() ? "" : "(\",\" ws " + extra + ")*";
    for (size_t i = members.size(); i-- > 0;) {
      const Member& m = members[i];
      const std::string with_first = m.kv + " " + next_rest;
      const std::string with_rest = "\",\" ws " + m.kv + " " + next_rest;
      std::string f = m.required ? with_first : "(" + with_first + ") | (" + (next_first.empty() ? "\"\"" : next_first) + ")";
      std::string r = m.required ? with_rest : "(" + with_rest + ") | (" + (next_rest.empty() ? "\"\"" : next_rest) + ")";
      next_first = new_rule(hint + "-f" + std::to_string(i), f);
      next_rest = new_rule(hint + "-r" + std::to_string(i), r);
    }
    return new_rule(hint + "-object", "\"{\" ws " + next_first + " \"}\"");
  }

  const json& root_;
  std::string prefix_;
  std::string out_;
  std::map<std::string, std::string> refs_;
  int n_rules_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const json& schema, const JsonGbnfOptions& options) {
  return SchemaConverter(schema, options.prefix).convert(options);
}

std::string json_schema_to_gbnf(const json& schema, const std::string& root) {
  JsonGbnfOptions o;
  o.root = root;
  return json_schema_to_gbnf(schema, o);
}

std::string json_object_gbnf(bool compact) {
  return std::string("root ::= json-object\n") + (compact ? kNoSpace : kFreeSpace) + kPrimitives;
}

}  // namespace spool::grammar
