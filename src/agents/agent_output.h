// Structured agent outputs: an agent with an output_schema writes JSON valid
// under it (its decoding is constrained), kept parsed beside the text so that
// later templates can address its fields ({agents.planner.output.steps[0]})
// and a for_each stage can fan out over one of its arrays. Paths are checked
// against the schema when a spec is validated (where the schema tells), and
// against the value when a prompt is rendered.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "agents/prompt_template.h"

namespace spool::agents {

struct AgentOutput {
  std::string text;
  nlohmann::ordered_json value;  // with `structured`: the parsed output (for_each: an array of the elements' outputs)
  bool structured = false;
};

// A path the value does not have.
struct PathError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value at `path` (`what` names the value in messages, e.g.
// "agents.planner.output"). Throws PathError naming the step that is missing.
const nlohmann::ordered_json& value_at(const nlohmann::ordered_json& v, const std::vector<PathStep>& path,
                                       const std::string& what);
// How a value is written into a prompt: a string as it is, anything else as compact JSON.
std::string value_text(const nlohmann::ordered_json& v);

// The subschema at `path` of a JSON Schema, or null when the schema does not
// say (an empty schema, anyOf branches that differ, additionalProperties).
// Throws PathError when the schema rules the path out (no such property, an
// index into a non-array). `$ref`s into the schema are followed.
const nlohmann::ordered_json* schema_at(const nlohmann::ordered_json& root, const std::vector<PathStep>& path,
                                        const std::string& what);
// Whether a (sub)schema certainly describes an array.
bool schema_is_array(const nlohmann::ordered_json& root, const nlohmann::ordered_json& s);

}  // namespace spool::agents
