// The HTTP server: routes, the auth hook, error responses, and the small
// endpoints (/health, /v1/models, /metrics, /tokenize, /detokenize). The
// completion routes live in completion_handler.cpp.
#include "server/http_server.h"

#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "core/error.h"
#include "server/auth.h"
#include "server/connection_guard.h"
#include "server/openai_format.h"
#include "server/request_policy.h"
#include "server/server_context.h"
#include "server/stats_handler.h"
#include "server/ui_assets.h"

namespace spool::server {

// Every route goes through here: whatever a handler throws becomes an OpenAI error response.
httplib::Server::Handler guarded(ServerContext& ctx, Handler h) {
  return [&ctx, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    try {
      h(ctx, req, res);
    } catch (const ApiError& e) {
      write_error(res, e);
    } catch (const std::exception& e) {
      write_error(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error", "internal_error"));
    }
  };
}

namespace {

void reply_json(httplib::Response& res, const json& j) { res.set_content(dump_json(j), "application/json"); }

json model_object(const ServerContext& ctx, const ServedModel& sm) {
  const Model& m = sm.engine->model();
  // A model is also named by its path, but the list does not show where the
  // file lives on this machine: only names without a directory.
  json aliases = json::array();
  for (const std::string& a : sm.aliases)
    if (a.find('/') == std::string::npos) aliases.push_back(a);
  return json{{"id", sm.id},
              {"object", "model"},
              {"created", (int64_t)ctx.created},
              {"owned_by", "spool"},
              {"meta",
               {{"arch", m.config().arch},
                {"n_ctx", sm.engine->options().n_ctx},
                {"parallel", sm.engine->options().max_running},
                {"kv_block_size", sm.engine->options().block_size},
                {"n_ctx_train", m.config().n_ctx_train},
                {"n_vocab", m.config().n_vocab},
                {"chat_template", sm.chat_template != nullptr},
                {"aliases", aliases}}}};
}

void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req);
  const auto content = body.find("content");
  if (content == body.end() || !content->is_string())
    throw bad_param("content", "'content' must be a string", "invalid_type");
  const auto flag = [&](const char* name) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw bad_param(name, std::string("'") + name + "' must be a boolean", "invalid_type");
    return it->get<bool>();
  };
  const bool add_special = flag("add_special"), with_pieces = flag("with_pieces");
  const Tokenizer& tok = resolve_model(ctx, body.value("model", "")).engine->model().tokenizer();
  const std::vector<int32_t> ids = tok.encode(content->get<std::string>(), add_special, true);
  json tokens = json::array();
  for (int32_t id : ids)
    tokens.push_back(with_pieces ? json{{"id", id}, {"piece", tok.token_to_piece(id, true)}} : json(id));
  reply_json(res, {{"tokens", tokens}});
}

void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req);
  const auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array())
    throw bad_param("tokens", "'tokens' must be an array of token ids", "invalid_type");
  const Tokenizer& tok = resolve_model(ctx, body.value("model", "")).engine->model().tokenizer();
  std::vector<int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
      throw bad_param("tokens", "token ids must be integers in [0, " + std::to_string(tok.n_vocab()) + "), got " +
                                    (t.is_number() ? t.dump() : std::string("a JSON ") + t.type_name()));
    ids.push_back((int32_t)t.get<int64_t>());
  }
  reply_json(res, {{"content", tok.decode(ids)}});
}

// Bodies for errors httplib raises itself (no route, body too large).
ApiError error_for_status(const httplib::Request& req, int status, const ServerOptions& o) {
  switch (status) {
    case 404:
      return ApiError(404, "no route " + req.method + " " + req.path.substr(0, 512), "invalid_request_error", "not_found");
    case 413:
      return ApiError(413, "the request body is larger than the server's limit of " + std::to_string(o.max_body_bytes) +
                               " bytes (--max-body)",
                      "invalid_request_error", "payload_too_large");
    case 400: return ApiError(400, "malformed HTTP request", "invalid_request_error", "bad_request");
    case 408:
      return ApiError(408, "the request header took longer than the server's limit of " +
                               std::to_string(o.header_timeout_s) + " s (--header-timeout)",
                      "invalid_request_error", "request_header_timeout");
    case 414:
      return ApiError(414, "the request URI is longer than the server's limit of 8192 bytes", "invalid_request_error",
                      "uri_too_long");
    case 431:
      return ApiError(431, "the request header is larger than the server's limit of " +
                               std::to_string(o.max_header_bytes) + " bytes or " + std::to_string(o.max_header_lines) +
                               " lines (--max-header-bytes, --max-headers)",
                      "invalid_request_error", "header_too_large");
    case 503: {
      ApiError e(503, "the server is at its connection limit of " + std::to_string(o.max_connections) +
                          " (--max-connections); retry later",
                 "server_error", "too_many_connections");
      e.retry_after_s = 1;
      return e;
    }
    default:
      return ApiError(status, "HTTP error " + std::to_string(status),
                      status >= 500 ? "server_error" : "invalid_request_error");
  }
}

