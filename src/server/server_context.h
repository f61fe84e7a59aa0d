// What every route handler shares: the engine, the options, the parsed chat
// template, HTTP counters. Internal to src/server.
#pragma once

#include <algorithm>
#include <ctime>
#include <memory>
#include <nlohmann/json_fwd.hpp>

#include <httplib.h>

#include "agents/pipeline_runner.h"
#include "server/api_error.h"
#include "server/batch_runner.h"
#include "server/connection_guard.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "text/chat_template.h"

namespace spool::server {

class ResponsesService;  // background responses in flight (responses_handler.cpp)

// One model the server serves: its engine, names and chat template.
struct ServedModel {
  std::string id;                          // the name /v1/models lists and responses carry
  std::vector<std::string> aliases;        // other accepted `model` values (e.g. the path as given)
  Engine* engine = nullptr;
  std::unique_ptr<ChatTemplate> chat_template;  // null: the model has none
  std::unique_ptr<grammar::GrammarCache> grammars;  // compiled grammars for this model's vocabulary
  // The longest vocabulary entry in bytes: no token stands for more input than
  // this (times a margin for normalization), so a prompt this many times
  // longer than the context is refused before it is tokenized.
  size_t max_token_bytes = 1;
  PromptContext prompt_context() const {
    return PromptContext{&engine->model().tokenizer(), chat_template.get(), engine->options().n_ctx, grammars.get()};
  }
  bool answers_to(const std::string& name) const {
    return name == id || std::find(aliases.begin(), aliases.end(), name) != aliases.end();
  }
};

struct ApiServer::Context {
  Engine& engine;                          // the default model's (models[0])
  ServerOptions options;
  std::vector<std::unique_ptr<ServedModel>> models;
  HttpCounters counters;
  RequestOutcomes outcomes;
  std::time_t created = 0;
  GuardedHttpServer http;                  // httplib with bounded headers and connections
  agents::PipelineRunner* runner = nullptr;  // null: the pipeline routes answer 404
  std::unique_ptr<BatchRunner> batches;      // with a runner: the Batch API over its store
  std::shared_ptr<ResponsesService> responses;  // the Responses API's background work
  int listen_fd = -1;                        // the listening socket (set while binding)

  Context(Engine& e, ServerOptions o) : engine(e), options(std::move(o)) {}
};
using ServerContext = ApiServer::Context;

using Handler = std::function<void(ServerContext&, const httplib::Request&, httplib::Response&)>;
// Wraps a route: whatever the handler throws becomes an OpenAI error response.
httplib::Server::Handler guarded(ServerContext& ctx, Handler h);

// ?limit= of a list route: `def` when absent; 400 unless an integer in [1, max].
int limit_param(const httplib::Request& req, int def, int max);

// The request body as a JSON object; 400 with the parser's message otherwise.
nlohmann::json parse_json_body(const httplib::Request& req);
// The model a request names ("": the default); 404 when no served model answers to it.
ServedModel& resolve_model(ServerContext& ctx, const std::string& model);
// Writes an ApiError as the response.
void write_error(httplib::Response& res, const ApiError& e);

// /v1/completions and /v1/chat/completions (completion_handler.cpp).
void handle_completion(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, Endpoint endpoint);

// /v1/pipelines and /v1/pipeline-specs (pipeline_handler.cpp).
void add_pipeline_routes(ServerContext& ctx);
// /v1/files and /v1/batches (batch_handler.cpp).
void add_batch_routes(ServerContext& ctx);
// /v1/responses (responses_handler.cpp); stop_responses cancels background
// responses in flight and waits for them to be stored.
void add_response_routes(ServerContext& ctx);
void stop_responses(ServerContext& ctx);
// The agent runtime's lines for /metrics ("" without a runner).
std::string pipeline_metrics(ServerContext& ctx);

}  // namespace spool::server
