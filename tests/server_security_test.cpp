// The checks that keep web pages and hostile documents from using a local
// server (issue 25): Host / Origin / Content-Type rules, and YAML specs whose
// aliases form a cycle or expand past the limits. The HTTP-level cases (the
// rules applied to real requests, bodies over --max-body in every framing)
// are in server_test.cpp and tests/api/security.test.mjs.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "agents/spec_yaml.h"
#include "server/request_policy.h"

namespace spool::server {
namespace {

TEST(RequestPolicy, HostHeaderParsing) {
  EXPECT_EQ(host_of_header("localhost:8080"), "localhost");
  EXPECT_EQ(host_of_header("LocalHost"), "localhost");
  EXPECT_EQ(host_of_header("localhost."), "localhost");
  EXPECT_EQ(host_of_header("[::1]:80"), "[::1]");
  EXPECT_EQ(host_of_header("127.0.0.1"), "127.0.0.1");
  EXPECT_FALSE(host_of_header(""));
  EXPECT_FALSE(host_of_header("a:b:c"));
  EXPECT_FALSE(host_of_header("[::1"));
  EXPECT_FALSE(host_of_header("evil.example:80x"));
  EXPECT_FALSE(host_of_header("a b"));
}

TEST(RequestPolicy, OnlyLoopbackHostsUnlessAllowed) {
  for (const char* ok : {"localhost", "localhost:1234", "127.0.0.1:8080", "127.9.8.7", "[::1]", "[::1]:8080"})
    EXPECT_TRUE(host_allowed(ok, {})) << ok;
  for (const char* bad : {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example",
                          "0.0.0.0", "10.0.0.1:80", "[::2]", "", "localhost:x"})
    EXPECT_FALSE(host_allowed(bad, {})) << bad;
  EXPECT_TRUE(host_allowed("my.box:8080", {"my.box"}));
  EXPECT_TRUE(host_allowed("MY.BOX", {"my.box:9999"}));
  EXPECT_FALSE(host_allowed("other.box", {"my.box"}));
  EXPECT_TRUE(host_allowed("anything.example", {"*"}));
}

TEST(RequestPolicy, OriginsAreTheServersOwnOrListed) {
  EXPECT_TRUE(origin_is_own("http://127.0.0.1:8080", "127.0.0.1:8080"));
  EXPECT_TRUE(origin_is_own("http://LOCALHOST:8080", "localhost:8080"));
  EXPECT_FALSE(origin_is_own("http://127.0.0.1:8081", "127.0.0.1:8080"));
  EXPECT_FALSE(origin_is_own("http://evil.example:8080", "127.0.0.1:8080"));
  EXPECT_FALSE(origin_is_own("https://127.0.0.1:8080", "127.0.0.1:8080"));  // served over http only
  EXPECT_FALSE(origin_is_own("null", "127.0.0.1:8080"));
  EXPECT_FALSE(origin_is_own("http://127.0.0.1:8080/x", "127.0.0.1:8080"));
  EXPECT_FALSE(origin_is_own("http://u@127.0.0.1:8080", "127.0.0.1:8080"));
  EXPECT_TRUE(origin_listed("https://app.example", {"https://app.example/"}));
  EXPECT_TRUE(origin_listed("https://App.Example", {"https://app.example"}));
  EXPECT_FALSE(origin_listed("https://app.example.evil", {"https://app.example"}));
  EXPECT_FALSE(origin_listed("null", {"https://app.example"}));
  EXPECT_TRUE(origin_listed("null", {"*"}));
}

TEST(RequestPolicy, BodyMediaTypes) {
  EXPECT_EQ(media_type("Application/JSON; charset=utf-8"), "application/json");
  EXPECT_EQ(media_type(" text/plain ;x=yaml"), "text/plain");
  const BodyTypes chat = body_types_for("POST", "/v1/chat/completions");
  EXPECT_TRUE(body_type_accepted("application/json", chat));
  for (const char* bad : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "", "application/yaml"})
    EXPECT_FALSE(body_type_accepted(bad, chat)) << bad;
  const BodyTypes specs = body_types_for("PUT", "/v1/pipeline-specs/x");
  EXPECT_EQ(specs, body_types_for("POST", "/v1/pipelines"));
  for (const char* yaml : {"application/yaml", "application/x-yaml", "text/yaml", "application/json"})
    EXPECT_TRUE(body_type_accepted(yaml, specs)) << yaml;
  // "contains yaml" is not enough: text/plain is what a cross-site form sends without a preflight.
  EXPECT_FALSE(body_type_accepted(media_type("text/plain; x=yaml"), specs));
  EXPECT_FALSE(body_type_accepted("text/x-yaml-ish", specs));
  EXPECT_TRUE(body_type_accepted("multipart/form-data", body_types_for("POST", "/v1/files")));
  EXPECT_FALSE(body_type_accepted("text/plain", body_types_for("POST", "/v1/files")));
}

// Runs yaml_to_json and returns its error ("" when it parsed); fails the test past `max_ms`.
std::string yaml_error(const std::string& text, int max_ms = 2000) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  try {
    agents::yaml_to_json(text);
  } catch (const std::invalid_argument& e) {
    err = e.what();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, max_ms) << text.substr(0, 80);
  return err;
}

TEST(SpecYamlLimits, AliasCyclesAreRefused) {
  EXPECT_NE(yaml_error("a: &a [*a]\n").find("cycle"), std::string::npos);
  EXPECT_NE(yaml_error("a: &a {b: *a}\n").find("cycle"), std::string::npos);
  EXPECT_NE(yaml_error("- &x\n  - [1, *x]\n").find("cycle"), std::string::npos);
}

TEST(SpecYamlLimits, BillionLaughsIsRefusedQuickly) {
  std::string doc = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 8; ++i) {
    doc += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) doc += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
    doc += "]\n";
  }
  const std::string err = yaml_error(doc);
  EXPECT_NE(err.find("expands to more than"), std::string::npos) << err;
  // Long strings repeated by aliases: bounded by bytes, not nodes.
  std::string big = "s: &s " + std::string(1 << 20, 'x') + "\nl: [";
  for (int k = 0; k < 40; ++k) big += std::string(k ? ", " : "") + "*s";
  big += "]\n";
  EXPECT_NE(yaml_error(big, 5000).find("bytes of text"), std::string::npos);
}

TEST(SpecYamlLimits, AliasesWithinTheLimitsStillWork) {
  const auto j = agents::yaml_to_json("base: &b {temperature: 0.2}\nagents:\n  - {name: a, sampling: *b}\n  - {name: b, sampling: *b}\n");
  EXPECT_EQ(j["agents"][1]["sampling"]["temperature"], 0.2);
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  EXPECT_NE(yaml_error("a: " + deep + "\n").find("nested deeper"), std::string::npos);
}

}  // namespace
}  // namespace spool::server