void add_routes(ServerContext& ctx) {
  GuardedHttpServer& http = ctx.http;  // its Post/Put read bodies within --max-body
  http.Get("/health", guarded(ctx, [](ServerContext&, const httplib::Request&, httplib::Response& res) {
    reply_json(res, {{"status", "ok"}});
  }));
  http.Get("/metrics", guarded(ctx, [](ServerContext& c, const httplib::Request&, httplib::Response& res) {
    std::vector<StoreStats> weights(c.models.size());
    std::vector<ExpertParallelStats> dist(c.models.size());
    std::vector<ModelFigures> figures;
    for (size_t i = 0; i < c.models.size(); ++i) {
      const ServedModel& m = *c.models[i];
      const WeightStore& store = m.engine->model().weights();
      if (store.streaming()) weights[i] = store.stats_snapshot();
      const ExpertParallel* ep = m.engine->model().expert_parallel();
      if (ep) dist[i] = ep->stats();
      figures.push_back({m.id, m.engine->stats(), store.streaming() ? &weights[i] : nullptr, ep ? &dist[i] : nullptr});
    }
    const agents::RunnerStats pipelines = c.runner ? c.runner->stats() : agents::RunnerStats{};
    res.set_content(render_metrics(figures, c.counters.snapshot()) +
                        c.outcomes.render(pipelines.requests_cancelled, pipelines.requests_failed) + pipeline_metrics(c) +
                        process_metrics(),
                    "text/plain; version=0.0.4");
  }));
  http.Get("/v1/models", guarded(ctx, [](ServerContext& c, const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& m : c.models) data.push_back(model_object(c, *m));
    reply_json(res, {{"object", "list"}, {"data", data}});
  }));
  http.Get(R"(/v1/models/(.+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    reply_json(res, model_object(c, resolve_model(c, req.matches[1].str())));
  }));
  http.Post("/v1/completions", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    handle_completion(c, req, res, Endpoint::Completions);
  }));
  http.Post("/v1/chat/completions",
            guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
              handle_completion(c, req, res, Endpoint::ChatCompletions);
            }));
  add_pipeline_routes(ctx);
  add_batch_routes(ctx);
  add_response_routes(ctx);
  http.Post("/tokenize", guarded(ctx, handle_tokenize));
  http.Post("/detokenize", guarded(ctx, handle_detokenize));
  add_stats_routes(ctx);
  add_ui_routes(ctx);
}

// Refuses a request from the pre-routing hook. A body it may carry is never
// read: the connection closes after the answer.
httplib::Server::HandlerResponse refuse(httplib::Response& res, const ApiError& e) {
  res.set_header("Connection", "close");
  GuardedHttpServer::close_after_response();
  write_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

// httplib compresses JSON replies with brotli at its default quality 11 when
// the client accepts it (every browser): ~150 ms of one core for a 50 KB body.
// gzip costs a few ms for the same body, so the server offers gzip only. The
// Request is httplib's own, non-const object; the header rewrite happens
// before any handler reads it.
void drop_brotli(const httplib::Request& req) {
  auto enc = req.headers.find("Accept-Encoding");
  if (enc == req.headers.end() || enc->second.find("br") == std::string::npos) return;
  std::string v;
  for (size_t i = 0; i <= enc->second.size();) {
    size_t j = enc->second.find(',', i);
    if (j == std::string::npos) j = enc->second.size();
    std::string item = enc->second.substr(i, j - i);
    const size_t b = item.find_first_not_of(' ');
    if (b != std::string::npos && item.compare(b, 2, "br") != 0) v += (v.empty() ? "" : ",") + item.substr(b);
    i = j + 1;
  }
  const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
  const_cast<httplib::Request&>(req).headers.emplace("Accept-Encoding", v);
}

bool has_body(const httplib::Request& req) {
  return req.get_header_value<uint64_t>("Content-Length") > 0 || req.has_header("Transfer-Encoding");
}

// Host and Origin (request_policy.h). Returns an error to answer, or nullopt;
// an allowed foreign origin gets its CORS headers here, and its preflight an answer.
std::optional<ApiError> check_origin_and_host(const ServerContext& ctx, const httplib::Request& req,
                                              httplib::Response& res, bool& preflight_answered) {
  const ServerOptions& o = ctx.options;
  const std::string host = req.get_header_value("Host");
  if (o.api_key.empty() && req.has_header("Host") && !host_allowed(host, o.allowed_hosts))
    return ApiError(403,
                    "this server answers Host names localhost, 127.0.0.1 and [::1] only, not '" + host.substr(0, 256) +
                        "' (a protection against DNS rebinding); start it with --allowed-host NAME to serve another "
                        "name, or with an API key",
                    "invalid_request_error", "host_not_allowed");
  if (!req.has_header("Origin")) return std::nullopt;
  const std::string origin = req.get_header_value("Origin");
  if (origin_is_own(origin, host)) return std::nullopt;
  if (!origin_listed(origin, o.cors_origins))
    return ApiError(403,
                    "requests from web pages of origin '" + origin.substr(0, 256) +
                        "' are refused; start the server with --cors-origin " + origin.substr(0, 256) +
                        " to allow that origin",
                    "invalid_request_error", "origin_not_allowed");
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  if (req.method == "OPTIONS") {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, OpenAI-Organization, "
                                                   "OpenAI-Project, X-Stainless-Lang, X-Stainless-Package-Version, "
                                                   "X-Stainless-OS, X-Stainless-Arch, X-Stainless-Runtime, "
                                                   "X-Stainless-Runtime-Version, X-Stainless-Retry-Count, "
                                                   "X-Stainless-Timeout");
    res.set_header("Access-Control-Max-Age", "600");
    preflight_answered = true;
  }
  return std::nullopt;
}

