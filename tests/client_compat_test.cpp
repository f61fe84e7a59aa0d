// What OpenAI client libraries send and expect beyond the basics (issue 25,
// items 6 and 8): logit_bias in the sampler and the request parser, legacy
// `functions` / `function_call`, the `developer` role and unknown roles, and
// tool calls cut short by max_tokens in a non-streamed reply.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/openai_request.h"
#include "server/structured_output.h"
#include "text/chat_template.h"

using namespace spool;
using namespace spool::server;
using nlohmann::json;

namespace {

// Logits where token 3 is the clear argmax and token 6 the least likely.
std::vector<float> peaked_logits() { return {0.5f, 1.0f, 0.2f, 4.0f, 1.5f, -0.3f, -2.0f, 0.9f}; }

SamplingParams sampling(float temperature, std::vector<std::pair<int32_t, float>> bias) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  p.logit_bias = std::move(bias);
  return p;
}

}  // namespace

TEST(ClientCompatSampler, NoBiasKeepsTheArgmax) {
  const auto logits = peaked_logits();
  Sampler s(sampling(0, {}), (int)logits.size());
  EXPECT_EQ(s.sample(logits.data()), 3);
}

TEST(ClientCompatSampler, PlusHundredForcesATokenGreedy) {
  const auto logits = peaked_logits();
  Sampler s(sampling(0, {{6, 100.0f}}), (int)logits.size());
  EXPECT_EQ(s.sample(logits.data()), 6);
}

TEST(ClientCompatSampler, PlusHundredForcesATokenWhenSampling) {
  const auto logits = peaked_logits();
  Sampler s(sampling(1.0f, {{6, 100.0f}}), (int)logits.size());
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits.data()), 6) << "draw " << i;
}

TEST(ClientCompatSampler, MinusHundredBansTheArgmax) {
  const auto logits = peaked_logits();
  Sampler greedy(sampling(0, {{3, -100.0f}}), (int)logits.size());
  EXPECT_EQ(greedy.sample(logits.data()), 4);  // the runner-up
  Sampler sampled(sampling(2.0f, {{3, -100.0f}}), (int)logits.size());
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(sampled.sample(logits.data()));
  EXPECT_EQ(seen.count(3), 0u);
  EXPECT_GE(seen.size(), 4u);  // still a draw over the others
}

TEST(ClientCompatSampler, ABanSurvivesAZeroRepeatPenaltyAndAGrammarMask) {
  const auto logits = peaked_logits();
  SamplingParams p = sampling(0, {{3, -100.0f}, {1, -100.0f}});
  p.repeat_penalty = 0.0f;  // would turn -inf into NaN if applied after the ban
  Sampler s(p, (int)logits.size());
  s.accept(3);
  const uint32_t allowed = (1u << 1) | (1u << 3) | (1u << 7);  // grammar: 1, 3 or 7
  EXPECT_EQ(s.sample(logits.data(), &allowed), 7);
  const uint32_t only_banned = (1u << 1) | (1u << 3);
  EXPECT_EQ(s.sample(logits.data(), &only_banned), -1);
}

TEST(ClientCompatSampler, ModerateBiasShiftsTheLogit) {
  const auto logits = peaked_logits();
  Sampler up(sampling(0, {{4, 2.6f}}), (int)logits.size());  // 1.5 + 2.6 > 4.0
  EXPECT_EQ(up.sample(logits.data()), 4);
  Sampler not_enough(sampling(0, {{4, 2.4f}}), (int)logits.size());
  EXPECT_EQ(not_enough.sample(logits.data()), 3);
  Sampler outside(sampling(0, {{99, 100.0f}}), (int)logits.size());  // ids outside the vocabulary are ignored
  EXPECT_EQ(outside.sample(logits.data()), 3);
}

