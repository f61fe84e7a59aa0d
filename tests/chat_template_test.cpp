// Chat templates and the Jinja-subset engine under them: the tok-qwen2 and
// tok-llama3 fixtures' conversations render byte for byte as Hugging Face's
// apply_chat_template does; each statement, expression, filter, test and method
// on its own; errors (syntax, unknown filter, raise_exception) name the place;
// and `spool run --chat` feeds the model exactly the rendered prompt.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/gguf.h"
#include "text/chat_template.h"
#include "text/hf_tokenizer.h"
#include "text/jinja.h"

namespace {

using namespace spool;
using jinja::Value;
namespace fs = std::filesystem;
const std::string kShared = SPOOL_SHARED_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders `src` with HF's options (trim_blocks, lstrip_blocks) over JSON variables.
std::string render(const std::string& src, const std::string& vars_json = "{}") {
  jinja::Template t(src, {.trim_blocks = true, .lstrip_blocks = true});
  return t.render(Value::from_json(nlohmann::ordered_json::parse(vars_json)));
}

std::string plain(const std::string& src, const std::string& vars_json = "{}") {
  return jinja::Template(src).render(Value::from_json(nlohmann::ordered_json::parse(vars_json)));
}

std::string error_of(const std::string& src, const std::string& vars_json = "{}") {
  try {
    render(src, vars_json);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- the fixtures ---------------------------------------------------------------

void check_fixture(const std::string& name) {
  const std::string dir = kShared + "/fixtures/" + name;
  const auto cases = nlohmann::ordered_json::parse(slurp(dir + "/cases.json"));
  // The template the HF loader finds (chat_template.jinja next to tokenizer_config.json).
  gguf::File file;
  add_hf_tokenizer_metadata(dir, 0, file);
  const std::string source = chat_template_source(file);
  ASSERT_FALSE(source.empty()) << name;
  EXPECT_EQ(source, slurp(dir + "/chat_template.jinja"));
  const auto cfg = nlohmann::ordered_json::parse(slurp(dir + "/tokenizer_config.json"));
  const auto token = [&](const char* key) { return cfg[key].is_string() ? cfg[key].get<std::string>() : ""; };
  ChatTemplate tmpl(source);
  ASSERT_FALSE(cases["chat"].empty());
  for (const auto& c : cases["chat"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(tmpl.render(messages, c["add_generation_prompt"], token("bos_token"), token("eos_token")),
              c["prompt"].get<std::string>())
        << name << ": " << c["messages"].dump();
  }
}

TEST(ChatTemplate, Qwen2FixtureMatchesHuggingFace) { check_fixture("tok-qwen2"); }
TEST(ChatTemplate, Llama3FixtureMatchesHuggingFace) { check_fixture("tok-llama3"); }

TEST(ChatTemplate, ExtraVariablesAndMessageValues) {
  ChatTemplate t("{% for m in messages %}[{{ m.role }}:{{ m.content }}{{ '+tools' if m.tool_calls }}]{% endfor %}"
                 "{{ tools | length }}{{ eos_token }}");
  const Value messages = Value::from_json(nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"name":"f"}]}])"));
  const Value extra = Value::from_json(nlohmann::ordered_json::parse(R"({"tools":[1,2,3]})"));
  EXPECT_EQ(t.render(messages, false, "<s>", "</s>", extra), "[user:hi][assistant:+tools]3</s>");
}

// ---- statements -------------------------------------------------------------------

TEST(Jinja, IfElifElse) {
  const std::string t = "{% if x > 2 %}big{% elif x > 0 %}small{% else %}none{% endif %}";
  EXPECT_EQ(plain(t, R"({"x":5})"), "big");
  EXPECT_EQ(plain(t, R"({"x":1})"), "small");
  EXPECT_EQ(plain(t, R"({"x":0})"), "none");
}

