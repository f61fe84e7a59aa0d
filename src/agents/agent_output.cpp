#include "agents/agent_output.h"

namespace spool::agents {

using ojson = nlohmann::ordered_json;

namespace {

const char* kind_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    default: return "a number";
  }
}

// Follows local $refs (a few levels: a ref to a ref).
const ojson& deref(const ojson& root, const ojson& s) {
  const ojson* cur = &s;
  for (int hops = 0; hops < 16 && cur->is_object(); ++hops) {
    const auto it = cur->find("$ref");
    if (it == cur->end() || !it->is_string()) break;
    const std::string ref = it->get<std::string>();
    if (ref == "#") {
      cur = &root;
      continue;
    }
    try {
      cur = &root.at(ojson::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      break;  // the grammar compiler reports bad refs
    }
  }
  return *cur;
}

bool has_type(const ojson& s, const char* type) {
  const auto it = s.find("type");
  if (it == s.end()) return true;  // untyped: could be anything
  if (it->is_string()) return *it == type;
  if (it->is_array())
    for (const ojson& t : *it)
      if (t == type) return true;
  return false;
}

std::string type_text(const ojson& s) {
  const auto it = s.find("type");
  return it == s.end() ? "untyped" : it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

const ojson& value_at(const ojson& v, const std::vector<PathStep>& path, const std::string& what) {
  const ojson* cur = &v;
  std::string at = what;
  for (const PathStep& p : path) {
    if (p.index >= 0) {
      if (!cur->is_array()) throw PathError(at + " is " + kind_name(*cur) + ", not an array (index [" + std::to_string(p.index) + "])");
      if ((size_t)p.index >= cur->size())
        throw PathError(at + " has " + std::to_string(cur->size()) + " element" + (cur->size() == 1 ? "" : "s") +
                        ", no [" + std::to_string(p.index) + "]");
      cur = &(*cur)[(size_t)p.index];
    } else if (cur->is_array() && !p.key.empty() && p.key.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::stoul(p.key);  // .0 reads as [0] on an array
      if (i >= cur->size())
        throw PathError(at + " has " + std::to_string(cur->size()) + " elements, no [" + p.key + "]");
      cur = &(*cur)[i];
    } else {
      if (!cur->is_object()) throw PathError(at + " is " + kind_name(*cur) + ", not an object (member '" + p.key + "')");
      const auto it = cur->find(p.key);
      if (it == cur->end()) throw PathError(at + " has no member '" + p.key + "'");
      cur = &*it;
    }
    at += p.index >= 0 ? "[" + std::to_string(p.index) + "]" : "." + p.key;
  }
  return *cur;
}

std::string value_text(const ojson& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

namespace {

const ojson* walk_schema(const ojson& root, const ojson& start, const std::vector<PathStep>& path, const std::string& what) {
  const ojson* cur = &deref(root, start);
  std::string at = what;
  for (size_t k = 0; k < path.size(); ++k) {
    const PathStep& p = path[k];
    if (cur->is_boolean() || !cur->is_object() || cur->empty()) return nullptr;  // any value
    for (const char* alt : {"anyOf", "oneOf"}) {
      const auto it = cur->find(alt);
      if (it == cur->end() || !it->is_array()) continue;
      // Fine if any branch has the rest of the path; what it is then, the branches may disagree.
      const std::vector<PathStep> rest(path.begin() + (long)k, path.end());
      std::string first_error;
      for (const ojson& branch : *it) {
        try {
          walk_schema(root, branch, rest, at);
          return nullptr;
        } catch (const PathError& e) {
          if (first_error.empty()) first_error = e.what();
        }
      }
      throw PathError(first_error.empty() ? at + ": no branch of " + alt + " has it" : first_error);
    }
    const bool is_index = p.index >= 0 || (p.key.find_first_not_of("0123456789") == std::string::npos && !has_type(*cur, "object"));
    if (is_index) {
      if (!has_type(*cur, "array"))
        throw PathError(at + " is " + type_text(*cur) + " in the output_schema, not an array");
      const auto items = cur->find("items");
      if (items == cur->end()) return nullptr;
      cur = &deref(root, *items);
      at += p.index >= 0 ? "[" + std::to_string(p.index) + "]" : "." + p.key;
      continue;
    }
    if (!has_type(*cur, "object")) throw PathError(at + " is " + type_text(*cur) + " in the output_schema, not an object");
    const auto props = cur->find("properties");
    if (props != cur->end() && props->is_object() && props->contains(p.key)) {
      cur = &deref(root, (*props)[p.key]);
      at += "." + p.key;
      continue;
    }
    const auto extra = cur->find("additionalProperties");
    if (extra != cur->end() && !(extra->is_boolean() && !extra->get<bool>())) return nullptr;
    if (props == cur->end() && cur->find("type") == cur->end()) return nullptr;
    std::string names;
    if (props != cur->end() && props->is_object())
      for (auto it = props->begin(); it != props->end(); ++it) names += (names.empty() ? "" : ", ") + it.key();
    throw PathError(at + " has no property '" + p.key + "' in the output_schema" +
                    (names.empty() ? std::string() : " (it has: " + names + ")"));
  }
  return cur;
}

}  // namespace

const ojson* schema_at(const ojson& root, const std::vector<PathStep>& path, const std::string& what) {
  return walk_schema(root, root, path, what);
}

bool schema_is_array(const ojson& root, const ojson& s) {
  const ojson& d = deref(root, s);
  if (!d.is_object()) return false;
  const auto it = d.find("type");
  return it != d.end() && it->is_string() && *it == "array";
}

}  // namespace spool::agents
