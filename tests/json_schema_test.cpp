// JSON Schema and regex -> grammar: documents that must and must not match,
// $ref recursion, and errors that name the keyword and where it is. (Sampled
// outputs validated by ajv through a real server are in tests/api.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

using namespace spool::grammar;
using json = nlohmann::ordered_json;

namespace {

CompiledGrammar schema_grammar(const char* schema) {
  return CompiledGrammar(parse_gbnf(json_schema_to_gbnf(json::parse(schema))));
}

std::string schema_error(const char* schema) {
  try {
    json_schema_to_gbnf(json::parse(schema));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(JsonSchema, ObjectRequiredOptionalAndOrder) {
  CompiledGrammar g = schema_grammar(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name"], "additionalProperties": false})");
  EXPECT_TRUE(g.matches(R"({"name": "Ann"})"));
  EXPECT_TRUE(g.matches(R"({"name":"Ann","age":3})"));
  EXPECT_TRUE(g.matches(R"({"name": "Ann", "tags": ["a", "b"]})"));
  EXPECT_TRUE(g.matches("{\n  \"name\": \"Ann\",\n  \"age\": -12\n}"));
  EXPECT_FALSE(g.matches(R"({"age": 3})"));                    // name is required
  EXPECT_FALSE(g.matches(R"({"name": "Ann", "x": 1})"));       // no additional properties
  EXPECT_FALSE(g.matches(R"({"name": "Ann", "age": 1.5})"));   // integer
  EXPECT_FALSE(g.matches(R"({"name": "Ann",})"));
}

TEST(JsonSchema, EnumsConstArraysBounds) {
  CompiledGrammar g = schema_grammar(R"({"type": "object", "properties": {
      "color": {"enum": ["red", "green", 3, null]}, "kind": {"const": "fixed"},
      "xs": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3},
      "code": {"type": "string", "minLength": 2, "maxLength": 3}},
      "required": ["color", "kind", "xs", "code"]})");
  EXPECT_TRUE(g.matches(R"({"color": "green", "kind": "fixed", "xs": [1, 2.5], "code": "ab"})"));
  EXPECT_TRUE(g.matches(R"({"color": null, "kind": "fixed", "xs": [1, 2, 3e2], "code": "abc"})"));
  EXPECT_FALSE(g.matches(R"({"color": "blue", "kind": "fixed", "xs": [1, 2], "code": "ab"})"));
  EXPECT_FALSE(g.matches(R"({"color": 3, "kind": "other", "xs": [1, 2], "code": "ab"})"));
  EXPECT_FALSE(g.matches(R"({"color": 3, "kind": "fixed", "xs": [1], "code": "ab"})"));
  EXPECT_FALSE(g.matches(R"({"color": 3, "kind": "fixed", "xs": [1, 2, 3, 4], "code": "ab"})"));
  EXPECT_FALSE(g.matches(R"({"color": 3, "kind": "fixed", "xs": [1, 2], "code": "abcd"})"));
}

TEST(JsonSchema, AnyOfRefsAndRecursion) {
  CompiledGrammar g = schema_grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
                     "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value", "children"], "additionalProperties": false}}})");
  EXPECT_TRUE(g.matches(R"({"value": 1, "children": []})"));
  EXPECT_TRUE(g.matches(R"({"value": "a", "children": [{"value": null, "children": [{"value": 2, "children": []}]}]})"));
  EXPECT_FALSE(g.matches(R"({"value": true, "children": []})"));
  EXPECT_FALSE(g.matches(R"({"value": 1, "children": [{"value": 1}]})"));
}

TEST(JsonSchema, PatternsAndTypeLists) {
  CompiledGrammar g = schema_grammar(R"({"type": "object", "properties": {
      "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
      "q": {"type": "string", "pattern": "^a\"b\\\\c$"},
      "n": {"type": ["integer", "null"]}}, "required": ["id", "q", "n"]})");
  EXPECT_TRUE(g.matches(R"({"id": "AB-123", "q": "a\"b\\c", "n": null})"));
  EXPECT_TRUE(g.matches(R"({"id": "ZZ-000", "q": "a\"b\\c", "n": 7})"));
  EXPECT_FALSE(g.matches(R"({"id": "AB-12", "q": "a\"b\\c", "n": 7})"));
  EXPECT_FALSE(g.matches(R"({"id": "AB-123", "q": "a"b\\c", "n": 7})"));
}