TEST(Jinja, ForLoopVariables) {
  EXPECT_EQ(plain("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}{% if loop.first %}F{% endif %}"
                  "{% if loop.last %}L{{ loop.length }}{% endif %},{% endfor %}",
                  R"({"xs":["a","b","c"]})"),
            "10aF,21b,32cL3,");
  EXPECT_EQ(plain("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", R"({"xs":[]})"), "empty");
  EXPECT_EQ(plain("{% for x in xs if x is odd %}{{ x }}{{ loop.length }}{% endfor %}", R"({"xs":[1,2,3]})"),
            "1232");
  EXPECT_EQ(plain("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                  "{{ x }}{% endfor %}",
                  R"({"xs":[1,2,3,4,5]})"),
            "13");
  EXPECT_EQ(plain("{% for x in range(3) %}{{ loop.cycle('a','b') }}{{ loop.revindex }}{% endfor %}"), "a3b2a1");
}

TEST(Jinja, ForOverDictItems) {
  EXPECT_EQ(plain("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d":{"b":1,"a":2}})"), "b=1;a=2;");
  EXPECT_EQ(plain("{% for k in d %}{{ k }}{% endfor %}{% for v in d.values() %}{{ v }}{% endfor %}",
                  R"({"d":{"x":1,"y":2}})"),
            "xy12");
  EXPECT_EQ(plain("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", R"({"d":{"x":1}})"), "x1");
}

