// `spool serve`: loads a model, starts the serving engine (continuous
// batching over a paged KV cache) and the OpenAI-compatible HTTP server
// (src/server). Stops cleanly on SIGINT/SIGTERM.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <malloc.h>
#include <pthread.h>
#include <thread>

#include "cli_common.h"
#include "agents/pipeline_runner.h"
#include "agents/run_store.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "dist/comm.h"
#include "runtime/engine.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "text/chat_template.h"

namespace spool::cli {
namespace {

struct ServeOptions {
  std::vector<std::string> models, allowed_hosts, cors_origins;
  std::string host = "127.0.0.1", api_key, api_key_file, data_dir;
  bool no_prefix_cache = false, no_kv_hints = false;
  std::string kv_pool, kv_disk;
  bool no_kv_disk = false;
  int state_snapshots = 0, snapshot_interval = 256;
  int port = 8080, parallel = 8, n_ctx = 0, n_threads = 0, n_batch = 512, max_waiting = 64, max_runs = 1;
  int max_queued_runs = 256;
  std::string max_storage = "1G";
  size_t max_body = 8u << 20;
  int max_connections = 256, read_timeout = 5;
  size_t max_header_bytes = 32u << 10;
  int max_headers = 100, header_timeout = 10, body_timeout = 60;
  double request_timeout = 0;
  int read_stall_ms = 500;
  int heap_trim_s = 60;
  ModelFlags model_flags;  // --mem-budget and friends, as run/bench
  SpecFlags spec;          // --spec, --spec-max
};

// The id clients see: the model file's name (a directory's name for HF checkpoints).
std::string model_id_of(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  if (p.filename() == "config.json") p = p.parent_path();
  return p.filename().string();
}

void serve(const ServeOptions& o) {
  // SIGINT/SIGTERM go to one waiting thread (blocked everywhere else, threads inherit the mask): blocked
  // before anything starts a thread, MPI's own included.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // --dist ep: one model; the ranks other than the home rank only compute
  // experts (no port, no data dir) and end inside open_model.
  if (!o.model_flags.dist.empty()) {
    if (o.models.size() > 1) throw Error("--dist ep: serve takes one model (-m)");
    if (!dist_home_rank()) {
      pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);  // an expert rank just ends on SIGTERM
      std::string arg = o.models.empty() ? "" : o.models[0];
      if (const size_t eq = arg.find('='); eq != std::string::npos && eq > 0 && !std::filesystem::exists(arg))
        arg = arg.substr(eq + 1);
      open_model(resolve_model_path(arg), o.n_threads, o.model_flags, o.n_ctx, o.n_batch, o.parallel);
    }
  }
  std::string key = o.api_key;
  if (!o.api_key_file.empty()) {
    if (!key.empty()) throw Error("give either --api-key or --api-key-file, not both");
    key = server::read_api_key_file(o.api_key_file);
  }
  server::check_bind_policy(o.host, key);  // before the (possibly long) model load
  if (o.parallel < 1) throw Error("--parallel must be at least 1");
  if (o.max_waiting < 1) throw Error("--max-waiting must be at least 1");
  if (o.max_connections < 1) throw Error("--max-connections must be at least 1");
  if (o.read_timeout < 1) throw Error("--read-timeout must be at least 1 second");
  if (o.header_timeout < 1) throw Error("--header-timeout must be at least 1 second");
  if (o.body_timeout < 1) throw Error("--body-timeout must be at least 1 second");
  if (o.max_header_bytes < 256) throw Error("--max-header-bytes must be at least 256");
  if (o.max_headers < 1) throw Error("--max-headers must be at least 1");
  if (o.request_timeout < 0) throw Error("--request-timeout must not be negative");
  if (o.read_stall_ms < 0) throw Error("--read-stall-ms must not be negative");
  if (o.state_snapshots < 0) throw Error("--state-snapshots must not be negative");
  if (o.snapshot_interval < 64 || o.snapshot_interval % 64 != 0)
    throw Error("--snapshot-interval must be a positive multiple of 64 (the delta rule's chunk; the KV block is 16)");

  // The durable store first: a data dir in use by another server is an error before the model load.
  const std::string data_dir = o.data_dir.empty() ? agents::default_data_dir() : o.data_dir;
  agents::RunStore store(data_dir);
  // The KV disk tier: DATA_DIR/kv, --kv-disk bytes (default 10 % of the free space there, at most 64 GiB)
  // shared by the models.
  const std::string kv_dir = (std::filesystem::path(data_dir) / "kv").string();
  uint64_t kv_disk_bytes = 0;
  if (!o.no_kv_disk) {
    if (!o.kv_disk.empty()) {
      kv_disk_bytes = parse_size(o.kv_disk);
      if (kv_disk_bytes == 0) throw Error("--kv-disk must be positive (or give --no-kv-disk)");
    } else {
      std::error_code ec;
      const auto space = std::filesystem::space(data_dir, ec);
      kv_disk_bytes = ec ? (1ull << 30) : std::min<uint64_t>(space.available / 10, 64ull << 30);
    }
  }

