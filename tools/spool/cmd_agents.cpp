// `spool agents`: the agent runtime from the command line.
//   run SPEC.json      runs a pipeline in this process (model loaded as `serve` does) and prints
//                      each agent's output as it finishes; exit 0 when the run completes
//   submit SPEC.json   queues a run on a server (POST /v1/pipelines) and prints its id
//   status|cancel|logs|events ID
//                      a run on a server: its JSON, cancel it, its log lines, its event stream
// Errors (a bad spec, a failed run, an HTTP error) are one `error: ...` line and exit 1.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agents/pipeline_runner.h"
#include "agents/run_store.h"
#include "agents/spec_yaml.h"
#include "cli_common.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "text/chat_template.h"

namespace spool::cli {
namespace {

using nlohmann::json;

struct AgentsRunOptions {
  std::string spec_path, input, input_file, data_dir;
  std::vector<std::string> models;
  int n_threads = 0, n_ctx = 0, n_batch = 512, parallel = 4;
  bool json_out = false;
  ModelFlags model_flags;
  SpecFlags spec;
};

struct ClientOptions {
  std::string spec_path, input, input_file, id, server = "http://127.0.0.1:8080", api_key;
  bool json_out = false;
};

// The name a model is known by besides its path: the file's name (a directory's name for HF checkpoints).
std::string model_file_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  if (p.filename() == "config.json") p = p.parent_path();
  return p.filename().string();
}

agents::SpecJson read_spec_file(const std::string& path) {
  const std::string text = read_text_file(path);
  if (path.ends_with(".yaml") || path.ends_with(".yml")) {
    try {
      return agents::yaml_to_json(text);
    } catch (const std::invalid_argument& e) {
      throw Error(path + ": not valid YAML: " + e.what());
    }
  }
  try {
    return agents::SpecJson::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = e.what();
    if (const size_t p = what.find("] "); what.starts_with("[json.exception") && p != std::string::npos)
      what = what.substr(p + 2);
    throw Error(path + ": not valid JSON: " + what);
  }
}

// --input TEXT, --input-file FILE, else the spec's own "input" field, else "".
std::string run_input(const std::string& input, const std::string& input_file, const agents::SpecJson& spec) {
  if (!input.empty() && !input_file.empty()) throw Error("give either --input or --input-file, not both");
  if (!input_file.empty()) return read_text_file(input_file);
  if (!input.empty()) return input;
  if (spec.is_object())
    if (const auto it = spec.find("input"); it != spec.end() && it->is_string()) return it->get<std::string>();
  return "";
}

// ---- agents run -------------------------------------------------------------

void print_output(const json& ev, bool json_out) {
  if (json_out) {
    std::printf("%s\n", ev.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    const std::string out = ev.value("output", "");
    std::printf("== %s (round %d) ==\n%s%s", ev.value("agent", "").c_str(), ev.value("round", 1), out.c_str(),
                out.empty() || out.back() != '\n' ? "\n" : "");
  }
  std::fflush(stdout);
}

void agents_run(const AgentsRunOptions& o) {
  if (o.parallel < 1) throw Error("--parallel must be at least 1");
  const agents::SpecJson spec = read_spec_file(o.spec_path);
  const std::string input = run_input(o.input, o.input_file, spec);

  // The models, as `serve` has them: each -m is PATH or ALIAS=PATH; a spec names a model by ALIAS, its file's
  // name or its path; the first -m is the spec's default model.
  struct Loaded {
    std::string id, path;
    std::vector<std::string> names;
    std::unique_ptr<Model> draft;  // declared before model and engine: destroyed after the engine
    std::unique_ptr<Model> model;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<ChatTemplate> tmpl;
    std::unique_ptr<grammar::GrammarCache> grammars;  // output_schema grammars
  };
  std::vector<Loaded> loaded;
  agents::SpecContext models;
  for (const std::string& given : o.models.empty() ? std::vector<std::string>{""} : o.models) {
    Loaded l;
    std::string alias, arg = given;
    if (const size_t eq = arg.find('='); eq != std::string::npos && eq > 0 && !std::filesystem::exists(arg)) {
      alias = arg.substr(0, eq);
      arg = arg.substr(eq + 1);
    }
    l.path = resolve_model_path(arg);
    l.id = alias.empty() ? model_file_name(l.path) : alias;
    l.names = {l.id, l.path};
    if (!alias.empty()) l.names.push_back(model_file_name(l.path));
    for (const Loaded& other : loaded)
      if (other.id == l.id) throw Error("two models are named '" + l.id + "'; give each one an alias (-m ALIAS=PATH)");
    for (const std::string& n : l.names) models.model_aliases.push_back(n);
    loaded.push_back(std::move(l));
  }
  // A bad spec fails before the (possibly long) model load.
  try {
    agents::parse_pipeline_spec([&] {
      agents::SpecJson s = spec;
      if (s.is_object()) s.erase("input");
      return s;
    }(), models);
  } catch (const agents::SpecError& e) {
    throw Error(std::string("invalid pipeline spec: ") + e.what());
  }

  agents::RunStore store(o.data_dir);  // "": in memory, gone when the command ends
  // A draft model (-md) first: each model it can draft for gets a copy, and the budget leaves their share.
  std::unique_ptr<Model> draft = open_draft_model(o.spec, o.n_threads, o.n_ctx, o.n_batch, o.parallel, o.model_flags);
  ModelFlags flags = o.model_flags;  // one --mem-budget, split equally between the models
  for (size_t i = 0; draft && i < loaded.size(); ++i) flags = flags_beside_draft(flags, draft.get(), o.n_ctx, o.parallel);
  if (!flags.mem_budget.empty() && loaded.size() > 1)
    flags.mem_budget = std::to_string(parse_size(flags.mem_budget) / loaded.size());
  for (Loaded& l : loaded) {
    l.model = open_model(l.path, o.n_threads, flags, o.n_ctx, o.n_batch, o.parallel, 0,
                         draft && &l == &loaded.front() ? draft->shared_pool() : nullptr);
    const ModelConfig& cfg = l.model->config();
    l.draft = draft_for(draft, o.spec, *l.model, l.path, loaded.size(), l.id, o.n_ctx, o.n_batch, o.parallel, o.model_flags);
    EngineOptions eo;
    eo.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096, 4096);
    eo.max_running = o.parallel;
    eo.max_batch_tokens = std::max(o.n_batch, o.parallel);
    eo.spec = spec_options(o.spec);
    eo.draft_model = l.draft.get();
    l.engine = make_engine(*l.model, eo);
    l.grammars = std::make_unique<grammar::GrammarCache>(l.model->tokenizer());
    if (const std::string src = chat_template_source(l.model->file()); !src.empty()) {
      try {
        l.tmpl = std::make_unique<ChatTemplate>(src);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "spool: warning: '%s': the model's chat template does not parse (%s); agents get plain "
                     "prompts\n", l.id.c_str(), e.what());
      }
    }
  }
  agents::RunnerOptions ro;
  ro.max_runs = 1;
  ro.log_to_stderr = true;
  agents::PipelineRunner runner(store, models, [&loaded](const std::string& name) {
    for (const Loaded& l : loaded)
      if (std::find(l.names.begin(), l.names.end(), name) != l.names.end())
        return agents::AgentModel{l.engine.get(), l.tmpl.get(), l.grammars.get()};
    return agents::AgentModel{};
  }, ro);
  runner.start();  // with --data-dir, runs left unfinished there resume first
  std::string id;
  try {
    id = runner.submit(spec, input);
  } catch (const agents::SpecError& e) {
    throw Error(std::string("invalid pipeline spec: ") + e.what());
  }

