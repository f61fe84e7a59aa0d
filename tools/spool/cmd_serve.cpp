// `spool serve`: loads a model, starts the serving engine (continuous
// batching over a paged KV cache) and the OpenAI-compatible HTTP server
// (src/server). Stops cleanly on SIGINT/SIGTERM.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "cli_common.h"
#include "core/error.h"
#include "agents/pipeline_runner.h"
#include "agents/run_store.h"
#include "core/thread_pool.h"
#include "model/chat_template.h"
#include "runtime/engine.h"
#include "server/auth.h"
#include "server/http_server.h"

namespace spool::cli {
namespace {

struct ServeOptions {
  std::string model, host = "127.0.0.1", api_key, api_key_file, data_dir;
  int port = 8080, parallel = 8, n_ctx = 0, n_threads = 0, n_batch = 512, max_waiting = 64, max_runs = 1;
  size_t max_body = 8u << 20;
  ModelFlags model_flags;  // --mem-budget and friends, as run/bench
};

// The id clients see: the model file's name (a directory's name for HF checkpoints).
std::string model_id_of(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  if (p.filename() == "config.json") p = p.parent_path();
  return p.filename().string();
}

void serve(const ServeOptions& o) {
  std::string key = o.api_key;
  if (!o.api_key_file.empty()) {
    if (!key.empty()) throw Error("give either --api-key or --api-key-file, not both");
    key = server::read_api_key_file(o.api_key_file);
  }
  server::check_bind_policy(o.host, key);  // before the (possibly long) model load
  if (o.parallel < 1) throw Error("--parallel must be at least 1");
  if (o.max_waiting < 1) throw Error("--max-waiting must be at least 1");

  // SIGINT/SIGTERM go to one waiting thread (blocked everywhere else, threads inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // -m ALIAS=PATH names the model for clients and pipeline specs.
  std::string alias, model_arg = o.model;
  if (const size_t eq = model_arg.find('='); eq != std::string::npos && eq > 0 && !std::filesystem::exists(model_arg)) {
    alias = model_arg.substr(0, eq);
    model_arg = model_arg.substr(eq + 1);
  }
  // The durable store first: a data dir in use by another server is an error before the model load.
  agents::RunStore store(o.data_dir.empty() ? agents::default_data_dir() : o.data_dir);

  const double t_load = now_seconds();
  const std::string path = resolve_model_path(model_arg);
  auto model = open_model(path, o.n_threads, o.model_flags, o.n_ctx, o.n_batch, o.parallel);  // budget: KV pool of --parallel contexts
  const ModelConfig& cfg = model->config();
  EngineOptions eo;
  eo.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096, 4096);
  eo.max_running = o.parallel;
  eo.max_batch_tokens = std::max(o.n_batch, o.parallel);
  eo.max_waiting = o.max_waiting;
  auto engine = make_engine(*model, eo);

  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = key;
  so.max_body_bytes = o.max_body;
  so.model_id = alias.empty() ? model_id_of(path) : alias;
  so.model_aliases = {path};
  if (!alias.empty()) so.model_aliases.push_back(model_id_of(path));
  server::ApiServer api(*engine, so);

  // The agent runtime: pipelines over this engine, queued durably in the data dir.
  std::unique_ptr<ChatTemplate> agent_template;
  if (const std::string src = chat_template_source(model->file()); !src.empty()) {
    try {
      agent_template = std::make_unique<ChatTemplate>(src);
    } catch (const std::exception&) {  // the server has warned already; agents get plain prompts
    }
  }
  agents::SpecContext spec_models;
  spec_models.model_aliases = {so.model_id};
  for (const std::string& a : so.model_aliases) spec_models.model_aliases.push_back(a);
  agents::RunnerOptions ro;
  ro.max_runs = o.max_runs;
  Engine* engine_ptr = engine.get();
  const ChatTemplate* tmpl_ptr = agent_template.get();
  agents::PipelineRunner runner(store, spec_models, [engine_ptr, tmpl_ptr](const std::string&) {
    return agents::AgentModel{engine_ptr, tmpl_ptr};
  }, ro);
  api.set_pipeline_runner(&runner);
  const int port = api.bind();
  const EngineStats st = engine->stats();
  std::fprintf(stderr,
               "spool: %s (%s, %d layers, %d threads) loaded in %.2f s; context %d, parallel %d, KV pool %d blocks "
               "(%.1f MiB)\nspool: serving '%s' on http://%s:%d%s\n",
               cfg.name.c_str(), cfg.arch.c_str(), cfg.n_layer, model->pool().size(), now_seconds() - t_load,
               eo.n_ctx, eo.max_running, st.kv_blocks_total, st.kv_bytes / 1048576.0, so.model_id.c_str(),
               o.host.c_str(), port, key.empty() ? "" : " (API key required)");
  std::fprintf(stderr, "spool: pipeline store %s (max %d runs at once)\n", store.dir().c_str(), o.max_runs);
  std::fflush(stderr);
  runner.start();

  std::atomic<bool> done{false};
  std::thread signal_waiter([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        std::fprintf(stderr, "spool: stopping\n");
        runner.shutdown();
        api.stop();
        return;
      }
    }
  });
  api.listen();
  done = true;
  signal_waiter.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", o->model,
                  "Model: GGUF file or Hugging Face directory, optionally ALIAS=PATH (the name clients and pipeline "
                  "specs use); default ../shared/models/stories260K.gguf");
  cmd->add_option("--host", o->host, "Address to listen on (anything but loopback needs an API key)")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of this file");
  cmd->add_option("--parallel", o->parallel, "Requests decoded together at most")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->n_ctx, "Context per request in tokens (default: model's, at most 4096)");
  cmd->add_option("-t,--threads", o->n_threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch-size", o->n_batch, "Tokens per engine step (decodes + prefill chunks)")->capture_default_str();
  cmd->add_option("--max-waiting", o->max_waiting, "Queued requests at most; beyond it requests get 503")->capture_default_str();
  cmd->add_option("--max-body", o->max_body, "Largest request body in bytes (larger: 413)")->capture_default_str();
  cmd->add_option("--data-dir", o->data_dir,
                  "Durable store of pipeline runs, specs, batches (SQLite; default $XDG_DATA_HOME/spool or "
                  "~/.local/share/spool); one server per directory");
  cmd->add_option("--max-runs", o->max_runs, "Pipeline runs executing at once; later ones wait queued, in order")
      ->capture_default_str();
  add_model_flags(cmd, o->model_flags);
  cmd->callback([o] { serve(*o); });
}

}  // namespace spool::cli