  // Every -m: PATH, or ALIAS=PATH (the name clients and pipeline specs use).
  // One --mem-budget is shared: each model gets an equal part of it.
  std::vector<std::string> given = o.models.empty() ? std::vector<std::string>{""} : o.models;
  // A draft model (-md) first: each model it can draft for gets a copy, and the budget leaves their share.
  std::unique_ptr<Model> draft =
      open_draft_model(o.spec, o.n_threads, o.n_ctx, o.n_batch, o.parallel, o.model_flags);
  ModelFlags flags = o.model_flags;
  for (size_t i = 0; draft && i < given.size(); ++i) flags = flags_beside_draft(flags, draft.get(), o.n_ctx, o.parallel);
  if (!flags.mem_budget.empty() && given.size() > 1)
    flags.mem_budget = std::to_string(parse_size(flags.mem_budget) / given.size());
  struct Loaded {
    std::string id, path;
    std::unique_ptr<Model> draft;  // declared before model and engine: destroyed after the engine
    std::unique_ptr<Model> model;
    std::unique_ptr<Engine> engine;
  };
  std::vector<Loaded> loaded;
  for (const std::string& g : given) {
    Loaded l;
    std::string alias, arg = g;
    if (const size_t eq = arg.find('='); eq != std::string::npos && eq > 0 && !std::filesystem::exists(arg)) {
      alias = arg.substr(0, eq);
      arg = arg.substr(eq + 1);
    }
    const double t_load = now_seconds();
    l.path = resolve_model_path(arg);
    l.id = alias.empty() ? model_id_of(l.path) : alias;
    for (const Loaded& other : loaded)
      if (other.id == l.id) throw Error("two models are named '" + l.id + "'; give each one an alias (-m ALIAS=PATH)");
    l.model = open_model(l.path, o.n_threads, flags, o.n_ctx, o.n_batch, o.parallel, 0,  // budget: KV pool of --parallel contexts
                         draft && loaded.empty() ? draft->shared_pool() : nullptr);
    const ModelConfig& cfg = l.model->config();
    l.draft = draft_for(draft, o.spec, *l.model, l.path, given.size(), l.id, o.n_ctx, o.n_batch, o.parallel, o.model_flags);
    EngineOptions eo;
    eo.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096, 4096);
    eo.max_running = o.parallel;
    eo.max_batch_tokens = std::max(o.n_batch, o.parallel);
    eo.spec = spec_options(o.spec);
    eo.draft_model = l.draft.get();
    eo.max_waiting = o.max_waiting;
    eo.prefix_cache = !o.no_prefix_cache;
    eo.kv_hints = !o.no_kv_hints;
    eo.state_snapshots = o.state_snapshots;
    eo.snapshot_interval = o.snapshot_interval;
    eo.read_stall_ms = o.read_stall_ms;
    if (!o.kv_pool.empty()) eo.kv_bytes = parse_size(o.kv_pool);
    if (kv_disk_bytes >= (1u << 20)) {
      eo.kv_disk_dir = kv_dir;
      eo.kv_disk_bytes = kv_disk_bytes / given.size();
    }
    l.engine = make_engine(*l.model, eo);
    const EngineStats st = l.engine->stats();
    std::fprintf(stderr,
                 "spool: '%s': %s (%s, %d layers, %d threads) loaded in %.2f s; context %d, parallel %d, KV pool %d "
                 "blocks (%.1f MiB)\n",
                 l.id.c_str(), cfg.name.c_str(), cfg.arch.c_str(), cfg.n_layer, l.model->pool().size(),
                 now_seconds() - t_load, eo.n_ctx, eo.max_running, st.kv_blocks_total, st.kv_bytes / 1048576.0);
    if (st.kv_disk)
      std::fprintf(stderr, "spool: '%s': KV disk tier %s, up to %.1f GiB (%llu blocks there now)\n", l.id.c_str(),
                   kv_dir.c_str(), eo.kv_disk_bytes / 1073741824.0, (unsigned long long)st.kv_disk_stats.files);
    loaded.push_back(std::move(l));
  }

  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = key;
  so.max_body_bytes = o.max_body;
  so.mem_budget_bytes = o.model_flags.mem_budget.empty() ? 0 : parse_size(o.model_flags.mem_budget);
  so.max_connections = o.max_connections;
  so.read_timeout_s = o.read_timeout;
  so.max_header_bytes = o.max_header_bytes;
  so.max_header_lines = o.max_headers;
  so.header_timeout_s = o.header_timeout;
  so.body_timeout_s = o.body_timeout;
  so.request_timeout_s = o.request_timeout;
  so.allowed_hosts = o.allowed_hosts;
  so.cors_origins = o.cors_origins;
  const auto aliases_of = [](const Loaded& l) {
    std::vector<std::string> a{l.path};
    if (l.id != model_id_of(l.path)) a.push_back(model_id_of(l.path));
    return a;
  };
  so.model_id = loaded[0].id;
  so.model_aliases = aliases_of(loaded[0]);
  server::ApiServer api(*loaded[0].engine, so);
  for (size_t i = 1; i < loaded.size(); ++i) api.add_model(*loaded[i].engine, loaded[i].id, aliases_of(loaded[i]));