  int64_t after = 0;
  for (;;) {
    const agents::EventBatch b = runner.wait_events(id, after, std::chrono::milliseconds(500));
    if (!b.known) throw Error("run " + id + " disappeared from the store");
    for (const auto& [seq, ev] : b.events) {
      after = seq;
      const std::string type = ev.value("type", "");
      if (type == "output") {
        print_output(ev, o.json_out);
      } else if (type == "done") {
        const std::string status = ev.value("status", "");
        if (status == "completed") return;
        const std::string error = ev.value("error", "");
        throw Error("run " + id + " " + status + (error.empty() ? "" : ": " + error));
      }
    }
    if (b.ended && b.events.empty()) {  // stopped without a done event (should not happen in-process)
      const std::string status = runner.wait(id, std::chrono::milliseconds(0));
      if (status == "completed") return;
      throw Error("run " + id + " ended with status '" + status + "'");
    }
  }
}

// ---- the HTTP client commands -------------------------------------------------

// A server URL split into what httplib's client takes (scheme://host:port) and a path prefix.
struct ServerUrl {
  std::string origin, prefix;
};

ServerUrl parse_server_url(std::string url) {
  if (url.find("://") == std::string::npos) url = "http://" + url;
  if (url.starts_with("https://")) {
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
    throw Error("--server " + url + ": https is not supported by this build (no OpenSSL in cpp-httplib)");
#endif
  } else if (!url.starts_with("http://")) {
    throw Error("--server " + url + ": expected an http:// URL");
  }
  const size_t host_at = url.find("://") + 3;
  const size_t slash = url.find('/', host_at);
  ServerUrl u;
  u.origin = url.substr(0, slash);
  if (slash != std::string::npos) u.prefix = url.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (u.origin.size() <= host_at) throw Error("--server " + url + ": no host");
  return u;
}

