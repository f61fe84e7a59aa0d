// /v1/responses request bodies (OpenAI's Responses API) parsed and validated:
// the input normalized to items in OpenAI's shape (each with an id, content
// as parts), tools / tool_choice / text.format translated to the structured
// request the chat route uses, and a conversation's items turned into the
// messages a chat template renders. Pure: no engine, no store. Every problem
// is an ApiError (400) naming the field as the Responses API spells it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/structured_output.h"

namespace spool::server {

struct ResponsesRequest {
  std::string model;                    // as sent ("" when omitted)
  nlohmann::ordered_json input;         // the items, normalized (normalize_input_items); may hold item_reference
  std::optional<std::string> instructions;
  std::string previous_response_id;     // "" : none
  bool store = true, stream = false, background = false;
  std::optional<int> max_output_tokens;
  double temperature = 1.0, top_p = 1.0;
  std::optional<uint64_t> seed;         // spool's extension (as on the chat route): reproducible sampling
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  // Echoed in the response object as the Responses API writes them.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  nlohmann::ordered_json tool_choice = "auto";
  nlohmann::ordered_json text = {{"format", {{"type", "text"}}}};
  bool parallel_tool_calls = true;
  StructuredRequest structured;         // tools, tool_choice, format (messages are set per conversation)
};

// Parses a body already known to be an object (key order kept: schemas).
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body);

// An error of the chat route's structured-output code (which names
// response_format, tools[i].function...) naming the Responses API's fields.
ApiError responses_error(const ApiError& e);

// "<prefix>_" + 32 random hex digits: resp_, msg_, fc_, fco_.
std::string new_item_id(const char* prefix);

// `input` as a string or a list of items, normalized: a message
// {type "message", id, role, content: [{type input_text|output_text, text,
// (annotations)}], status}, a function_call {type, id, call_id, name,
// arguments, status}, a function_call_output {type, id, call_id, output,
// status}; an item_reference {type, id} is kept for the caller to resolve;
// reasoning items are dropped. Ids given are kept, missing ones made.
nlohmann::ordered_json normalize_input_items(const nlohmann::ordered_json& input);

// A message item's text (its text parts joined).
std::string item_text(const nlohmann::ordered_json& item);

// The messages the chat template renders for `instructions` (a system
// message first) and a conversation's items: function calls as an assistant
// message's tool_calls (arguments parsed, as templates expect), their outputs
// as tool messages. An assistant message whose item id is in `span_ids` gets
// "spool_span": its index there (responses_prompt.h splices its exact tokens).
nlohmann::ordered_json items_to_messages(const std::optional<std::string>& instructions,
                                         const nlohmann::ordered_json& items,
                                         const std::vector<std::string>& span_ids = {});

}  // namespace spool::server