namespace {

json chat(json extra = json::object()) {
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  body.update(extra);
  return body;
}

// The ApiError a body gets, or a failure when it parses.
ApiError parse_error(const json& body, Endpoint e = Endpoint::ChatCompletions) {
  try {
    parse_api_request(body, e);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "no error for " << body.dump();
  return ApiError(0, "", "");
}

// A byte tokenizer with a 300-token vocabulary, enough for to_request_params.
struct ByteTokenizer : Tokenizer {
  std::vector<int32_t> encode(std::string_view text, bool, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string token_to_piece(int32_t id, bool) const override { return std::string(1, (char)id); }
  int32_t n_vocab() const override { return 300; }
  int32_t bos() const override { return -1; }
  int32_t eos() const override { return 299; }
  bool add_bos() const override { return false; }
  bool is_eog(int32_t id) const override { return id == 299; }
  const std::string& token_text(int32_t) const override { return empty_; }
  std::string empty_;
};

}  // namespace

TEST(ClientCompatRequest, LogitBiasIsParsed) {
  const ApiRequest r = parse_api_request(chat({{"logit_bias", {{"5", 100}, {"17", -100}, {"42", 2.5}}}}),
                                         Endpoint::ChatCompletions);
  std::map<int32_t, float> got(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end());
  EXPECT_EQ(got, (std::map<int32_t, float>{{5, 100.0f}, {17, -100.0f}, {42, 2.5f}}));
  EXPECT_TRUE(parse_api_request(chat(), Endpoint::ChatCompletions).sampling.logit_bias.empty());
  EXPECT_TRUE(parse_api_request(chat({{"logit_bias", nullptr}}), Endpoint::ChatCompletions).sampling.logit_bias.empty());
  const ApiRequest c = parse_api_request(json{{"prompt", "x"}, {"logit_bias", {{"1", 1}}}}, Endpoint::Completions);
  EXPECT_EQ(c.sampling.logit_bias.size(), 1u);
}

TEST(ClientCompatRequest, BadLogitBiasIs400NamingIt) {
  json many = json::object();
  for (int i = 0; i < 1025; ++i) many[std::to_string(i)] = 1;
  for (const json& bias : {json::array({1, 2}), json("x"), json{{"abc", 1}}, json{{"-1", 1}}, json{{"1.5", 1}},
                           json{{"", 1}}, json{{"3", "high"}}, json{{"3", 100.5}}, json{{"3", -101}}, many}) {
    const ApiError e = parse_error(chat({{"logit_bias", bias}}));
    EXPECT_EQ(e.status, 400) << bias.dump();
    EXPECT_EQ(e.param, "logit_bias") << bias.dump();
  }
  EXPECT_NE(std::string(parse_error(chat({{"logit_bias", {{"3", 101}}}})).what()).find("between -100 and 100"),
            std::string::npos);
}

TEST(ClientCompatRequest, LogitBiasIdsAreCheckedAgainstTheVocabulary) {
  ByteTokenizer tok;
  PromptContext ctx;
  ctx.tokenizer = &tok;
  ctx.n_ctx = 64;
  const auto params = [&](json bias) {
    return to_request_params(parse_api_request(json{{"prompt", "ab"}, {"logit_bias", bias}}, Endpoint::Completions), ctx);
  };
  EXPECT_EQ(params(json{{"299", -100}}).sampling.logit_bias.size(), 1u);
  try {
    params(json{{"300", 5}});
    ADD_FAILURE() << "token 300 of 300 accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "logit_bias");
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  json all = json::object();
  for (int i = 0; i < 300; ++i) all[std::to_string(i)] = -100;
  EXPECT_THROW(params(all), ApiError);
}

TEST(ClientCompatRequest, RolesAreCheckedAndDeveloperIsKnown) {
  for (const char* role : {"system", "developer", "user", "assistant", "tool", "function"})
    EXPECT_NO_THROW(parse_api_request(json{{"messages", {{{"role", role}, {"content", "x"}}}}}, Endpoint::ChatCompletions))
        << role;
  const ApiError e = parse_error(json{{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "wizard"}, {"content", "b"}}}}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[1].role");
  EXPECT_NE(std::string(e.what()).find("wizard"), std::string::npos);
}

TEST(ClientCompatRequest, DeveloperRendersAsSystemUnlessTheTemplateKnowsIt) {
  const ChatTemplate plain("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  const ChatTemplate knows("{% for m in messages %}{% if m.role == 'developer' %}<dev>{% endif %}[{{ m.role }}]{% endfor %}");
  const ApiRequest r = parse_api_request(
      json{{"messages", {{{"role", "developer"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}}},
      Endpoint::ChatCompletions);
  EXPECT_EQ(template_input(r.structured, plain, {}).messages[0]["role"], "system");
  EXPECT_EQ(template_input(r.structured, knows, {}).messages[0]["role"], "developer");
}

TEST(ClientCompatRequest, LegacyFunctionsMapToTools) {
  const json fn = {{"name", "get_weather"}, {"description", "Weather"},
                   {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}};
  const auto structured = [&](json extra) {
    return parse_api_request(chat(extra), Endpoint::ChatCompletions).structured;
  };
  StructuredRequest s = structured({{"functions", {fn}}});
  ASSERT_EQ(s.tools.size(), 1u);
  EXPECT_EQ(s.tools[0].name, "get_weather");
  EXPECT_EQ(s.tools[0].description, "Weather");
  EXPECT_TRUE(s.tools[0].parameters.contains("properties"));
  EXPECT_EQ(s.tool_choice, ToolChoice::Auto);
  EXPECT_TRUE(s.legacy_functions);
  EXPECT_FALSE(s.parallel_tool_calls);  // one function_call per reply
  EXPECT_TRUE(tool_call_style(nullptr, s).legacy_function_call);
  EXPECT_EQ(structured({{"functions", {fn}}, {"function_call", "none"}}).tool_choice, ToolChoice::None);
  s = structured({{"functions", {fn}}, {"function_call", {{"name", "get_weather"}}}});
  EXPECT_EQ(s.tool_choice, ToolChoice::Named);
  EXPECT_EQ(s.tool_name, "get_weather");
  EXPECT_FALSE(structured({{"tools", {{{"type", "function"}, {"function", fn}}}}}).legacy_functions);

  EXPECT_EQ(parse_error(chat({{"function_call", "auto"}})).param, "function_call");
  EXPECT_EQ(parse_error(chat({{"functions", {fn}}, {"function_call", {{"name", "nope"}}}})).param, "function_call");
  EXPECT_EQ(parse_error(chat({{"functions", {fn}}, {"function_call", "required"}})).param, "function_call");
  EXPECT_EQ(parse_error(chat({{"functions", {fn}}, {"tools", {{{"type", "function"}, {"function", fn}}}}})).param,
            "functions");
  EXPECT_EQ(parse_error(chat({{"functions", {{{"name", "bad name"}}}}})).param, "functions[0].name");
}

TEST(ClientCompatRequest, LegacyFunctionMessagesRenderAsToolCallsAndResults) {
  const ApiRequest r = parse_api_request(
      json{{"messages",
            {{{"role", "user"}, {"content", "weather?"}},
             {{"role", "assistant"}, {"content", nullptr}, {"function_call", {{"name", "w"}, {"arguments", "{\"city\":\"Oslo\"}"}}}},
             {{"role", "function"}, {"name", "w"}, {"content", "cold"}}}}},
      Endpoint::ChatCompletions);
  const nlohmann::ordered_json& m = r.structured.messages;
  ASSERT_EQ(m.size(), 3u);
  ASSERT_TRUE(m[1].contains("tool_calls"));
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "w");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["tool_call_id"], m[1]["tool_calls"][0]["id"]);
}

namespace {

const ToolCallStyle kHermes{"<tool_call>\n", "\n</tool_call>"};
const char* kCall1 = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
const char* kCall2 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

json reply(const std::string& text, FinishReason reason, const ToolCallStyle& style = kHermes, bool tools = true) {
  ResponseMeta m;
  m.endpoint = Endpoint::ChatCompletions;
  m.id = "chatcmpl-test";
  m.tools = tools;
  m.tool_style = style;
  Generation g;
  g.text = text;
  g.finished = true;
  g.reason = reason;
  return completion_response(m, g, [](int32_t) { return std::string(); })["choices"][0];
}

}  // namespace

TEST(ClientCompatToolCalls, CompleteCallsBeforeACutAreReturnedAndTheCutOneDropped) {
  const std::string cut = std::string(kCall1) + "\n" + kCall2 + "\n<tool_call>\n{\"name\": \"add\", \"argum";
  const json c = reply(cut, FinishReason::Length);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_TRUE(c["message"]["content"].is_null()) << c.dump();
  ASSERT_EQ(c["message"]["tool_calls"].size(), 2u) << c.dump();
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "add");
  EXPECT_EQ(json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(c["message"]["tool_calls"][1]["function"]["name"], "get_weather");
  // Cut between calls, in the open tag, or right after a complete call.
  EXPECT_EQ(reply(std::string(kCall1) + "\n<tool", FinishReason::Length)["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(reply(std::string(kCall1) + "\n", FinishReason::Length)["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(reply(std::string(kCall1) + "\n</tool", FinishReason::Length)["message"].dump().find("</tool"),
            std::string::npos);
}

TEST(ClientCompatToolCalls, ACutFirstCallLeavesNoSyntaxInContent) {
  for (const char* text : {"<tool_call>\n{\"name\": \"ad", "<tool", "<"}) {
    const json c = reply(text, FinishReason::Length);
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(c["message"]["content"], "") << text;
    EXPECT_FALSE(c["message"].contains("tool_calls"));
  }
  const json bare = reply("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\"", FinishReason::Length, ToolCallStyle{});
  EXPECT_EQ(bare["message"]["content"], "");
  const json bare2 = reply("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n{\"na", FinishReason::Length,
                           ToolCallStyle{});
  EXPECT_EQ(bare2["message"]["tool_calls"].size(), 1u);
}

TEST(ClientCompatToolCalls, UncutCallsAndTextAnswersAreUnchanged) {
  const json whole = reply(std::string(kCall1) + "\n" + kCall2, FinishReason::Stop);
  EXPECT_EQ(whole["finish_reason"], "tool_calls");
  EXPECT_TRUE(whole["message"]["content"].is_null());
  EXPECT_EQ(whole["message"]["tool_calls"].size(), 2u);
  // Text (it cannot start as a call does) and, with a response_format, a
  // formatted JSON answer cut short: content as generated.
  const json text = reply("The weather is", FinishReason::Length);
  EXPECT_EQ(text["message"]["content"], "The weather is");
  EXPECT_EQ(text["finish_reason"], "length");
  const json answer = reply("{\"answer\": \"sun", FinishReason::Length);
  EXPECT_EQ(answer["message"]["content"], "{\"answer\": \"sun");
  EXPECT_FALSE(answer["message"].contains("tool_calls"));
  // Without tools nothing is read as a call.
  EXPECT_EQ(reply(kCall1, FinishReason::Stop, kHermes, false)["message"]["content"], kCall1);
}

TEST(ClientCompatToolCalls, LegacyRequestsGetFunctionCall) {
  ToolCallStyle legacy = kHermes;
  legacy.legacy_function_call = true;
  const json c = reply(kCall1, FinishReason::Stop, legacy);
  EXPECT_EQ(c["finish_reason"], "function_call");
  EXPECT_TRUE(c["message"]["content"].is_null());
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_EQ(c["message"]["function_call"]["name"], "add");
  EXPECT_EQ(json::parse(c["message"]["function_call"]["arguments"].get<std::string>()), json({{"a", 1}, {"b", 2}}));
  const json cut = reply("<tool_call>\n{\"name\": \"ad", FinishReason::Length, legacy);
  EXPECT_EQ(cut["finish_reason"], "length");
  EXPECT_FALSE(cut["message"].contains("function_call"));

  ResponseMeta m;
  m.endpoint = Endpoint::ChatCompletions;
  m.tools = true;
  m.tool_style = legacy;
  const json first = tool_call_chunk(m, ToolCallDelta{0, "call_x", "add", "{\"a\""}, false)["choices"][0]["delta"];
  EXPECT_EQ(first, json({{"function_call", {{"name", "add"}, {"arguments", "{\"a\""}}}}));
  const json more = tool_call_chunk(m, ToolCallDelta{0, "", "", ": 1}"}, false)["choices"][0]["delta"];
  EXPECT_EQ(more, json({{"function_call", {{"arguments", ": 1}"}}}}));
  EXPECT_EQ(finish_chunk(m, "tool_calls", false)["choices"][0]["finish_reason"], "function_call");
  EXPECT_EQ(finish_chunk(m, "length", false)["choices"][0]["finish_reason"], "length");
}
