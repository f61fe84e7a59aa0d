// JSON Schema -> GBNF, for the subset OpenAI's structured outputs accept:
// type (one or a list), properties/required/additionalProperties, enum,
// const, arrays with items/minItems/maxItems, strings with pattern (through
// regex.h) and minLength/maxLength, integer (with minimum/maximum and the
// exclusive forms), number (with the same bounds, decimals allowed), boolean, null,
// anyOf/oneOf, a one-element allOf, $ref into $defs/definitions (recursion
// included), and the empty schema (any JSON value). Annotations (title,
// description, default, examples, $schema, $id, format, ...) are ignored;
// validation keywords the grammar cannot enforce (multipleOf,
// uniqueItems, not, ...) are a GrammarError naming the keyword and where it
// is, rather than output that would not validate.
//
// Generated text: object members in the schema's order, optional members
// either present or absent, short optional whitespace (none when compact).
// Integers have at most 16 digits, fractions and exponents are bounded too, so
// a model cannot run on in a number forever.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace spool::grammar {

struct JsonGbnfOptions {
  std::string root = "root";  // the rule that matches the value
  std::string prefix = "s";   // prefix of the generated rules' names, so that two schemas can share a grammar
  bool primitives = true;     // append the shared rules (ws, json-string, json-value, ...): once per grammar
  bool compact = false;       // no whitespace between tokens (ws matches nothing): fewer tokens to generate
};

// Object members follow the schema's key order, so it takes ordered_json.
// `root` names the rule that matches the value (other rules are prefixed
// and can sit beside a caller's own rules).
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonGbnfOptions& options);
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& root = "root");
// Any JSON object ({"type": "json_object"} response formats).
std::string json_object_gbnf(bool compact = false);

}  // namespace spool::grammar
