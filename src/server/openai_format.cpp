// OpenAI response and chunk formatting; see openai_format.h.
#include "server/openai_format.h"

#include <atomic>
#include <chrono>
#include <random>

namespace spool::server {

namespace {

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json base_object(const ResponseMeta& m, const char* object) {
  return json{{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model},
              {"system_fingerprint", "spool"}};
}

}  // namespace

void Generation::add(const RequestEvent& ev) {
  text += ev.text;
  tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
  logprobs.insert(logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  top_logprobs.insert(top_logprobs.end(), ev.top_logprobs.begin(), ev.top_logprobs.end());
  if (ev.finished) {
    finished = true;
    reason = ev.reason;
    error = ev.error;
    prompt_tokens = ev.prompt_tokens;
    cached_tokens = ev.cached_tokens;
    completion_tokens = ev.completion_tokens;
  }
}

const char* openai_finish_reason(FinishReason r) { return r == FinishReason::Length ? "length" : "stop"; }

std::string new_response_id(Endpoint e) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx", (unsigned long long)salt,
                (unsigned long long)(counter.fetch_add(1) & 0xffff));
  return std::string(e == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") + buf;
}

json usage_json(int prompt_tokens, int cached_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json logprobs_json(Endpoint e, const std::vector<int32_t>& tokens, const std::vector<TokenLogprob>& chosen,
                   const std::vector<std::vector<TokenLogprob>>& top, const TokenText& text, size_t text_offset) {
  const size_t n = std::min(tokens.size(), chosen.size());
  if (e == Endpoint::ChatCompletions) {
    json content = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string piece = text(chosen[i].token);
      json alts = json::array();
      if (i < top.size())
        for (const TokenLogprob& t : top[i]) {
          const std::string p = text(t.token);
          alts.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_json(p)}});
        }
      content.push_back({{"token", piece}, {"logprob", chosen[i].logprob}, {"bytes", bytes_json(piece)},
                         {"top_logprobs", alts}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset;
  for (size_t i = 0; i < n; ++i) {
    const std::string piece = text(chosen[i].token);
    toks.push_back(piece);
    lps.push_back(chosen[i].logprob);
    offsets.push_back(offset);
    offset += piece.size();
    json alts = json::object();
    if (i < top.size())
      for (const TokenLogprob& t : top[i]) alts[text(t.token)] = t.logprob;
    tops.push_back(alts);
  }
  return json{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

namespace {

// A chat answer that is tool calls (it started as one does): its complete
// calls in message.tool_calls (legacy requests: the one call in
// message.function_call), a call cut short dropped, so call syntax never
// reaches content; "length" stays the finish reason when max_tokens cut it.
void put_tool_calls(const ResponseMeta& m, const Generation& g, json& choice) {
  const ParsedToolCalls parsed = parse_leading_tool_calls(g.text, m.tool_style);
  json& message = choice["message"];
  message["content"] = parsed.calls.empty() ? json("") : json(nullptr);
  const bool legacy = m.tool_style.legacy_function_call;
  if (legacy && !parsed.calls.empty()) {
    const ToolCall& c = parsed.calls[0];
    message["function_call"] = {{"name", c.name}, {"arguments", c.arguments}};
  } else if (!parsed.calls.empty()) {
    json list = json::array();
    for (const ToolCall& c : parsed.calls)
      list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    message["tool_calls"] = list;
  }
  if (g.reason == FinishReason::Length) choice["finish_reason"] = "length";
  else if (!parsed.calls.empty()) choice["finish_reason"] = legacy ? "function_call" : "tool_calls";
}

}  // namespace

json completion_response(const ResponseMeta& m, const Generation& g, const TokenText& text) {
  const bool chat = m.endpoint == Endpoint::ChatCompletions;
  json out = base_object(m, chat ? "chat.completion" : "text_completion");
  const json lp = m.logprobs ? logprobs_json(m.endpoint, g.tokens, g.logprobs, g.top_logprobs, text, 0) : json(nullptr);
  json choice = {{"index", 0}, {"logprobs", lp}, {"finish_reason", openai_finish_reason(g.reason)}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", g.text}, {"refusal", nullptr}};
  else choice["text"] = g.text;
  if (chat && m.tools && starts_as_tool_call(g.text, m.tool_style)) put_tool_calls(m, g, choice);
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(g.prompt_tokens, g.cached_tokens, g.completion_tokens);
  return out;
}

json role_chunk(const ResponseMeta& m, bool include_usage) {
  json out = base_object(m, "chat.completion.chunk");
  out["choices"] = json::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

std::vector<json> event_chunks(const ResponseMeta& m, const RequestEvent& ev, const TokenText& text,
                               size_t text_offset, bool include_usage) {
  const bool chat = m.endpoint == Endpoint::ChatCompletions;
  const auto chunk = [&](const json& payload, const json& logprobs, const json& finish) {
    json out = base_object(m, chat ? "chat.completion.chunk" : "text_completion");
    json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish}};
    if (chat) choice["delta"] = payload;
    else choice["text"] = payload;
    out["choices"] = json::array({choice});
    if (include_usage) out["usage"] = nullptr;
    return out;
  };
  std::vector<json> chunks;
  const bool has_logprobs = m.logprobs && !ev.logprobs.empty();
  if (!ev.text.empty() || has_logprobs) {
    const json lp = has_logprobs ? logprobs_json(m.endpoint, ev.tokens, ev.logprobs, ev.top_logprobs, text, text_offset)
                                 : json(nullptr);
    chunks.push_back(chunk(chat ? json{{"content", ev.text}} : json(ev.text), lp, nullptr));
  }
  if (ev.finished)
    chunks.push_back(chunk(chat ? json::object() : json(""), nullptr, openai_finish_reason(ev.reason)));
  return chunks;
}

json tool_call_chunk(const ResponseMeta& m, const ToolCallDelta& d, bool include_usage) {
  json out = base_object(m, "chat.completion.chunk");
  if (m.tool_style.legacy_function_call) {  // one call: delta.function_call, its name first
    json fc = {{"arguments", d.arguments}};
    if (!d.id.empty()) fc["name"] = d.name;
    out["choices"] = json::array(
        {{{"index", 0}, {"delta", {{"function_call", fc}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    if (include_usage) out["usage"] = nullptr;
    return out;
  }
  json call = {{"index", d.index}};
  if (!d.id.empty()) {
    call["id"] = d.id;
    call["type"] = "function";
    call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
  } else {
    call["function"] = {{"arguments", d.arguments}};
  }
  out["choices"] = json::array(
      {{{"index", 0}, {"delta", {{"tool_calls", json::array({call})}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json finish_chunk(const ResponseMeta& m, const char* reason, bool include_usage) {
  if (m.tool_style.legacy_function_call && std::string(reason) == "tool_calls") reason = "function_call";
  json out = base_object(m, "chat.completion.chunk");
  out["choices"] = json::array({{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk(const ResponseMeta& m, const RequestEvent& ev) {
  json out = base_object(m, m.endpoint == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage_json(ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens);
  return out;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

json error_json(const ApiError& e) {
  // A message may quote what the client sent (a value, a parser's context):
  // never more than a few KB of it goes back.
  constexpr size_t kMaxMessage = 4096;
  std::string message = e.what();
  if (message.size() > kMaxMessage) {
    size_t cut = kMaxMessage;
    while (cut > 0 && ((unsigned char)message[cut] & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
    message = message.substr(0, cut) + "... (" + std::to_string(message.size() - cut) + " more bytes)";
  }
  return json{{"error", {{"message", message}, {"type", e.type}, {"code", nullable(e.code)}, {"param", nullable(e.param)}}}};
}

}  // namespace spool::server