struct Api {
  ServerUrl url;
  std::unique_ptr<httplib::Client> client;
  explicit Api(const ClientOptions& o) : url(parse_server_url(o.server)) {
    client = std::make_unique<httplib::Client>(url.origin);
    if (!client->is_valid()) throw Error("--server " + o.server + ": not a valid server URL");
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(60, 0);
    std::string key = o.api_key;
    if (key.empty())
      if (const char* env = std::getenv("SPOOL_API_KEY")) key = env;
    if (!key.empty()) client->set_bearer_token_auth(key);
  }
  std::string path(const std::string& p) const { return url.prefix + p; }

  // The error message of an OpenAI error body ({"error": {"message"}}), else the body itself.
  static std::string error_message(int status, const std::string& body) {
    std::string msg;
    try {
      const json j = json::parse(body);
      if (j.is_object() && j.contains("error")) {
        const json& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) msg = e["message"].get<std::string>();
        else if (e.is_string()) msg = e.get<std::string>();
      }
    } catch (const std::exception&) {
    }
    if (msg.empty()) msg = body.substr(0, 200);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
    return msg + " (HTTP " + std::to_string(status) + ")";
  }
  void check(const httplib::Result& res) const {
    if (!res) {
      const httplib::Error e = res.error();
      throw Error("cannot reach " + url.origin + ": " +
                  (e == httplib::Error::Connection ? std::string("connection refused or no route")
                   : e == httplib::Error::ConnectionTimeout ? std::string("connection timed out")
                   : e == httplib::Error::Read ? std::string("the connection broke while reading")
                                               : httplib::to_string(e)));
    }
  }
  json reply_json(const httplib::Result& res) const {
    check(res);
    if (res->status >= 400) throw Error(error_message(res->status, res->body));
    try {
      return json::parse(res->body);
    } catch (const json::parse_error&) {
      throw Error("the server's reply is not JSON (HTTP " + std::to_string(res->status) + ")");
    }
  }
  json get(const std::string& p) { return reply_json(client->Get(path(p).c_str())); }
  json post(const std::string& p, const agents::SpecJson& body) {  // keys in their order
    return reply_json(client->Post(path(p).c_str(), body.dump(), "application/json"));
  }
};

std::string run_path(const std::string& id, const std::string& tail = "") {
  for (char c : id)
    if (!(std::isalnum((unsigned char)c) || c == '_')) throw Error("'" + id + "' is not a run id");
  return "/v1/pipelines/" + id + tail;
}