// A body must come with a media type its route reads (415 otherwise); a
// POST/PUT with neither Content-Length nor Transfer-Encoding has an empty body
// (RFC 9112 6.3), which httplib would otherwise wait for until the connection closed.
std::optional<ApiError> check_body_type(const httplib::Request& req) {
  const bool writes = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
  if (writes && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
    const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
    return std::nullopt;
  }
  if (!has_body(req)) return std::nullopt;
  const BodyTypes types = body_types_for(req.method, req.path);
  const std::string media = media_type(req.get_header_value("Content-Type"));
  if (body_type_accepted(media, types)) return std::nullopt;
  const char* takes = types == BodyTypes::JsonOrYaml        ? "application/json or application/yaml"
                      : types == BodyTypes::JsonOrMultipart ? "multipart/form-data"
                                                            : "application/json";
  return ApiError(415,
                  "the request body must be sent with Content-Type: " + std::string(takes) + " (got '" +
                      media.substr(0, 128) + "')",
                  "invalid_request_error", "unsupported_media_type");
}

void add_hooks(ServerContext& ctx) {
  ctx.http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    drop_brotli(req);
    bool preflight_answered = false;
    if (std::optional<ApiError> e = check_origin_and_host(ctx, req, res, preflight_answered)) return refuse(res, *e);
    if (preflight_answered) return httplib::Server::HandlerResponse::Handled;
    const bool needs_key = !ctx.options.api_key.empty() && req.path != "/health" && !is_ui_path(req.path);
    if (needs_key) {
      const std::optional<std::string> token = bearer_token(req.get_header_value("Authorization"));
      if (!token || !keys_equal(*token, ctx.options.api_key)) {
        res.set_header("WWW-Authenticate", "Bearer");
        const ApiError e(401, token ? "invalid API key" : "missing API key: send the header 'Authorization: Bearer KEY'",
                         "authentication_error", "invalid_api_key");
        if (has_body(req)) return refuse(res, e);  // its body is never read
        write_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (std::optional<ApiError> e = check_body_type(req)) return refuse(res, *e);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  ctx.http.set_error_handler(
      httplib::Server::HandlerWithResponse([&ctx](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // already an API error
        write_error(res, error_for_status(req, res.status, ctx.options));
        return httplib::Server::HandlerResponse::Handled;
      }));
  ctx.http.set_logger([&ctx](const httplib::Request&, const httplib::Response& res) { ctx.counters.count(res.status); });
}

}  // namespace

int limit_param(const httplib::Request& req, int def, int max) {
  if (!req.has_param("limit")) return def;
  int limit = -1;
  try {
    limit = std::stoi(req.get_param_value("limit"));
  } catch (const std::exception&) {
  }
  if (limit < 1 || limit > max) throw bad_param("limit", "limit must be an integer between 1 and " + std::to_string(max));
  return limit;
}

ServedModel& resolve_model(ServerContext& ctx, const std::string& model) {
  if (model.empty()) return *ctx.models.front();
  for (auto& m : ctx.models)
    if (m->answers_to(model)) return *m;
  std::string served;
  for (const auto& m : ctx.models) served += (served.empty() ? "'" : ", '") + m->id + "'";
  throw ApiError(404, "the model '" + model + "' does not exist; this server serves " + served,
                 "invalid_request_error", "model_not_found", "model");
}

void write_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(dump_json(error_json(e)), "application/json");
}