  // The agent runtime: pipelines over these engines, queued durably in the data dir.
  agents::SpecContext spec_models;
  spec_models.model_aliases = api.model_names();
  agents::RunnerOptions ro;
  ro.max_runs = o.max_runs;
  if (o.max_queued_runs < 1) throw Error("--max-queued-runs must be at least 1");
  ro.max_queued = o.max_queued_runs;
  ro.max_storage_bytes = parse_size(o.max_storage);
  ro.kv_hints = !o.no_kv_hints;
  agents::PipelineRunner runner(store, spec_models, [&api](const std::string& name) {
    const server::ApiServer::ModelRef m = api.find_model(name);
    return agents::AgentModel{m.engine, m.chat_template, m.grammars};
  }, ro);
  api.set_pipeline_runner(&runner);
  const int port = api.bind();
  std::string names;
  for (const Loaded& l : loaded) names += (names.empty() ? "'" : ", '") + l.id + "'";
  std::fprintf(stderr, "spool: serving %s on http://%s:%d%s\n", names.c_str(), o.host.c_str(), port,
               key.empty() ? "" : " (API key required)");
  std::fprintf(stderr, "spool: pipeline store %s (max %d runs at once)\n", store.dir().c_str(), o.max_runs);
  std::fprintf(stderr, "spool: web UI at http://%s:%d/\n", o.host.c_str(), port);
  std::fflush(stderr);
  runner.start();

