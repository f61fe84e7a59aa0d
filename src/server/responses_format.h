// Responses API objects: the response object and its output items, and the
// stream of events a response is told through, with OpenAI's event names and
// sequence numbers:
//   response.created, response.in_progress,
//   a message:  response.output_item.added, response.content_part.added,
//               response.output_text.delta..., response.output_text.done,
//               response.content_part.done, response.output_item.done
//   each call:  response.output_item.added, response.function_call_arguments.delta...,
//               response.function_call_arguments.done, response.output_item.done
//   then response.completed (or response.incomplete when max_output_tokens
//   cut it; error + response.failed when it failed).
// A non-streamed response is built by the same machine (its events dropped),
// so both carry the same output. Pure: no engine, no HTTP.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/responses_request.h"
#include "server/tool_call_stream.h"

namespace spool::server {

using nlohmann::json;

// The response object before any output: status "in_progress", output [],
// usage null, and the request's settings echoed.
json response_skeleton(const ResponsesRequest& r, const std::string& id, const std::string& model, int64_t created_at);

json responses_usage(int input_tokens, int cached_tokens, int output_tokens);

// How a generation ended, for the final response.
struct ResponseEnd {
  enum class Kind { Completed, Incomplete, Cancelled, Failed } kind = Kind::Completed;
  std::string error_code, error_message;  // Failed
  int input_tokens = 0, cached_tokens = 0, output_tokens = 0;
};

class ResponseEvents {
 public:
  // `tools`: tool calls are possible (the output's first character decides
  // between a message and calls, as the grammar makes them differ there).
  ResponseEvents(json skeleton, bool tools, ToolCallStyle style);

  std::vector<json> start();                       // response.created, response.in_progress
  std::vector<json> text(const std::string& more);  // generated text
  std::vector<json> finish(const ResponseEnd& end); // the items' done events, then the final one
  const json& response() const { return response_; }
  // The text of the message item ("" when the output is calls).
  const std::string& message_text() const { return text_; }
  bool is_calls() const { return phase_ == Phase::Calls; }

 private:
  enum class Phase { Undecided, Message, Calls };
  json event(const char* type, json fields);
  json message_item(const char* status) const;
  json text_part() const;
  void open_message(std::vector<json>& out);
  void close_call(std::vector<json>& out, bool cut);

  json response_;
  bool tools_;
  ToolCallStyle style_;
  int64_t seq_ = 0;
  Phase phase_ = Phase::Undecided;
  std::string text_;            // message text, or the calls' whole text
  std::string message_id_;
  bool message_open_ = false;
  std::unique_ptr<ToolCallStreamer> calls_;
  struct Call { std::string item_id, call_id, name, arguments; bool open = false; };
  std::vector<Call> call_list_;
  size_t calls_closed_ = 0;
};

// "event: <type>\ndata: <json>\n\n" (invalid UTF-8 replaced).
std::string sse_event(const json& event);

// GET /v1/responses/{id}/input_items: a page of the items as OpenAI lists them.
json input_items_page(const json& items, int limit, const std::string& after, bool ascending);

}  // namespace spool::server
