// One /v1/responses turn from request to store: the request parsed, its
// conversation assembled (the previous response's items, item references
// resolved from the store), the prompt built to continue the previous
// response's tokens (responses_prompt.h), the engine parameters; and at the
// end the response stored with the token ids a follow-up continues from.
// Internal to src/server (responses_handler.cpp).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agents/run_store.h"
#include "server/openai_format.h"
#include "server/responses_format.h"
#include "server/responses_prompt.h"
#include "server/server_context.h"

namespace spool::server {

struct ResponseTurn {
  ResponsesRequest request;
  ServedModel* served = nullptr;
  std::string id;                     // resp_...
  json skeleton;                      // the response object before output
  nlohmann::ordered_json context;     // every input item of this turn (earlier turns' and its own), resolved
  size_t n_own_items = 0;             // the last n_own_items of context are this request's input
  std::vector<int32_t> prompt;
  ConversationPrompt::How prompt_how = ConversationPrompt::How::Rendered;
  bool tools = false;                 // tool calls are possible
  ToolCallStyle style;
  RequestParams params;
};

// The store of responses (the agent runtime's), or null when the server has none.
agents::RunStore* responses_store(ServerContext& ctx);

// Parses and prepares a POST /v1/responses body. Throws ApiError: 400 for a
// bad field, 404 for an unknown previous_response_id or item reference.
ResponseTurn prepare_turn(ServerContext& ctx, const httplib::Request& req);

// The final response object of a generation (the events machine run over its text).
ResponseEnd response_end(const Generation& g);
json final_response(const ResponseTurn& t, const Generation& g);

// Stores a turn's response (status as in `response`) with its items indexed
// and the token ids its prompt and output make; `g` null: no output yet.
void store_turn(agents::RunStore& store, const ResponseTurn& t, const json& response, const Generation* g);

// 404 for an unknown response id, naming it.
ApiError response_not_found(const std::string& id);

}  // namespace spool::server
