// C API: the OpenAI-compatible HTTP server (src/server) over an engine, in
// the embedding process, on a thread of its own (include/spool.h).
#include <chrono>
#include <cstdio>
#include <cstring>

#include "capi/capi_internal.h"
#include "core/error.h"
#include "server/auth.h"
#include "server/http_server.h"

using namespace spool;
using namespace spool::capi;

extern "C" {

void spool_server_options_init(spool_server_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

spool_status spool_server_start(spool_engine* engine, const spool_server_options* options, spool_server** out) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(engine, Kind::Engine, "engine");
    require(out, "out");
    *out = nullptr;
    server::ServerOptions so;
    so.model_id = "spool";
    if (options) {
      if (options->struct_size != sizeof(spool_server_options))
        fail(SPOOL_ERR_INVALID_ARGUMENT, "spool_server_options.struct_size is " + std::to_string(options->struct_size) +
                                             ", expected " + std::to_string(sizeof(spool_server_options)) +
                                             " (fill the struct with spool_server_options_init)");
      if (options->port < 0 || options->port > 65535)
        fail(SPOOL_ERR_INVALID_ARGUMENT, "port " + std::to_string(options->port) + " is not between 0 and 65535");
      if (options->host) so.host = options->host;
      so.port = options->port;
      if (options->api_key) so.api_key = options->api_key;
      if (options->model_id && options->model_id[0]) so.model_id = options->model_id;
    } else {
      so.port = 0;
    }
    try {
      server::check_bind_policy(so.host, so.api_key);
    } catch (const Error& e) {
      fail(SPOOL_ERR_INVALID_ARGUMENT, e.what());
    }
    auto h = std::make_unique<spool_server>();
    h->engine = engine;
    h->api = std::make_unique<server::ApiServer>(*engine->engine, so);
    h->port = h->api->bind();
    server::ApiServer* api = h->api.get();
    std::atomic<bool>* done = &h->done;
    h->thread = std::thread([api, done] {
      try {
        api->listen();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "spool: server stopped: %s\n", e.what());
      }
      *done = true;
    });
    ++engine->n_servers;
    register_handle(h.get(), Kind::Server);
    *out = h.release();
  });
}

spool_status spool_server_port(const spool_server* server, int32_t* port) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(server, Kind::Server, "server");
    require(port, "port");
    *port = server->port;
  });
}

spool_status spool_server_stop(spool_server* server) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(server, Kind::Server, "server");
    unregister_handle(server);
    // A stop() that comes before the listening thread is up is lost (the HTTP
    // library only stops a running server): repeat it until listen() returns.
    while (!server->done) {
      server->api->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (server->thread.joinable()) server->thread.join();
    server->api.reset();
    --server->engine->n_servers;
    delete server;
  });
}

}  // extern "C"