void agents_submit(const ClientOptions& o) {
  agents::SpecJson spec = read_spec_file(o.spec_path);
  if (!spec.is_object()) throw Error(o.spec_path + ": a pipeline spec is a JSON object");
  const std::string input = run_input(o.input, o.input_file, spec);
  spec["input"] = input;
  Api api(o);
  const json r = api.post("/v1/pipelines", spec);
  if (o.json_out) std::printf("%s\n", r.dump().c_str());
  else std::printf("%s\n", r.value("id", "").c_str());
}

void agents_status(const ClientOptions& o) {
  Api api(o);
  std::printf("%s\n", api.get(run_path(o.id)).dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

void agents_cancel(const ClientOptions& o) {
  Api api(o);
  const json r = api.post(run_path(o.id, "/cancel"), json::object());
  if (o.json_out) std::printf("%s\n", r.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  else std::printf("%s %s\n", o.id.c_str(), r.value("status", "").c_str());
}

void agents_logs(const ClientOptions& o) {
  Api api(o);
  const json r = api.get(run_path(o.id, "/logs"));
  if (r.contains("data") && r["data"].is_array())
    for (const json& line : r["data"])
      if (line.is_string()) std::printf("%s\n", line.get<std::string>().c_str());
}

// Follows the SSE stream: token text as it arrives, a header when the agent changes; --json: one event a line.
void agents_events(const ClientOptions& o) {
  Api api(o);
  api.client->set_read_timeout(3600, 0);  // the server sends a keep-alive every second
  int status = 0;
  std::string buffer, error_body, current, final_status, final_error;
  bool at_line_start = true;
  const auto handle = [&](const std::string& data) {
    json ev;
    try {
      ev = json::parse(data);
    } catch (const json::parse_error&) {
      return;
    }
    if (o.json_out) {
      std::printf("%s\n", ev.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    }
    const std::string type = ev.value("type", "");
    const std::string who = ev.value("agent", "") + " (round " + std::to_string(ev.value("round", 1)) + ")";
    if (type == "done") {
      final_status = ev.value("status", "");
      final_error = ev.value("error", "");
    }
    if (o.json_out) return;
    if (type == "token" || (type == "output" && who != current)) {
      if (who != current) {
        std::printf("%s== %s ==\n", at_line_start ? "" : "\n", who.c_str());
        current = who;
        at_line_start = true;
      }
      const std::string text = type == "token" ? ev.value("text", "") : ev.value("output", "");
      std::fputs(text.c_str(), stdout);
      if (!text.empty()) at_line_start = text.back() == '\n';
    } else if (type == "output" || type == "failed") {
      if (!at_line_start) std::printf("\n");
      at_line_start = true;
      current.clear();  // a retry or a later round prints its header again
      if (type == "failed") std::fprintf(stderr, "spool: agent %s failed: %s\n", who.c_str(), ev.value("error", "").c_str());
    } else if (type == "retry") {
      if (!at_line_start) std::printf("\n");
      at_line_start = true;
      current.clear();
      std::fprintf(stderr, "spool: agent %s: retrying after: %s\n", who.c_str(), ev.value("error", "").c_str());
    }
    std::fflush(stdout);
  };
  const httplib::Result res = api.client->Get(
      api.path(run_path(o.id, "/events")).c_str(), httplib::Headers{{"Accept", "text/event-stream"}},
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status >= 400) {
          error_body.append(data, n);
          return true;
        }
        buffer.append(data, n);
        for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
          const std::string block = buffer.substr(0, end);
          buffer.erase(0, end + 2);
          std::string payload;
          size_t pos = 0;
          while (pos <= block.size()) {
            size_t nl = block.find('\n', pos);
            if (nl == std::string::npos) nl = block.size();
            const std::string line = block.substr(pos, nl - pos);
            if (line.starts_with("data:")) payload += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
            pos = nl + 1;
          }
          if (!payload.empty()) handle(payload);
        }
        return true;
      });
  api.check(res);
  if (status >= 400) throw Error(Api::error_message(status, error_body));
  if (!at_line_start) std::printf("\n");
  std::fflush(stdout);
  if (final_status.empty()) throw Error("the event stream ended before the run did (server stopping?)");
  if (final_status != "completed")
    throw Error("run " + o.id + " " + final_status + (final_error.empty() ? "" : ": " + final_error));
}

void add_server_flags(CLI::App* cmd, ClientOptions& o) {
  cmd->add_option("--server", o.server, "Server URL")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY' (default: $SPOOL_API_KEY)");
}

}  // namespace