ApiServer::ApiServer(Engine& engine, ServerOptions options) : ctx_(std::make_unique<Context>(engine, std::move(options))) {
  check_bind_policy(ctx_->options.host, ctx_->options.api_key);
  std::signal(SIGPIPE, SIG_IGN);  // a vanished client must be a failed write, not a dead process
  ctx_->created = std::time(nullptr);
  add_model(engine, ctx_->options.model_id, ctx_->options.model_aliases);
  // One worker per connection, --max-connections of them; one more connection gets 503.
  const int threads = std::max(1, ctx_->options.http_threads > 0 ? ctx_->options.http_threads
                                                                 : ctx_->options.max_connections);
  GuardedHttpServer& http = ctx_->http;
  http.new_task_queue = [threads] { return new ConnectionPool((size_t)threads); };
  ConnectionLimits limits;
  limits.max_header_bytes = ctx_->options.max_header_bytes;
  limits.max_header_lines = ctx_->options.max_header_lines;
  limits.header_timeout_s = std::max(1, ctx_->options.header_timeout_s);
  limits.body_timeout_s = std::max(1, ctx_->options.body_timeout_s);
  limits.read_timeout_s = std::max(1, ctx_->options.read_timeout_s);
  limits.max_body_bytes = ctx_->options.max_body_bytes;
  http.set_limits(limits);
  http.refusal_body = [ctx = ctx_.get()](int status, bool in_body) {
    if (status == 408 && in_body)
      return dump_json(error_json(ApiError(408, "the request body took longer than the server's limit of " +
                                                    std::to_string(ctx->options.body_timeout_s) + " s (--body-timeout)",
                                           "invalid_request_error", "request_body_timeout")));
    return dump_json(error_json(error_for_status(httplib::Request{}, status, ctx->options)));
  };
  http.on_refusal = [ctx = ctx_.get()](int status) { ctx->counters.count(status); };
  http.set_payload_max_length(ctx_->options.max_body_bytes);
  http.body_error = [ctx = ctx_.get()](httplib::Response& res, int status, const std::string& why) {
    write_error(res, why.empty() ? error_for_status(httplib::Request{}, status, ctx->options)
                                 : ApiError(status, why, "invalid_request_error",
                                            status == 415 ? "unsupported_media_type" : "bad_request"));
  };
  ctx_->http.set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second server bind a port in use.
  ctx_->http.set_socket_options([ctx = ctx_.get()](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ctx->listen_fd = sock;
  });
  add_hooks(*ctx_);
  add_routes(*ctx_);
}

ApiServer::~ApiServer() { stop(); }

std::vector<std::string> ApiServer::model_names() const {
  std::vector<std::string> out;
  for (const auto& m : ctx_->models) {
    out.push_back(m->id);
    for (const std::string& a : m->aliases) out.push_back(a);
  }
  return out;
}

ApiServer::ModelRef ApiServer::find_model(const std::string& name) const {
  for (const auto& m : ctx_->models)
    if (name.empty() || m->answers_to(name)) return {m->engine, m->chat_template.get(), m->grammars.get()};
  return {};
}

void ApiServer::add_model(Engine& engine, const std::string& id, const std::vector<std::string>& aliases) {
  auto m = std::make_unique<ServedModel>();
  m->id = id;
  m->aliases = aliases;
  m->engine = &engine;
  m->grammars = std::make_unique<grammar::GrammarCache>(engine.model().tokenizer());
  const Tokenizer& tok = engine.model().tokenizer();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) m->max_token_bytes = std::max(m->max_token_bytes, tok.token_text(id).size());
  const std::string source = chat_template_source(engine.model().file());
  if (!source.empty()) {
    try {
      m->chat_template = std::make_unique<ChatTemplate>(source);
    } catch (const std::exception& e) {  // serve completions anyway; chat requests get a 400
      std::fprintf(stderr, "spool: warning: the chat template of '%s' does not parse (%s); chat is off for it\n",
                   id.c_str(), e.what());
    }
  }
  ctx_->models.push_back(std::move(m));
}

void ApiServer::set_pipeline_runner(agents::PipelineRunner* runner) {
  ctx_->runner = runner;
  ctx_->batches = std::make_unique<BatchRunner>(*ctx_, runner->store());
  ctx_->batches->start();
}

int ApiServer::bind() {
  const ServerOptions& o = ctx_->options;
  const int port = o.port == 0 ? ctx_->http.bind_to_any_port(o.host) : (ctx_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0)
    throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                " (address in use, or not an address of this machine)");
  // The packaged httplib listens with a backlog of 5: a burst of connections (many
  // clients at once, slow ones included) would have its SYNs dropped and retried
  // seconds later. Listening again on the same socket raises the backlog.
  if (ctx_->listen_fd >= 0) ::listen(ctx_->listen_fd, SOMAXCONN);
  return port;
}

void ApiServer::listen() { ctx_->http.listen_after_bind(); }

void ApiServer::stop() {
  if (ctx_->batches) ctx_->batches->shutdown();
  stop_responses(*ctx_);
  ctx_->http.stop();
}

}  // namespace spool::server
