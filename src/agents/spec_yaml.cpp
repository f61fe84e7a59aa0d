#include "agents/spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <stdexcept>
#include <vector>

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

// Aliases make a YAML document a graph: `a: &a [*a]` is a cycle, and a few
// hundred bytes of nested aliases ("billion laughs") expand to billions of
// nodes. The conversion walks the expanded tree, so it refuses cycles and
// bounds the depth, the node count and the bytes of text it produces.
struct Budget {
  std::vector<YAML::Node> path;  // the nodes from the root to the current one
  size_t nodes = 0, bytes = 0;
};

[[noreturn]] void too_big(const YAML::Node& n, const std::string& what) {
  throw std::invalid_argument("line " + std::to_string(n.Mark().line + 1) + ", column " +
                              std::to_string(n.Mark().column + 1) + ": " + what);
}

json convert(const YAML::Node& n, Budget& b) {
  if (++b.nodes > kMaxYamlNodes)
    too_big(n, "the document expands to more than " + std::to_string(kMaxYamlNodes) +
                   " nodes (aliases repeat what they name: a spec needs far fewer)");
  if (b.path.size() >= kMaxYamlDepth)
    too_big(n, "the document is nested deeper than " + std::to_string(kMaxYamlDepth) + " levels");
  for (const YAML::Node& up : b.path)
    if (up.is(n)) too_big(n, "an alias refers to a node that contains it (a cycle)");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar:
      b.bytes += n.Scalar().size();
      if (b.bytes > kMaxYamlBytes)
        too_big(n, "the document expands to more than " + std::to_string(kMaxYamlBytes) + " bytes of text");
      return scalar(n);
    case YAML::NodeType::Sequence: {
      b.path.push_back(n);
      json a = json::array();
      for (const YAML::Node& e : n) a.push_back(convert(e, b));
      b.path.pop_back();
      return a;
    }
    case YAML::NodeType::Map: {
      b.path.push_back(n);
      json o = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw std::invalid_argument("line " + std::to_string(kv.first.Mark().line + 1) + ": a key must be a scalar");
        b.bytes += kv.first.Scalar().size();
        o[text_of(kv.first)] = convert(kv.second, b);
      }
      b.path.pop_back();
      return o;
    }
  }
  return nullptr;
}

}  // namespace

json yaml_to_json(const std::string& text) {
  try {
    Budget budget;
    return convert(YAML::Load(text), budget);
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