TEST(Jinja, SetAndScoping) {
  EXPECT_EQ(plain("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(plain("{% set ns = namespace(a=1, found=false) %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}"
                  "{% set ns.found = true %}{% endfor %}{{ ns.a }}{{ ns.found }}"),
            "4True");
  EXPECT_EQ(plain("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(plain("{% set block %}hi {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[hi 2]");
  EXPECT_NE(error_of("{% set d = {} %}{% set d.a = 1 %}").find("not a namespace"), std::string::npos);
}

TEST(Jinja, Macros) {
  EXPECT_EQ(plain("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                  "{{ greet('Ann') }} {{ greet('Bob', punct='?') }}"),
            "Hi Ann! Hi Bob?");
  EXPECT_EQ(plain("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"), "[in]");
}

TEST(Jinja, FilterBlockRawAndGeneration) {
  EXPECT_EQ(plain("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(plain("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
  EXPECT_EQ(plain("{% generation %}reply{% endgeneration %}"), "reply");
}

TEST(Jinja, CommentsAndWhitespaceControl) {
  EXPECT_EQ(plain("a{# note #}b"), "ab");
  EXPECT_EQ(plain("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(plain("a\n  {%- if true -%}\n  b\n{%- endif %}"), "ab");
  EXPECT_EQ(plain("{% if true %}\nx\n{% endif %}\n"), "\nx\n\n");
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\n"), "x\n");
  EXPECT_EQ(render("<\n    {% for i in [1,2] %}\n  {{ i }}\n    {% endfor %}\n>"), "<\n  1\n  2\n>");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("{# c #}\nz"), "z");
  EXPECT_EQ(render("  {{ 1 }}\n{{ 2 }}\n"), "  1\n2\n");  // {{ }} is not a block: no trimming
}

// ---- expressions ------------------------------------------------------------------

TEST(Jinja, LiteralsAndAccess) {
  EXPECT_EQ(plain("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(plain("{{ {'a': 1, \"b\": [2]} }}"), "{'a': 1, 'b': [2]}");
  EXPECT_EQ(plain("{{ m['role'] }}{{ m.role }}{{ m.missing }}|{{ xs[0] }}{{ xs[-1] }}{{ xs.1 }}",
                  R"({"m":{"role":"user"},"xs":[1,2,3]})"),
            "useruser|132");
  EXPECT_EQ(plain("{{ xs[1:] }}{{ xs[::-1] }}{{ xs[:-1] }}{{ s[1:3] }}{{ s[::-1] }}", R"({"xs":[1,2,3],"s":"abcd"})"),
            "[2, 3][3, 2, 1][1, 2]bcdcba");
  EXPECT_EQ(plain("{{ 'a\\n\\'b' }}"), "a\n'b");
}

TEST(Jinja, Arithmetic) {
  EXPECT_EQ(plain("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "7 3 -4 1 2 3.5 1024");
  EXPECT_EQ(plain("{{ 1.5 + 1 }} {{ 'ab' ~ 1 ~ none }} {{ 'x' + 'y' }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ -(3) }}"),
            "2.5 ab1None xy abab [1, 2] -3");
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
}

TEST(Jinja, LogicAndComparisons) {
  EXPECT_EQ(plain("{{ 1 < 2 and 2 <= 2 and 3 > 2 and 3 >= 3 and 1 == 1.0 and 1 != 2 }}"), "True");
  EXPECT_EQ(plain("{{ not true or false }} {{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in d }} {{ 'z' not in d }}",
                  R"({"d":{"k":1}})"),
            "False True True True True");
  EXPECT_EQ(plain("{{ 'yes' if x else 'no' }}{{ 'y' if undefined_var }}.", R"({"x":1})"), "yes.");
  EXPECT_EQ(plain("{{ none or 'fallback' }} {{ 0 and 1 }}"), "fallback 0");
}

TEST(Jinja, Tests) {
  const std::string vars = R"({"s":"x","n":1,"f":1.5,"d":{},"l":[],"z":null})";
  EXPECT_EQ(plain("{{ s is defined }}{{ u is undefined }}{{ z is none }}{{ s is string }}{{ n is number }}"
                  "{{ f is number }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ n is not string }}",
                  vars),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(plain("{{ n is integer }}{{ f is float }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 3 is divisibleby(2) }}"
                  "{{ z is sameas none }}{{ true is true }}{{ 2 is eq 2 }}{{ s is in ['x'] }}",
                  vars),
            "TrueTrueTrueTrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(plain("{% if u is defined and u.x %}a{% else %}b{% endif %}"), "b");
}

TEST(Jinja, UndefinedIsFalsyAndEmpty) {
  EXPECT_EQ(plain("[{{ nothing }}][{{ nothing.attr }}][{{ nothing['k'] }}]{% if nothing %}x{% endif %}"), "[][][]");
  EXPECT_EQ(plain("{{ nothing | default('dflt') }} {{ '' | default('e', true) }} {{ 0 | d(5) }}"), "dflt e 0");
}

// ---- filters ----------------------------------------------------------------------

TEST(Jinja, StringFilters) {
  EXPECT_EQ(plain("[{{ '  a b  ' | trim }}][{{ 'xxaxx' | trim('x') }}]"), "[a b][a]");
  EXPECT_EQ(plain("{{ 'aBc' | upper }} {{ 'aBc' | lower }} {{ 'hello wORLD-x' | title }} {{ 'hELLO' | capitalize }}"),
            "ABC abc Hello World-X Hello");
  EXPECT_EQ(plain("{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}"), "a+b+c bba");
  EXPECT_EQ(plain("{{ 12 | string ~ 'x' }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ 3 | float }}"),
            "12x 43 0 2.5 3.0");
  EXPECT_EQ(plain("{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }}"), "2.57 2.0 3.0");
  EXPECT_EQ(plain("{{ '<a href=\"x\">&' | escape }} {{ '<b>' | safe }}"), "&lt;a href=&#34;x&#34;&gt;&amp; <b>");
  EXPECT_EQ(plain("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
}

TEST(Jinja, CollectionFilters) {
  const std::string vars = R"({"xs":[3,1,2],"ms":[{"n":"a","v":1},{"n":"b","v":2}],"d":{"b":2,"a":1}})";
  EXPECT_EQ(plain("{{ xs | length }} {{ xs | count }} {{ 'héllo' | length }} {{ d | length }}", vars), "3 3 5 2");
  EXPECT_EQ(plain("{{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ 'ab' | list }}", vars),
            "3, 1, 2 3 2 ['a', 'b']");
  EXPECT_EQ(plain("{{ ms | map(attribute='n') | join }} {{ ms | map(attribute='v') | sum }} {{ xs | sort }}", vars),
            "ab 3 [1, 2, 3]");
  EXPECT_EQ(plain("{{ ms | selectattr('v', 'gt', 1) | map(attribute='n') | list }} {{ xs | select('odd') | list }}"
                  " {{ xs | reject('odd') | list }} {{ ms | rejectattr('v', 'eq', 1) | list | length }}",
                  vars),
            "['b'] [3, 1] [2] 1");
  EXPECT_EQ(plain("{{ xs | reverse | list }} {{ xs | max }} {{ xs | min }} {{ [1,1,2] | unique | list }}", vars),
            "[2, 1, 3] 3 1 [1, 2]");
  EXPECT_EQ(plain("{{ d | items | list }} {{ d | dictsort }} {{ ['a','b'] | map('upper') | join }}", vars),
            "[['b', 2], ['a', 1]] [['a', 1], ['b', 2]] AB");
}

TEST(Jinja, ToJson) {
  const std::string vars = R"({"t":{"name":"f","args":{"x":[1,2.5,null,true]},"s":"é\"\n"}})";
  EXPECT_EQ(plain("{{ t | tojson }}", vars),
            R"({"name": "f", "args": {"x": [1, 2.5, null, true]}, "s": "é\"\n"})");
  EXPECT_EQ(plain("{{ t.args | tojson(indent=2) }}", vars), "{\n  \"x\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(plain("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [] | tojson }} {{ 'x' | tojson }}"),
            R"({"a": 2, "b": 1} [] "x")");
}

// ---- methods and globals ------------------------------------------------------------

TEST(Jinja, StringMethods) {
  EXPECT_EQ(plain("{{ s.startswith('He') }}{{ s.endswith('!') }}{{ s.startswith(('x', 'H')) }}", R"({"s":"Hello!"})"),
            "TrueTrueTrue");
  EXPECT_EQ(plain("[{{ ' a '.strip() }}][{{ ' a '.lstrip() }}][{{ ' a '.rstrip() }}][{{ 'xax'.strip('x') }}]"),
            "[a][a ][ a][a]");
  EXPECT_EQ(plain("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.split('-', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b-c']");
  EXPECT_EQ(plain("{{ 'aXa'.replace('a', 'b') }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'ab cd'.title() }}"),
            "bXb AB ab Ab Cd");
  EXPECT_EQ(plain("{{ '{} is {}'.format('x', 1) }} {{ '{name}!'.format(name='n') }} {{ '-'.join(['a','b']) }}"),
            "x is 1 n! a-b");
  EXPECT_EQ(plain("{{ (s.split('</think>') | last).strip() }}", R"({"s":"<think>r</think>\n answer "})"), "answer");
}

TEST(Jinja, DictMethodsAndGlobals) {
  const std::string vars = R"({"d":{"a":1,"b":2}})";
  EXPECT_EQ(plain("{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 9) }} {{ d.get('z') }}",
                  vars),
            "['a', 'b'] [1, 2] 1 9 None");
  EXPECT_EQ(plain("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1) }}"), "[0, 1, 2] [1, 3, 5] {'a': 1}");
  EXPECT_EQ(plain("{{ strftime_now('%Y') | length }}"), "4");
}

// ---- errors -------------------------------------------------------------------------

TEST(Jinja, ErrorsNameTheLocation) {
  EXPECT_NE(error_of("ab\n{% if x %}never closed").find("line 2, column 4: unclosed block: expected '{% endif %}'"),
            std::string::npos)
      << error_of("ab\n{% if x %}never closed");
  EXPECT_NE(error_of("{% for x in y %}").find("endfor"), std::string::npos);
  EXPECT_NE(error_of("x {{ y | nosuchfilter }}").find("line 1, column 10: unknown filter 'nosuchfilter'"),
            std::string::npos)
      << error_of("x {{ y | nosuchfilter }}");
  EXPECT_NE(error_of("{{ 1 + }}").find("expected an expression"), std::string::npos);
  EXPECT_NE(error_of("{{ x").find("unclosed tag"), std::string::npos);
  EXPECT_NE(error_of("{% frobnicate %}").find("unknown statement 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is nosuchtest }}").find("unknown test"), std::string::npos);
  EXPECT_NE(error_of("{{ nosuchfn(1) }}").find("unknown function 'nosuchfn'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'.nosuchmethod() }}").find("no method 'nosuchmethod'"), std::string::npos);
}

TEST(Jinja, RaiseException) {
  const std::string t = "{% if messages[0].role != 'user' %}\n  {{ raise_exception('Conversation must start with user') }}"
                        "{% endif %}ok";
  EXPECT_EQ(render(t, R"({"messages":[{"role":"user"}]})"), "ok");
  const std::string err = error_of(t, R"({"messages":[{"role":"system"}]})");
  EXPECT_NE(err.find("line 2, column"), std::string::npos) << err;
  EXPECT_NE(err.find("raise_exception: Conversation must start with user"), std::string::npos) << err;
}

// A template in the style of real models' (Qwen2.5 with tools): namespaces,
// reverse iteration, tojson, string tests and nested conditions.
TEST(Jinja, ToolCallingTemplate) {
  const std::string t = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}{{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in messages[::-1] %}
    {%- if message.role == 'user' and ns.last_user < 0 %}{% set ns.last_user = messages|length - 1 - loop.index0 %}{% endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "assistant" and message.tool_calls is defined %}
        {{- '<|im_start|>assistant' }}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' + tool_call.arguments | tojson + '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role != 'system' or not tools %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{{- ns.last_user }}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})";
  const std::string vars = R"({"tools":[{"name":"get","parameters":{"a":1}}],"add_generation_prompt":true,
    "messages":[{"role":"system","content":"S"},{"role":"user","content":"U"},
                {"role":"assistant","content":"","tool_calls":[{"name":"get","arguments":{"a":2}}]}]})";
  EXPECT_EQ(render(t, vars),
            "<|im_start|>system\nS\n\n# Tools\n<tools>\n{\"name\": \"get\", \"parameters\": {\"a\": 1}}\n</tools>"
            "<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get\", "
            "\"arguments\": {\"a\": 2}}\n</tool_call><|im_end|>\n1<|im_start|>assistant\n");
}

// Idioms of released models' templates: reasoning split-off, alternation checks,
// tests on booleans, conditional tojson, dict.get and messages[1:].
TEST(Jinja, RealTemplateIdioms) {
  const std::string t = R"({%- set ns = namespace(last=-1) %}
{%- for m in messages %}
    {%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('roles must alternate') }}
    {%- endif %}
    {%- if m.role == 'assistant' %}
        {%- set content = m.content.split('</think>')[-1].lstrip('\n') %}
        {%- set reasoning = m.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {{- '[A:' + content + '|R:' + reasoning + ']' }}
        {%- for c in m.tool_calls | default([]) %}
            {{- c.arguments if c.arguments is string else c.arguments | tojson }}
        {%- endfor %}
    {%- else %}
        {{- '[' ~ m.get('name', 'anon') ~ ':' ~ m.content | trim ~ ']' }}
    {%- endif %}
{%- endfor %}
{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>' }}{% endif %}
{{- messages[1:] | length }})";
  const std::string vars = R"({"enable_thinking":false,"messages":[
    {"role":"user","content":"  q ","name":"bob"},
    {"role":"assistant","content":"<think>\nhmm\n</think>\n\nok","tool_calls":[{"arguments":{"a":1}},{"arguments":"{}"}]},
    {"role":"user","content":"again"}]})";
  EXPECT_EQ(render(t, vars), "[bob:q][A:ok|R:hmm]{\"a\": 1}{}[anon:again]<think>\n\n</think>2");
  EXPECT_NE(error_of(t, R"({"messages":[{"role":"assistant","content":"x"}]})").find("roles must alternate"),
            std::string::npos);
}

// ---- spool run --chat -------------------------------------------------------------

struct RunResult {
  int status = -1;
  std::string out, err;
};

RunResult spool_cli(const std::string& dir, const std::string& args) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const int rc = std::system((std::string(SPOOL_BIN) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

// A model directory of `fixture`'s files plus `template_fixture`'s chat template;
// tokenizer_config.json replaced by `tokenizer_config` when given.
std::string model_with_template(const std::string& dir, const std::string& fixture,
                                const std::string& template_fixture, const std::string& tokenizer_config = "") {
  const std::string model = dir + "/" + fixture;
  fs::create_directory(model);
  for (const auto& f : fs::directory_iterator(kShared + "/fixtures/" + fixture))
    if (tokenizer_config.empty() || f.path().filename() != "tokenizer_config.json")
      fs::create_symlink(f.path(), model + "/" + f.path().filename().string());
  if (!tokenizer_config.empty()) std::ofstream(model + "/tokenizer_config.json") << tokenizer_config;
  fs::copy_file(kShared + "/fixtures/" + template_fixture + "/chat_template.jinja", model + "/chat_template.jinja");
  return model;
}

// Random-weight models given the tok-* templates: --chat must generate what the
// plain rendered prompt generates, with BOS added once when the template writes it.
TEST(ChatTemplate, RunChatFeedsTheRenderedPrompt) {
  std::string dir = (fs::temp_directory_path() / "spool-chat-test-XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  const std::string common = " -n 6 --temp 0 --output-ids -t 1";
  {  // qwen2: no BOS; the template adds a default system message when none is given
    const std::string model = model_with_template(dir, "qwen2-tiny", "tok-qwen2");
    std::ofstream(dir + "/qwen.txt", std::ios::binary)
        << "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
    const RunResult chat = spool_cli(dir, "run -m " + model + " --chat -p 'Hi there' --system 'Be brief.'" + common);
    const RunResult plain_run = spool_cli(dir, "run -m " + model + " -f " + dir + "/qwen.txt" + common);
    EXPECT_EQ(chat.status, 0) << chat.err;
    EXPECT_FALSE(chat.out.empty());
    EXPECT_EQ(chat.out, plain_run.out);
    EXPECT_NE(chat.err.find("prompt 36 tokens"), std::string::npos) << chat.err;
    EXPECT_NE(plain_run.err.find("prompt 36 tokens"), std::string::npos) << plain_run.err;
  }
  {  // llama3 with add_bos_token: the template writes <|begin_of_text|>, so no second BOS
    const std::string model = model_with_template(
        dir, "llama-tiny", "tok-llama3",
        R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": true})");
    std::ofstream(dir + "/llama.txt", std::ios::binary)
        << "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n";
    const RunResult chat = spool_cli(dir, "run -m " + model + " --chat -p ' Hi '" + common);
    const RunResult plain_run = spool_cli(dir, "run -m " + model + " --no-bos -f " + dir + "/llama.txt" + common);
    const RunResult doubled = spool_cli(dir, "run -m " + model + " -f " + dir + "/llama.txt" + common);
    EXPECT_EQ(chat.status, 0) << chat.err;
    EXPECT_EQ(chat.out, plain_run.out);
    EXPECT_NE(chat.err.find("prompt 21 tokens"), std::string::npos) << chat.err;
    EXPECT_NE(doubled.err.find("prompt 22 tokens"), std::string::npos) << doubled.err;  // BOS added twice
  }
  const RunResult none = spool_cli(dir, "run -m " + kShared + "/fixtures/qwen2-tiny --chat -p hi -n 1");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("no chat template"), std::string::npos) << none.err;
  fs::remove_all(dir);
}

}  // namespace
