// The limits that keep outside data from hanging or exhausting spool, with the
// errors they give (docs/RELIABILITY.md): Jinja step, byte and depth budgets,
// integer overflow and escapes in templates, and the strict number parsing of
// HTTP Content-Range headers.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "storage/http_range.h"
#include "text/jinja.h"

namespace {

using spool::jinja::Template;
using spool::jinja::TemplateOptions;
using spool::jinja::Value;

// The error a template gives (render included), or "" when it renders.
std::string template_error(const std::string& source, TemplateOptions options = {}) {
  try {
    Template t(source, options);
    t.render(Value(spool::jinja::Dict{}));
  } catch (const spool::Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLimits, LoopsStopAtTheStepBudget) {
  TemplateOptions o;
  o.max_steps = 100000;
  const std::string e = template_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", o);
  EXPECT_NE(e.find("ran more than 100000 steps"), std::string::npos) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  // The same template with a small range renders.
  EXPECT_EQ(template_error("{% for a in range(3) %}{% for b in range(3) %}x{% endfor %}{% endfor %}", o), "");
}

TEST(JinjaLimits, RecursionStopsAtTheDepthLimit) {
  const std::string e = template_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("nests more than 400 levels"), std::string::npos) << e;
  const std::string p = template_error("{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}");
  EXPECT_NE(p.find("nested more than 100 levels"), std::string::npos) << p;
}

TEST(JinjaLimits, GrowthStopsAtTheByteBudget) {
  TemplateOptions o;
  o.max_output_bytes = 1 << 20;
  for (const char* t : {"{{ 'a' * 9223372036854775807 }}", "{{ 'ab' * 600000 }}",
                        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('a', 'aa') %}{% endfor %}",
                        "{{ 'x' | indent(100000000) }}", "{{ range(1000000) | list | join(',') }}"}) {
    const std::string e = template_error(t, o);
    EXPECT_NE(e.find("builds more than 1 MiB"), std::string::npos) << t << " -> " << e;
  }
  EXPECT_EQ(template_error("{{ 'ab' * 1000 }}", o), "");
}

TEST(JinjaLimits, IntegerOverflowIsAnError) {
  for (const char* t : {"{{ 9223372036854775807 + 1 }}", "{{ -(-9223372036854775807 - 1) }}",
                        "{{ (-9223372036854775807 - 1) // -1 }}", "{{ 3 ** 99 }}", "{{ 9223372036854775807 * 2 }}"}) {
    EXPECT_NE(template_error(t).find("integer overflow"), std::string::npos) << t;
  }
  EXPECT_NE(template_error("{{ 99999999999999999999 }}").find("does not fit in 64 bits"), std::string::npos);
  Template t("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ (-9223372036854775807 - 1) % -1 }}");
  EXPECT_EQ(t.render(Value()), "-4 2 -2 0");  // Python's floor semantics
}

TEST(JinjaLimits, SelfContainingNamespaceAndBadEscapes) {
  const std::string e = template_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_NE(e.find("nested more than 64 levels"), std::string::npos) << e;
  EXPECT_NE(template_error("{{ '\\xZZ' }}").find("bad \\x escape"), std::string::npos);
  EXPECT_NE(template_error("{{ '\\U7FFFFFFF' }}").find("past the last Unicode code point"), std::string::npos);
  EXPECT_EQ(Template("{{ '\\x41\\u00e9' }}").render(Value()), "A\xc3\xa9");
}

TEST(HttpRange, ContentRangeIsParsedStrictly) {
  uint64_t a = 0, b = 0, total = 0;
  bool known = false;
  EXPECT_TRUE(spool::parse_content_range("bytes 16-47/4096", a, b, total, known));
  EXPECT_EQ(a, 16u);
  EXPECT_EQ(b, 47u);
  EXPECT_EQ(total, 4096u);
  EXPECT_TRUE(known);
  EXPECT_TRUE(spool::parse_content_range("bytes 0-0/*", a, b, total, known));
  EXPECT_FALSE(known);
  for (const char* bad : {"bytes -1-47/4096", "bytes 0-0/0", "bytes 5-3/10", "bytes 0-9/9", "bytes 0-9/10x",
                          "bytes 0-99999999999999999999/1", "bytes 0-9", "items 0-9/10", "bytes 0-9/*x", ""})
    EXPECT_FALSE(spool::parse_content_range(bad, a, b, total, known)) << bad;
}

}  // namespace
