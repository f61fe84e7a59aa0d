// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and
// validated into an ApiRequest, then turned into the engine's RequestParams
// (prompt tokens through the tokenizer or the model's chat template). Every
// problem is an ApiError (400) naming the field, thrown before anything is
// submitted to the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_cache.h"
#include "runtime/engine.h"
#include "server/structured_output.h"
#include "text/chat_template.h"

namespace spool::server {

enum class Endpoint { Completions, ChatCompletions };

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                     // as sent ("" when omitted)
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  // Completions: text, or token ids; chat: messages.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  std::vector<ChatMessage> messages;
  std::optional<int> max_tokens;         // max_tokens or max_completion_tokens
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;               // extension (llama-server has it too)
  int top_logprobs = -1;                 // -1: no logprobs
  StructuredRequest structured;          // response_format, grammar, tools (parse_structured)
};

// Parses a JSON body already known to be an object. Throws ApiError.
// `ordered` is the same body with its key order kept (schemas, tools); null:
// use `body` (object members of schemas then follow sorted key order).
ApiRequest parse_api_request(const nlohmann::json& body, Endpoint endpoint,
                             const nlohmann::ordered_json* ordered = nullptr);

// The model side of turning a request into engine parameters.
struct PromptContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: the model has none (chat requests get 400)
  int n_ctx = 0;
  grammar::GrammarCache* grammars = nullptr;    // null: structured output is refused (400)
};

// Renders/tokenizes the prompt and checks it against the context: a prompt
// that leaves no room for one generated token is a 400
// (code context_length_exceeded). max_tokens defaults to 16 for completions
// (as OpenAI's) and to the rest of the context for chat. A response format,
// grammar or active tools give the request its grammar (a bad one is a 400).
RequestParams to_request_params(const ApiRequest& request, const PromptContext& ctx);


}  // namespace spool::server
