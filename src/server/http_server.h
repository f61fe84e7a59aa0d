// `spool serve`'s HTTP server: OpenAI-compatible routes over an Engine
// (/v1/models, /v1/completions, /v1/chat/completions), plus /health,
// /metrics, /tokenize and /detokenize. Bearer-key auth on everything but
// /health when a key is set; every error is an OpenAI error object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace spool {
class ChatTemplate;
}

namespace spool::grammar {
class GrammarCache;
}

namespace spool::agents {
class PipelineRunner;
}

namespace spool::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: the OS picks one (bind() returns it)
  std::string api_key;                    // "": no auth (only allowed on loopback)
  size_t max_body_bytes = 8u << 20;       // larger request bodies get 413
  std::string model_id;                   // the name /v1/models lists and responses carry
  std::vector<std::string> model_aliases; // other `model` values accepted (e.g. the path as given)
  int http_threads = 0;                   // > 0: HTTP workers (connections at once) instead of max_connections
  uint64_t mem_budget_bytes = 0;          // --mem-budget, all models together (0: none); GET /v1/stats reports it
  // Connections served at once (one HTTP worker thread each; at least http_threads). A slow
  // client holds its worker until read_timeout_s passes without a byte from it, or
  // header_timeout_s passes before its header is complete, so this must exceed the slow
  // clients a server should shrug off; a connection past it gets 503 (Retry-After: 1).
  int max_connections = 256;
  int read_timeout_s = 5;                 // a connection that sends nothing this long is closed
  size_t max_header_bytes = 32u << 10;    // request line + header; more: 431
  int max_header_lines = 100;             // header lines; more: 431
  int header_timeout_s = 10;              // the whole request line + header; slower: 408
  int body_timeout_s = 60;                // the whole body, after the header; slower: 408
  // A completion request still unfinished this long after it arrived is cancelled (its KV
  // blocks freed) and answered with a 504 error (code request_timeout); 0: no limit.
  double request_timeout_s = 0;
  // Host header names answered besides loopback ones when there is no API key
  // (--allowed-host; "*": any). Others get 403: DNS-rebinding protection.
  std::vector<std::string> allowed_hosts;
  // Origins (scheme://host[:port]) of web pages allowed to call the API, with
  // CORS headers (--cors-origin; "*": any). A request from any other origin
  // but the server's own gets 403.
  std::vector<std::string> cors_origins;
};

class ApiServer {
 public:
  // Checks the bind policy (a non-loopback host needs a key); throws spool::Error.
  ApiServer(Engine& engine, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Serves one more model (before listen()); requests and agents pick it by
  // `id` or one of `aliases`. The engine is not owned.
  void add_model(Engine& engine, const std::string& id, const std::vector<std::string>& aliases);

  // Every name a model answers to (ids and aliases), and the model for a name
  // ("" the default; {nullptr, nullptr} when none answers).
  std::vector<std::string> model_names() const;
  struct ModelRef {
    Engine* engine = nullptr;
    const ChatTemplate* chat_template = nullptr;
    grammar::GrammarCache* grammars = nullptr;
  };
  ModelRef find_model(const std::string& name) const;

  // The agent runtime behind /v1/pipelines (set before listen(); without it
  // those routes answer 404). Not owned.
  void set_pipeline_runner(agents::PipelineRunner* runner);

  // Binds the listening socket; returns the port. Throws spool::Error on failure.
  int bind();
  // Serves until stop(); returns when the server has stopped.
  void listen();
  // Thread-safe; makes listen() return.
  void stop();

  struct Context;

 private:
  std::unique_ptr<Context> ctx_;
};

}  // namespace spool::server
