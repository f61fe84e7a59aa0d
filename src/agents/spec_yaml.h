// Pipeline specs written in YAML: converted to the same JSON the parser takes
// (yaml-cpp). Plain scalars become numbers, booleans or null where they read as
// one (YAML 1.2 core schema: true/false, null/~, integers, decimals); quoted
// scalars stay strings; mapping keys keep their order. Errors name the line and column.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace spool::agents {

// Throws std::invalid_argument ("line L, column C: ...") on malformed YAML.
nlohmann::ordered_json yaml_to_json(const std::string& text);

// A spec document: JSON when it starts with '{' (after whitespace), else YAML.
// Throws std::invalid_argument on malformed JSON or YAML.
nlohmann::ordered_json parse_spec_text(const std::string& text);

}  // namespace spool::agents
