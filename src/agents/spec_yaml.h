// Pipeline specs written in YAML: converted to the same JSON the parser takes
// (yaml-cpp). Plain scalars become numbers, booleans or null where they read as
// one (YAML 1.2 core schema: true/false, null/~, integers, decimals); quoted
// scalars stay strings; mapping keys keep their order. Errors name the line and column.
#pragma once

#include <nlohmann/json.hpp>
#include <cstddef>
#include <string>

namespace spool::agents {

// Limits on the document as expanded (aliases repeat what they name), so a
// few hundred bytes cannot become gigabytes: nodes, nesting and bytes of text.
// An alias to a node that contains it (a cycle) is refused.
inline constexpr size_t kMaxYamlNodes = 100000;
inline constexpr size_t kMaxYamlDepth = 128;  // as JSON bodies (server/json_depth.h)
inline constexpr size_t kMaxYamlBytes = 16u << 20;

// Throws std::invalid_argument ("line L, column C: ...") on malformed YAML,
// a cycle, or a document past the limits above.
nlohmann::ordered_json yaml_to_json(const std::string& text);

// A spec document: JSON when it starts with '{' (after whitespace), else YAML.
// Throws std::invalid_argument on malformed JSON or YAML.
nlohmann::ordered_json parse_spec_text(const std::string& text);

}  // namespace spool::agents