void add_agents_command(CLI::App& app) {
  CLI::App* agents = app.add_subcommand(
      "agents", "Run agent pipelines (a JSON spec of agents and stages) here, or on a server");
  agents->require_subcommand(1);

  auto r = std::make_shared<AgentsRunOptions>();
  CLI::App* run = agents->add_subcommand(
      "run", "Run a pipeline in this process; each agent's output goes to stdout as it finishes, agent logs to "
             "stderr; exit 1 if the run fails");
  run->add_option("spec", r->spec_path, "Pipeline spec (JSON)")->required();
  run->add_option("--input", r->input, "The run's input ({input}; the task when the spec has none)");
  run->add_option("--input-file", r->input_file, "Read the run's input from this file");
  run->add_option("-m,--model", r->models,
                  "Model: GGUF file or Hugging Face directory, optionally ALIAS=PATH; specs name it by ALIAS, file "
                  "name or path; repeat for several models (the first is the default; --mem-budget is split "
                  "equally); default ../shared/models/stories260K.gguf");
  run->add_option("-t,--threads", r->n_threads, "Threads (default: all cores)");
  run->add_option("-c,--ctx-size", r->n_ctx, "Context per agent request in tokens (default: model's, at most 4096)");
  run->add_option("--parallel", r->parallel, "Agent requests decoded together at most (parallel stages)")
      ->capture_default_str();
  run->add_option("--data-dir", r->data_dir,
                  "Keep the run in this store (SQLite, as serve's --data-dir; default: in memory); runs left "
                  "unfinished there resume first");
  run->add_flag("--json", r->json_out, "One JSON object per agent output instead of text");
  add_model_flags(run, r->model_flags);
  add_spec_flags(run, r->spec);
  run->callback([r] { agents_run(*r); });

  auto s = std::make_shared<ClientOptions>();
  CLI::App* submit = agents->add_subcommand("submit", "Queue a pipeline run on a server; prints the run id");
  submit->add_option("spec", s->spec_path, "Pipeline spec (JSON)")->required();
  submit->add_option("--input", s->input, "The run's input");
  submit->add_option("--input-file", s->input_file, "Read the run's input from this file");
  submit->add_flag("--json", s->json_out, "Print the server's reply");
  add_server_flags(submit, *s);
  submit->callback([s] { agents_submit(*s); });

  const auto by_id = [&](const char* name, const char* help, void (*fn)(const ClientOptions&), const char* json_help) {
    auto o = std::make_shared<ClientOptions>();
    CLI::App* cmd = agents->add_subcommand(name, help);
    cmd->add_option("id", o->id, "Run id (run_...)")->required();
    if (json_help) cmd->add_flag("--json", o->json_out, json_help);
    add_server_flags(cmd, *o);
    cmd->callback([o, fn] { fn(*o); });
  };
  by_id("status", "Print a run on a server: status, error, each agent's output (JSON)", agents_status, nullptr);
  by_id("cancel", "Cancel a run on a server; prints its status after", agents_cancel, "Print the run's JSON");
  by_id("logs", "Print a run's log lines", agents_logs, nullptr);
  by_id("events", "Follow a run's events: agent output as it is generated; exit 1 if the run fails", agents_events,
        "One JSON event a line (start, token, output, retry, failed, done)");
}

}  // namespace spool::cli
