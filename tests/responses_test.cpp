// The Responses API's pure parts: request parsing (input items normalized,
// tools / tool_choice / text.format translated, errors naming the Responses
// fields), items -> template messages, the event machine (OpenAI's event
// names, order and sequence numbers; the same output streamed and whole),
// input_items pages, and conversation prompts that continue a previous
// response's exact tokens (or splice known spans) with the tok-qwen2 tokenizer
// and chat template. The routes themselves: tests/api/responses.test.mjs.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "format/gguf.h"
#include "server/api_error.h"
#include "server/responses_format.h"
#include "server/responses_prompt.h"
#include "server/responses_request.h"
#include "text/chat_template.h"
#include "text/hf_tokenizer.h"

namespace spool::server {
namespace {

using ojson = nlohmann::ordered_json;

ResponsesRequest parse(const std::string& body) { return parse_responses_request(ojson::parse(body)); }

// The param a bad body is refused with ("" when it is accepted).
std::string refused_param(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.param;
  }
  return "";
}

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
  const ResponsesRequest r = parse(R"({"model": "m", "input": "hello", "instructions": "be brief"})");
  ASSERT_EQ(r.input.size(), 1u);
  const ojson& m = r.input[0];
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "user");
  EXPECT_EQ(m["content"][0]["type"], "input_text");
  EXPECT_EQ(m["content"][0]["text"], "hello");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(*r.instructions, "be brief");
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.temperature, 1.0);
}

