// OpenAI response shapes: a whole completion / chat completion, the chunks of
// a streamed one (Server-Sent Events "data: {...}\n\n", ending "data: [DONE]"),
// usage with prompt_tokens_details.cached_tokens, logprobs in the legacy
// completions form and the chat form, and the error object.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/tool_call_stream.h"

namespace spool::server {

using nlohmann::json;
// A token's text as the tokenizer decodes it (may be part of a UTF-8 character).
using TokenText = std::function<std::string(int32_t)>;

struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;        // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;   // Unix seconds
  std::string model;
  bool logprobs = false; // the request asked for logprobs
  bool tools = false;    // chat with active tools: the output may be tool calls
  ToolCallStyle tool_style;
};

// What a finished request produced, gathered from its events.
struct Generation {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string error;
  int prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  void add(const RequestEvent& ev);
};

// "stop" or "length" (a cancelled request reports "stop"; errors never get here).
const char* openai_finish_reason(FinishReason r);
std::string new_response_id(Endpoint e);

json usage_json(int prompt_tokens, int cached_tokens, int completion_tokens);
json logprobs_json(Endpoint e, const std::vector<int32_t>& tokens, const std::vector<TokenLogprob>& chosen,
                   const std::vector<std::vector<TokenLogprob>>& top, const TokenText& text, size_t text_offset);

// Non-streamed response bodies. With tools, an answer that starts as a call
// does is calls only: complete ones in message.tool_calls, one cut by
// max_tokens dropped (finish_reason "length"), never call syntax in content.
json completion_response(const ResponseMeta& m, const Generation& g, const TokenText& text);

// Streaming: one chunk per event (possibly none, possibly two: content then
// finish), and the usage chunk. `text_offset` is the completion text already sent.
json role_chunk(const ResponseMeta& m, bool include_usage);  // chat only: delta {"role": "assistant", "content": ""}
std::vector<json> event_chunks(const ResponseMeta& m, const RequestEvent& ev, const TokenText& text,
                               size_t text_offset, bool include_usage);
json usage_chunk(const ResponseMeta& m, const RequestEvent& final_event);
// A streamed answer that is tool calls: a call's first delta carries its
// index, id, type and name; later ones more of its arguments (a legacy
// `functions` request: delta.function_call, its name first).
json tool_call_chunk(const ResponseMeta& m, const ToolCallDelta& d, bool include_usage);
// The last chunk of a streamed chat answer: an empty delta and the finish
// reason ("tool_calls" reads "function_call" for a legacy `functions` request).
json finish_chunk(const ResponseMeta& m, const char* reason, bool include_usage);

// "data: <json>\n\n"; invalid UTF-8 (a token's half character) is replaced, never thrown on.
std::string sse_data(const json& j);
constexpr const char* kSseDone = "data: [DONE]\n\n";
// JSON text that never throws on invalid UTF-8.
std::string dump_json(const json& j);

json error_json(const ApiError& e);

}  // namespace spool::server