  std::atomic<bool> done{false};
  // The same thread gives the malloc heap's free pages back to the system every
  // --heap-trim-s: a server's many threads free memory in every arena, and
  // glibc keeps what is not at an arena's top (a slow RSS creep under load).
  std::thread signal_waiter([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    auto last_trim = std::chrono::steady_clock::now();
    while (!done) {
#if defined(__GLIBC__)
      if (o.heap_trim_s > 0 && std::chrono::steady_clock::now() - last_trim >= std::chrono::seconds(o.heap_trim_s)) {
        malloc_trim(0);
        last_trim = std::chrono::steady_clock::now();
      }
#endif
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        std::fprintf(stderr, "spool: stopping\n");
        // --dist ep: mpirun sends SIGTERM when a rank dies; a pass waiting for that rank fails its requests now,
        // and they get their error before the server closes (mpirun's SIGKILL follows a second later).
        if (!o.model_flags.dist.empty()) {
          dist::interrupt_waits();
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
          auto busy = [&] {
            for (const Loaded& l : loaded)
              if (l.engine->stats().running > 0) return true;
            return false;
          };
          while (busy() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the handlers write the error events
        }
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
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API, with a web UI at /");
  cmd->add_option("-m,--model", o->models,
                  "Model: GGUF file or Hugging Face directory, optionally ALIAS=PATH (the name clients and pipeline "
                  "specs use); repeat for several models (the first is the default; --mem-budget is split equally); "
                  "default ../shared/models/stories260K.gguf");
  cmd->add_option("--host", o->host, "Address to listen on (anything but loopback needs an API key)")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--api-key-file", o->api_key_file,
                  "Read the API key from the first line of this file (a key given with --api-key shows in ps)");
  cmd->add_option("--allowed-host", o->allowed_hosts,
                  "Without an API key the server answers only requests whose Host header is localhost, "
                  "127.0.0.0/8 or [::1] (any port), so that a DNS-rebinding web page cannot read it; this "
                  "adds a name (e.g. one a reverse proxy forwards; '*': any). Repeatable");
  cmd->add_option("--cors-origin", o->cors_origins,
                  "Let web pages of this origin (scheme://host[:port]; '*': any) call the API, with CORS "
                  "headers; requests from any other origin but the server's own get 403. Repeatable");
  cmd->add_option("--parallel", o->parallel, "Requests decoded together at most")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->n_ctx, "Context per request in tokens (default: model's, at most 4096)");
  cmd->add_option("-t,--threads", o->n_threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch-size", o->n_batch, "Tokens per engine step (decodes + prefill chunks)")->capture_default_str();
  cmd->add_option("--max-waiting", o->max_waiting, "Queued requests at most; beyond it requests get 503")->capture_default_str();
  cmd->add_option("--max-body", o->max_body, "Largest request body in bytes (larger: 413)")->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "Connections served at once (one worker thread each); one more gets 503 with Retry-After: 1")
      ->capture_default_str();
  cmd->add_option("--read-timeout", o->read_timeout,
                  "Seconds a connection may send nothing (mid-header, mid-body or idle) before it is closed")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->header_timeout,
                  "Seconds a request line and header may take in all (a client trickling bytes gets 408)")
      ->capture_default_str();
  cmd->add_option("--body-timeout", o->body_timeout,
                  "Seconds a request body may take in all after its header (a client trickling bytes gets 408)")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", o->max_header_bytes,
                  "Largest request line + header in bytes (larger: 431)")
      ->capture_default_str();
  cmd->add_option("--max-headers", o->max_headers, "Most header lines in a request (more: 431)")->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout,
                  "Seconds a completion may take from arrival to its last token; past it the request is cancelled "
                  "and answered with a 504 error (code request_timeout) or, streamed, an error event (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--read-stall-ms", o->read_stall_ms,
                  "Streamed MoE models: when an expert's read has taken this long, the requests routed to that "
                  "expert wait aside for it and the others go on; their outputs are unchanged (0: every step "
                  "waits for every read; not for hybrid models, whose steps always wait)")
      ->capture_default_str();
  cmd->add_option("--heap-trim-s", o->heap_trim_s,
                  "Every this many seconds, give the malloc heap's free pages back to the system (malloc_trim; "
                  "0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache,
               "Never reuse KV blocks of earlier requests (for measuring what the prefix cache saves)");
  cmd->add_option("--state-snapshots", o->state_snapshots,
                  "Hybrid models (Qwen3-Next, Qwen3.5, Kimi Linear, K3): keep up to N snapshots of the recurrent "
                  "state at every --snapshot-interval positions, least recently used evicted, so a prompt that "
                  "starts with a cached prefix (an agent pipeline's shared context) restores the state there and "
                  "computes only the rest. Each takes one sequence's whole recurrent state out of the "
                  "KV pool (--kv-pool; default --parallel full contexts, which --mem-budget reserves). 0: hybrid "
                  "models compute every prompt in full")
      ->capture_default_str();
  cmd->add_option("--snapshot-interval", o->snapshot_interval,
                  "Positions between state snapshots (a multiple of 64: the delta rule's chunk, and of the KV block, 16)")
      ->capture_default_str();
  cmd->add_option("--kv-pool", o->kv_pool,
                  "KV pool size per model (e.g. 256M; default: --parallel full contexts)");
  cmd->add_option("--kv-disk", o->kv_disk,
                  "Bytes of full prefix KV blocks kept on disk under DATA_DIR/kv, so a conversation's or agent's "
                  "prefix is read back instead of recomputed after eviction or a restart (e.g. 8G; default 10 % of "
                  "the free space there, at most 64G; shared by the models)");
  cmd->add_flag("--no-kv-disk", o->no_kv_disk, "No KV disk tier: prefixes live in the KV pool only");
  cmd->add_flag("--no-kv-hints", o->no_kv_hints,
                "Plain LRU eviction of cached KV blocks: no retention for waiting requests' prefixes or pipelines' "
                "next stages (for measuring what the hints save)");
  cmd->add_option("--data-dir", o->data_dir,
                  "Durable store of pipeline runs, specs, batches (SQLite; default $XDG_DATA_HOME/spool or "
                  "~/.local/share/spool); one server per directory");
  cmd->add_option("--max-runs", o->max_runs, "Pipeline runs executing at once; later ones wait queued, in order")
      ->capture_default_str();
  cmd->add_option("--max-queued-runs", o->max_queued_runs,
                  "Pipeline runs and batches waiting to start, at most; one more submission gets 429")
      ->capture_default_str();
  cmd->add_option("--max-storage", o->max_storage,
                  "Bytes the data dir's store may hold (e.g. 512M, 4G); an upload, saved spec, pipeline run or batch "
                  "that would pass it gets 507 until something is deleted (DELETE on its route)")
      ->capture_default_str();
  add_model_flags(cmd, o->model_flags);
  add_spec_flags(cmd, o->spec);
  cmd->callback([o] { serve(*o); });
}

}  // namespace spool::cli
