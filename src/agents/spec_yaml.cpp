#include "agents/spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <stdexcept>

#include "text/unicode_util.h"

namespace spool::agents {

using json = nlohmann::ordered_json;

namespace {

// YAML text is not checked for UTF-8 by yaml-cpp; JSON strings must be (nlohmann
// throws when it serialises them later, e.g. a schema turned into a grammar).
const std::string& text_of(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (unicode::valid_utf8(s) != s)
    throw std::invalid_argument("line " + std::to_string(n.Mark().line + 1) + ", column " +
                                std::to_string(n.Mark().column + 1) + ": invalid UTF-8 in a string");
  return s;
}

json scalar(const YAML::Node& n) {
  const std::string& s = text_of(n);
  if (n.Tag() == "!") return s;  // quoted: a string whatever it looks like
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  static const std::regex integer("[-+]?[0-9]+"), decimal("[-+]?([0-9]+\\.[0-9]*|\\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?");
  if (std::regex_match(s, integer)) {
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == 0) return v;
  }
  if (std::regex_match(s, decimal)) return std::strtod(s.c_str(), nullptr);
  return s;
}

json convert(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return scalar(n);
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const YAML::Node& e : n) a.push_back(convert(e));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw std::invalid_argument("line " + std::to_string(kv.first.Mark().line + 1) + ": a key must be a scalar");
        o[text_of(kv.first)] = convert(kv.second);
      }
      return o;
    }
  }
  return nullptr;
}

}  // namespace

json yaml_to_json(const std::string& text) {
  try {
    return convert(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("line " + std::to_string(e.mark.line + 1) + ", column " +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

json parse_spec_text(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    try {
      return json::parse(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
      throw std::invalid_argument(e.what());
    }
  }
  return yaml_to_json(text);
}

}  // namespace spool::agents