TEST(ResponsesRequest, ItemsAreNormalized) {
  const ResponsesRequest r = parse(R"({"input": [
    {"role": "developer", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "message", "id": "msg_prev", "role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
    {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\": 1}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "2"},
    {"type": "item_reference", "id": "msg_x"},
    {"type": "reasoning", "id": "rs_1", "summary": []}]})");
  ASSERT_EQ(r.input.size(), 5u);  // the reasoning item is dropped
  EXPECT_EQ(item_text(r.input[0]), "ab");
  EXPECT_EQ(r.input[1]["id"], "msg_prev");
  EXPECT_EQ(r.input[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r.input[2]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(r.input[3]["output"], "2");
  EXPECT_EQ(r.input[4], (ojson{{"type", "item_reference"}, {"id", "msg_x"}}));
}

TEST(ResponsesRequest, ToolsFormatAndChoiceTranslate) {
  const ResponsesRequest r = parse(R"({"input": "x",
    "tools": [{"type": "function", "name": "add", "description": "adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}],
    "tool_choice": {"type": "function", "name": "add"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}}})");
  ASSERT_EQ(r.structured.tools.size(), 1u);
  EXPECT_EQ(r.structured.tools[0].name, "add");
  EXPECT_EQ(r.structured.tools[0].description, "adds");
  EXPECT_EQ(r.structured.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.structured.format, StructuredRequest::Format::JsonSchema);
  EXPECT_EQ(r.tools[0]["name"], "add");  // echoed flat, as the Responses API writes tools
  EXPECT_EQ(r.tools[0]["strict"], true);
  EXPECT_EQ(r.text["format"]["name"], "out");
  // No tools: "auto" changes nothing (clients send it anyway).
  EXPECT_FALSE(parse(R"({"input": "x", "tool_choice": "auto"})").structured.tools_active());
}

TEST(ResponsesRequest, ErrorsNameTheResponsesFields) {
  EXPECT_EQ(refused_param(R"({})"), "input");
  EXPECT_EQ(refused_param(R"({"input": 3})"), "input");
  EXPECT_EQ(refused_param(R"({"input": [{"role": "robot", "content": "x"}]})"), "input[0].role");
  EXPECT_EQ(refused_param(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(refused_param(R"({"input": [{"type": "web_search_call"}]})"), "input[0].type");
  EXPECT_EQ(refused_param(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"),
            "input[0].call_id");
  EXPECT_EQ(refused_param(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(refused_param(R"({"input": "x", "tools": [{"type": "function", "name": "bad name"}]})"), "tools[0].name");
  EXPECT_EQ(refused_param(R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
                              "tool_choice": {"type": "function", "name": "g"}})"), "tool_choice");
  EXPECT_EQ(refused_param(R"({"input": "x", "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(refused_param(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"), "text.format.type");
  EXPECT_EQ(refused_param(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}})"),
            "text.format.schema");
  EXPECT_EQ(refused_param(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
  EXPECT_EQ(refused_param(R"({"input": "x", "temperature": 3})"), "temperature");
  EXPECT_EQ(refused_param(R"({"input": "x", "metadata": {"k": 1}})"), "metadata");
  EXPECT_EQ(refused_param(R"({"input": "x", "conversation": "conv_1"})"), "conversation");
  EXPECT_EQ(refused_param(R"({"input": "x", "store": "yes"})"), "store");
}

TEST(ResponsesRequest, ItemsBecomeTemplateMessages) {
  const ResponsesRequest r = parse(R"({"input": [
    {"role": "user", "content": "weather?"},
    {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{\"city\": \"Paris\"}"},
    {"type": "function_call", "call_id": "c2", "name": "get", "arguments": "{\"city\": \"Rome\"}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "message", "id": "msg_a", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]})");
  const ojson m = items_to_messages(std::string("sys"), r.input, {"msg_a"});
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], (ojson{{"role", "system"}, {"content", "sys"}}));
  EXPECT_EQ(m[1]["content"], "weather?");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);  // calls in a row are one assistant turn
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[2]["tool_calls"][1]["function"]["arguments"]["city"], "Rome");  // parsed, as templates expect
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "c1");
  EXPECT_EQ(m[3]["name"], "get");
  EXPECT_EQ(m[3]["content"], "sunny");
  EXPECT_EQ(m[4]["spool_span"], 0);
  EXPECT_THROW(items_to_messages(std::nullopt, ojson::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"},
                                                             {"arguments", "{not json"}}})),
               ApiError);
}

std::vector<std::string> types(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (const json& e : events) out.push_back(e["type"]);
  return out;
}

json skeleton() { return response_skeleton(parse(R"({"input": "x"})"), "resp_1", "m", 1700000000); }

TEST(ResponseEvents, MessageEventsInOrderWithSequenceNumbers) {
  ResponseEvents ev(skeleton(), false, {});
  std::vector<json> all = ev.start();
  for (const char* piece : {"Hel", "lo"})
    for (json& e : ev.text(piece)) all.push_back(std::move(e));
  ResponseEnd end;
  end.input_tokens = 10;
  end.cached_tokens = 4;
  end.output_tokens = 2;
  for (json& e : ev.finish(end)) all.push_back(std::move(e));
  EXPECT_EQ(types(all), (std::vector<std::string>{
                            "response.created", "response.in_progress", "response.output_item.added",
                            "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                            "response.output_text.done", "response.content_part.done", "response.output_item.done",
                            "response.completed"}));
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["sequence_number"], (int)i);
  EXPECT_EQ(all[0]["response"]["status"], "in_progress");
  const std::string item_id = all[2]["item"]["id"];
  EXPECT_EQ(item_id.rfind("msg_", 0), 0u);
  EXPECT_EQ(all[4]["item_id"], item_id);
  EXPECT_EQ(all[5]["delta"], "lo");
  EXPECT_EQ(all[6]["text"], "Hello");
  const json& r = all.back()["response"];
  EXPECT_EQ(r, ev.response());
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["output"][0]["id"], item_id);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][0]["content"][0]["annotations"], json::array());
  EXPECT_EQ(r["usage"], (json{{"input_tokens", 10}, {"input_tokens_details", {{"cached_tokens", 4}}}, {"output_tokens", 2},
                              {"output_tokens_details", {{"reasoning_tokens", 0}}}, {"total_tokens", 12}}));
  EXPECT_EQ(sse_event(all[0]).rfind("event: response.created\ndata: {", 0), 0u);
}

TEST(ResponseEvents, CutByMaxOutputTokensIsIncomplete) {
  ResponseEvents ev(skeleton(), false, {});
  ev.text("abc");
  ResponseEnd end;
  end.kind = ResponseEnd::Kind::Incomplete;
  const std::vector<json> done = ev.finish(end);
  EXPECT_EQ(done.back()["type"], "response.incomplete");
  EXPECT_EQ(ev.response()["status"], "incomplete");
  EXPECT_EQ(ev.response()["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(ev.response()["output"][0]["status"], "incomplete");
}

TEST(ResponseEvents, NoTextStillGivesAnEmptyMessage) {
  ResponseEvents ev(skeleton(), false, {});
  EXPECT_EQ(types(ev.finish({})), (std::vector<std::string>{
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  EXPECT_EQ(ev.response()["output"][0]["content"][0]["text"], "");
}

TEST(ResponseEvents, ToolCallsStreamAsFunctionCallItems) {
  ResponseEvents ev(skeleton(), true, {});
  std::vector<json> all;
  for (const char* piece : {"{\"name\": \"add\", \"argu", "ments\": {\"a\": 1", ", \"b\": 2}}\n{\"name\": \"get\", ",
                            "\"arguments\": {}}"})
    for (json& e : ev.text(piece)) all.push_back(std::move(e));
  for (json& e : ev.finish({})) all.push_back(std::move(e));
  EXPECT_EQ(types(all), (std::vector<std::string>{
                            "response.output_item.added", "response.function_call_arguments.delta",
                            "response.function_call_arguments.delta", "response.function_call_arguments.done",
                            "response.output_item.done", "response.output_item.added",
                            "response.function_call_arguments.delta", "response.function_call_arguments.done",
                            "response.output_item.done", "response.completed"}));
  const json& out = ev.response()["output"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["type"], "function_call");
  EXPECT_EQ(out[0]["name"], "add");
  EXPECT_EQ(json::parse(out[0]["arguments"].get<std::string>()), (json{{"a", 1}, {"b", 2}}));
  EXPECT_EQ(out[0]["call_id"], all[0]["item"]["call_id"]);  // the same ids streamed and final
  EXPECT_EQ(out[0]["id"], all[0]["item"]["id"]);
  EXPECT_EQ(out[1]["name"], "get");
  EXPECT_EQ(all[5]["output_index"], 1);
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_TRUE(ev.is_calls());
}

TEST(ResponseEvents, FailureIsAnErrorThenResponseFailed) {
  ResponseEvents ev(skeleton(), false, {});
  ev.text("x");
  ResponseEnd end;
  end.kind = ResponseEnd::Kind::Failed;
  end.error_code = "engine_error";
  end.error_message = "boom";
  const std::vector<json> done = ev.finish(end);
  EXPECT_EQ(types(done), (std::vector<std::string>{"error", "response.failed"}));
  EXPECT_EQ(done[0]["code"], "engine_error");
  EXPECT_EQ(ev.response()["status"], "failed");
  EXPECT_EQ(ev.response()["error"]["message"], "boom");
}

TEST(ResponsesFormat, InputItemsPages) {
  json items = json::array();
  for (int i = 0; i < 5; ++i) items.push_back({{"id", "msg_" + std::to_string(i)}});
  json page = input_items_page(items, 2, "", false);  // OpenAI's default order: newest first
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["first_id"], "msg_4");
  EXPECT_EQ(page["last_id"], "msg_3");
  EXPECT_TRUE(page["has_more"]);
  page = input_items_page(items, 2, "msg_3", false);
  EXPECT_EQ(page["first_id"], "msg_2");
  page = input_items_page(items, 10, "msg_2", true);
  EXPECT_EQ(page["data"].size(), 2u);
  EXPECT_FALSE(page["has_more"]);
}

// ---- conversation prompts over the tok-qwen2 tokenizer and chat template ----

struct Qwen2 {
  Qwen2() {
    const std::string dir = std::string(SPOOL_SHARED_DIR) + "/fixtures/tok-qwen2";
    add_hf_tokenizer_metadata(dir, 0, file);
    tok = load_tokenizer(file);
    tmpl = std::make_unique<ChatTemplate>(chat_template_source(file));
  }
  std::vector<int32_t> render(const ojson& messages) {
    return chat_prompt_tokens(jinja::Value::from_json(messages), *tok, *tmpl, jinja::Value());
  }
  // Text tokenized one character at a time: ids the tokenizer would never give
  // for it, as a sampler may generate them.
  std::vector<int32_t> char_by_char(const std::string& text) {
    std::vector<int32_t> ids;
    for (char c : text) {
      const std::vector<int32_t> one = tok->encode(std::string(1, c), false, false);
      ids.insert(ids.end(), one.begin(), one.end());
    }
    return ids;
  }
  gguf::File file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> tmpl;
};

ojson msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

TEST(ConversationPrompt, FollowUpStartsWithThePreviousTokensExactly) {
  Qwen2 q;
  const int32_t im_end = q.tok->encode("<|im_end|>", false, true).at(0);
  const std::string answer = "Hello there, friend";
  const std::vector<int32_t> generated = q.char_by_char(answer);
  ASSERT_NE(generated, q.tok->encode(answer, false, false));  // not what tokenizing the text gives
  std::vector<int32_t> previous = q.render(ojson::array({msg("user", "Hi")}));
  previous.insert(previous.end(), generated.begin(), generated.end());
  previous.push_back(im_end);

  const ojson convo = ojson::array({msg("user", "Hi"), msg("assistant", answer), msg("user", "And then?")});
  const ConversationPrompt p = conversation_prompt(*q.tmpl, *q.tok, convo, ojson::object(), {}, previous);
  EXPECT_EQ(p.how, ConversationPrompt::How::Continued);
  ASSERT_GT(p.tokens.size(), previous.size());
  EXPECT_TRUE(std::equal(previous.begin(), previous.end(), p.tokens.begin()));
  EXPECT_EQ(tokens_text(*q.tok, p.tokens), q.tmpl->render(jinja::Value::from_json(convo), true, "", "<|im_end|>"));

  // The same conversation sent whole, its answer's tokens known by item id: the same tokens.
  ojson spanned = convo;
  spanned[1]["spool_span"] = 0;
  const ConversationPrompt s = conversation_prompt(*q.tmpl, *q.tok, spanned, ojson::object(), {generated}, {});
  EXPECT_EQ(s.how, ConversationPrompt::How::Spliced);
  EXPECT_EQ(s.tokens, p.tokens);

  // Cut by max_output_tokens (no end token): the template's end follows.
  previous.pop_back();
  const ConversationPrompt cut = conversation_prompt(*q.tmpl, *q.tok, convo, ojson::object(), {}, previous);
  EXPECT_EQ(cut.how, ConversationPrompt::How::Continued);
  EXPECT_EQ(cut.tokens, p.tokens);
}

TEST(ConversationPrompt, FollowUpAfterAToolCallKeepsTheModelsOwnCallText) {
  Qwen2 q;
  // A Hermes-style template: it writes a call in its own layout, so the
  // render never starts with the text the model generated for it.
  const ChatTemplate tools(
      "{%- for m in messages %}{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
      "</tool_response><|im_end|>\n{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
      "{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
      "{{ c.function.arguments | tojson }}}\n</tool_call>\n{% endfor %}<|im_end|>\n{% else %}<|im_start|>"
      "{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{%- endfor %}{%- if add_generation_prompt %}"
      "<|im_start|>assistant\n{% endif %}");
  const auto text = [&](const ojson& messages, bool gen) {
    return tools.render(jinja::Value::from_json(messages), gen, "", "<|im_end|>");
  };
  const int32_t im_end = q.tok->encode("<|im_end|>", false, true).at(0);
  const ojson user = msg("user", "Weather in Paris?");
  const ojson call = {{"role", "assistant"}, {"content", ""},
                      {"tool_calls", ojson::array({{{"id", "c1"}, {"type", "function"},
                                                    {"function", {{"name", "get_weather"},
                                                                  {"arguments", {{"city", "Paris"}}}}}}})}};
  const ojson result = {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "{\"temperature\": 21}"}};
  const ojson convo = ojson::array({user, call, result});
  // The model's call, spaced its own way, then its end token.
  const std::string own = "<tool_call>\n{\"name\":  \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
  ASSERT_EQ(text(ojson::array({user, call}), false).find(own), std::string::npos);
  std::vector<int32_t> previous = q.tok->encode(text(ojson::array({user}), true), false, true);
  const std::vector<int32_t> generated = q.char_by_char(own);
  previous.insert(previous.end(), generated.begin(), generated.end());
  previous.push_back(im_end);

  // Without knowing where the previous turn sits: the render alone.
  ConversationPrompt p = conversation_prompt(tools, *q.tok, convo, ojson::object(), {}, previous);
  EXPECT_EQ(p.how, ConversationPrompt::How::Rendered);

  const PreviousTurnMessages turn{ojson::array({user}), ojson::array({user, call})};
  p = conversation_prompt(tools, *q.tok, convo, ojson::object(), {}, previous, &turn);
  EXPECT_EQ(p.how, ConversationPrompt::How::ContinuedOwnText);
  ASSERT_GT(p.tokens.size(), previous.size());
  EXPECT_TRUE(std::equal(previous.begin(), previous.end(), p.tokens.begin()));
  // The previous tokens, then the render after the call's end token.
  const std::string through = text(ojson::array({user, call}), false);
  ASSERT_EQ(through.substr(through.size() - 11), "<|im_end|>\n");
  EXPECT_EQ(tokens_text(*q.tok, p.tokens, previous.size()), "\n" + text(convo, true).substr(through.size()));

  // A call that ended when its grammar did (no end token): the template's turn end follows.
  std::vector<int32_t> cut = previous;
  cut.pop_back();
  p = conversation_prompt(tools, *q.tok, convo, ojson::object(), {}, cut, &turn);
  EXPECT_EQ(p.how, ConversationPrompt::How::ContinuedOwnText);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), p.tokens.begin()));
  EXPECT_EQ(tokens_text(*q.tok, p.tokens, cut.size()), "<|im_end|>\n" + text(convo, true).substr(through.size()));

  // Previous tokens of another conversation: the render alone.
  const PreviousTurnMessages other{ojson::array({msg("user", "Weather in Rome?")}),
                                   ojson::array({msg("user", "Weather in Rome?"), call})};
  EXPECT_EQ(conversation_prompt(tools, *q.tok, convo, ojson::object(), {}, previous, &other).how,
            ConversationPrompt::How::Rendered);
}

TEST(ConversationPrompt, FallsBackToTheRenderWhenItCannotContinue) {
  Qwen2 q;
  const ojson convo = ojson::array({msg("user", "Hi"), msg("assistant", "Yo"), msg("user", "More")});
  const std::vector<int32_t> whole = q.render(convo);
  // Tokens of another conversation: not a prefix of this one's text.
  const std::vector<int32_t> other = q.render(ojson::array({msg("user", "Bye")}));
  ConversationPrompt p = conversation_prompt(*q.tmpl, *q.tok, convo, ojson::object(), {}, other);
  EXPECT_EQ(p.how, ConversationPrompt::How::Rendered);
  EXPECT_EQ(p.tokens, whole);
  // A span whose text is not the message's: not spliced.
  ojson spanned = convo;
  spanned[1]["spool_span"] = 0;
  p = conversation_prompt(*q.tmpl, *q.tok, spanned, ojson::object(), {q.char_by_char("Hey")}, {});
  EXPECT_EQ(p.how, ConversationPrompt::How::Rendered);
  EXPECT_EQ(p.tokens, whole);
  // A template that writes the content changed (trimmed): not spliced either.
  ChatTemplate trims("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}");
  spanned[1]["content"] = " Yo ";
  p = conversation_prompt(trims, *q.tok, spanned, ojson::object(), {q.char_by_char(" Yo ")}, {});
  EXPECT_EQ(p.how, ConversationPrompt::How::Rendered);
}

}  // namespace
}  // namespace spool::server