TEST(JsonSchema, EmptySchemaAndJsonObjectMode) {
  CompiledGrammar any = schema_grammar("{}");
  EXPECT_TRUE(any.matches("[1, {\"a\": \"b\"}]"));
  EXPECT_TRUE(any.matches("\"x\""));
  CompiledGrammar obj(parse_gbnf(json_object_gbnf()));
  EXPECT_TRUE(obj.matches(R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(obj.matches("[1]"));
}

TEST(JsonSchema, IntegerRanges) {
  struct Case { const char* schema; int64_t lo, hi; };
  for (const Case& c : {Case{R"({"type": "integer", "minimum": 0, "maximum": 100})", 0, 100},
                        Case{R"({"type": "integer", "minimum": -37, "maximum": 1234})", -37, 1234},
                        Case{R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 17})", 6, 16},
                        Case{R"({"type": "integer", "minimum": -250, "maximum": -19})", -250, -19},
                        Case{R"({"type": "integer", "minimum": 1.5, "maximum": 9.5})", 2, 9}}) {
    CompiledGrammar g = schema_grammar(c.schema);
    for (int64_t v = c.lo - 300; v <= c.hi + 300; ++v)
      EXPECT_EQ(g.matches(std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
    EXPECT_FALSE(g.matches("007"));
    EXPECT_FALSE(g.matches("-0"));
  }
  CompiledGrammar open_above = schema_grammar(R"({"type": "integer", "minimum": 10})");
  EXPECT_TRUE(open_above.matches("10"));
  EXPECT_TRUE(open_above.matches("123456789012"));
  EXPECT_FALSE(open_above.matches("9"));
  EXPECT_FALSE(open_above.matches("-12"));
}

// Numbers between bounds with decimals, exclusive or not, negative or not:
// every numeral of a grid matches exactly when its value is in range.
TEST(JsonSchema, NumberRanges) {
  struct Case { const char* schema; double lo, hi; bool lo_excl, hi_excl; };
  const double inf = 1e300;
  for (const Case& c : {Case{R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 1, false, false},
                        Case{R"({"type": "number", "minimum": 0.25, "maximum": 2.75})", 0.25, 2.75, false, false},
                        Case{R"({"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 3})", 0.5, 3, true, true},
                        Case{R"({"type": "number", "minimum": -2.5, "maximum": 1.05})", -2.5, 1.05, false, false},
                        Case{R"({"type": "number", "minimum": -12.125, "exclusiveMaximum": -0.1})", -12.125, -0.1, false, true},
                        Case{R"({"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 0})", -1, 0, true, true},
                        Case{R"({"type": "number", "minimum": 1.5, "maximum": 1.75})", 1.5, 1.75, false, false},
                        Case{R"({"type": "number", "exclusiveMinimum": 0})", 0, inf, true, false},
                        Case{R"({"type": "number", "maximum": -3.5})", -inf, -3.5, false, false},
                        Case{R"({"type": "number", "minimum": 0.001, "maximum": 0.01})", 0.001, 0.01, false, false}}) {
    CompiledGrammar g = schema_grammar(c.schema);
    for (int i = 0; i <= 15; ++i) {
      for (const char* frac : {"", ".0", ".00", ".001", ".01", ".05", ".1", ".10", ".105", ".12", ".125", ".1251",
                               ".2", ".25", ".249", ".5", ".50", ".75", ".751", ".9", ".99", ".0001"}) {
        for (const char* sign : {"", "-"}) {
          const std::string text = sign + std::to_string(i) + frac;
          const double v = std::stod(text);
          const bool in = (c.lo_excl ? v > c.lo : v >= c.lo) && (c.hi_excl ? v < c.hi : v <= c.hi);
          const bool negative_zero = sign[0] == '-' && v == 0;
          EXPECT_EQ(g.matches(text), in && !negative_zero) << c.schema << " " << text;
        }
      }
    }
    EXPECT_FALSE(g.matches("01.5"));
    EXPECT_FALSE(g.matches("1."));
    EXPECT_FALSE(g.matches("1e0"));
  }
  CompiledGrammar tiny = schema_grammar(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 0.5})");
  EXPECT_TRUE(tiny.matches("0.0000000000000001"));  // 16 decimal places
  EXPECT_FALSE(tiny.matches("0.0000000000000000"));
  EXPECT_FALSE(tiny.matches("0.5000000000000001"));
  EXPECT_TRUE(tiny.matches("0.5000000000000000"));
}

TEST(JsonSchema, ErrorsNameKeywordAndPlace) {
  EXPECT_NE(schema_error(R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 2.5, "maximum": 2.4}}})")
                .find("#/properties/a: no number lies between the minimum and the maximum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "minimum": 1e-20})").find("more than 16 decimal places"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer lies between"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems' is not supported"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref": "#/$defs/missing"})").find("does not point into this schema"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "object", "properties": {}, "required": ["x"]})").find("'x' is not in"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "string", "pattern": "(a"})").find("bad 'pattern'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"enum": []})").find("'enum' must be a non-empty array"), std::string::npos);
}

TEST(Regex, Language) {
  CompiledGrammar g(parse_gbnf(regex_to_gbnf("^(ab|c+)?[x-z]\\d{2,3}\\.(?:foo|bar)*$")));
  EXPECT_TRUE(g.matches("x12."));
  EXPECT_TRUE(g.matches("abz123.foobar"));
  EXPECT_TRUE(g.matches("cccy00.bar"));
  EXPECT_FALSE(g.matches("abcx12."));
  EXPECT_FALSE(g.matches("x1."));
  EXPECT_FALSE(g.matches("x1234."));
  EXPECT_FALSE(g.matches("x12"));
  CompiledGrammar w(parse_gbnf(regex_to_gbnf("[^a-c]\\w+\\s.")));
  EXPECT_TRUE(w.matches("dab_9 é"));
  EXPECT_FALSE(w.matches("aab_9 x"));
  EXPECT_FALSE(w.matches("dab_9 \n"));
  EXPECT_THROW(regex_to_gbnf("(a)\\1"), GrammarError);
  EXPECT_THROW(regex_to_gbnf("a(?=b)"), GrammarError);
  EXPECT_THROW(regex_to_gbnf("a**"), GrammarError);
}
