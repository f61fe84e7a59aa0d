// `spool run --json-schema / --grammar / --regex` on stories260K: sampled
// output that parses and fits the schema, a grammar's language, and clear
// errors for a bad schema or grammar file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "test_util.h"

using spool::test::run_stdout;
using spool::test::ScratchDir;

namespace {

const std::string kBin = SPOOL_BIN;
const std::string kModel = std::string(SPOOL_SHARED_DIR) + "/models/stories260K.gguf";

std::string write(const ScratchDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(StructuredCli, JsonSchemaOutputParsesAndFits) {
  ScratchDir dir("spool-structured-cli");
  const std::string schema = write(dir, "s.json", R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8}, "mood": {"enum": ["happy", "sad"]},
      "friends": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
      "required": ["name", "mood", "friends"], "additionalProperties": false})");
  for (int seed = 1; seed <= 5; ++seed) {
    int status = 0;
    const std::string out = run_stdout(kBin + " run -m " + kModel + " -t 1 -p 'Once upon a time' --temp 1 --seed " +
                                           std::to_string(seed) + " -n 400 --json-schema " + schema + " 2>/dev/null",
                                       &status);
    ASSERT_EQ(status, 0) << out;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(out)) << out;
    EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 8 * 4) << out;
    EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad") << out;
    EXPECT_TRUE(v["friends"].is_array() && v["friends"].size() <= 2) << out;
    EXPECT_EQ(v.size(), 3u) << out;
  }
}

TEST(StructuredCli, GrammarAndRegex) {
  ScratchDir dir("spool-structured-cli");
  const std::string g = write(dir, "g.gbnf", "# a list\nroot ::= (\"- \" [a-z]{1,6} \"\\n\"){2}\n");
  int status = 0;
  const std::string out =
      run_stdout(kBin + " run -m " + kModel + " -t 1 -p 'Once upon a time' --temp 1 --seed 3 --grammar " + g + " 2>/dev/null", &status);
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(std::regex_match(out, std::regex("- [a-z]{1,6}\n- [a-z]{1,6}\n"))) << out;
  const std::string re = run_stdout(kBin + " run -m " + kModel + " -t 1 -p 'Once upon a time' --temp 1 --seed 4 "
                                    "--regex '(yes|no), [A-Z][a-z]{2,5}!' 2>/dev/null", &status);
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(std::regex_match(re, std::regex("(yes|no), [A-Z][a-z]{2,5}!"))) << re;
}

TEST(StructuredCli, BadSchemaOrGrammarIsAClearError) {
  ScratchDir dir("spool-structured-cli");
  const std::string bad_schema = write(dir, "bad.json", R"({"type": "object", "properties": {"a": {"type": "intger"}}})");
  const std::string bad_grammar = write(dir, "bad.gbnf", "root ::= item\n");
  int status = 0;
  std::string err = run_stdout(kBin + " run -m " + kModel + " -n 4 --json-schema " + bad_schema + " 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("#/properties/a: unknown type 'intger'"), std::string::npos) << err;
  err = run_stdout(kBin + " run -m " + kModel + " -n 4 --grammar " + bad_grammar + " 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("'item' is used but never defined"), std::string::npos) << err;
}
