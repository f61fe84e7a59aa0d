// The agent runtime's routes (docs/AGENTS.md):
//   POST /v1/pipelines                 spec (+ "input"), or {"name": saved spec, "input"} -> {"id", "status"}
//   GET  /v1/pipelines                 newest first; ?limit=20&after=ID pages
//   GET  /v1/pipelines/{id}            status, error, and every agent step (round, status, output, attempts, tokens)
//   GET  /v1/pipelines/{id}/events     SSE: start / token / output / retry / failed / done; resumable (Last-Event-ID)
//   GET  /v1/pipelines/{id}/logs       the run's log lines
//   POST /v1/pipelines/{id}/cancel     cancels; its engine requests (and KV blocks) are released at once
//   DELETE /v1/pipelines/{id}          an ended run and all it stored (409 while queued or running: cancel first)
//   PUT/GET/DELETE /v1/pipeline-specs/{name}  save / fetch / delete a validated spec; GET /v1/pipeline-specs lists names
// Specs are JSON, or YAML with Content-Type application/yaml, application/x-yaml
// or text/yaml exactly (any other type is refused with 415 before the body is read).
// A bad spec is a 400 naming the field (param) before anything is stored; a
// full queue or store is a 429 / 507 naming --max-queued-runs / --max-storage.
#include <chrono>
#include <nlohmann/json.hpp>

#include "agents/pipeline_runner.h"
#include "agents/spec_yaml.h"
#include "server/openai_format.h"
#include "server/request_policy.h"
#include "server/server_context.h"

namespace spool::server {

namespace {

using Clock = std::chrono::steady_clock;

void reply(httplib::Response& res, const json& j) { res.set_content(dump_json(j), "application/json"); }

agents::PipelineRunner& runner_of(ServerContext& ctx) {
  if (!ctx.runner) throw ApiError(404, "pipelines are not enabled on this server", "invalid_request_error", "not_found");
  return *ctx.runner;
}

ApiError spec_error(const agents::SpecError& e) {
  return ApiError(400, std::string("invalid pipeline spec: ") + e.what(), "invalid_request_error", "invalid_spec",
                  e.field);
}

ApiError no_run(const std::string& id) {
  return ApiError(404, "no pipeline run '" + id + "'", "invalid_request_error", "not_found", "id");
}

// The body as a JSON object: JSON, or YAML when the Content-Type says so
// (application/yaml, application/x-yaml, text/yaml).
// Keys keep their order (agents::SpecJson).
agents::SpecJson parse_spec_body(const httplib::Request& req) {
  if (!is_yaml_media_type(media_type(req.get_header_value("Content-Type")))) {
    parse_json_body(req);  // the errors of every JSON route
    return agents::SpecJson::parse(req.body);
  }
  agents::SpecJson j;
  try {
    j = agents::yaml_to_json(req.body);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, std::string("the request body is not valid YAML: ") + e.what(), "invalid_request_error",
                   "invalid_yaml");
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a YAML mapping", "invalid_request_error", "invalid_yaml");
  return j;
}

bool valid_spec_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name)
    if (!(std::isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

void create_run(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  agents::PipelineRunner& runner = runner_of(ctx);
  agents::SpecJson body = parse_spec_body(req);
  std::string input;
  if (const auto it = body.find("input"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw bad_param("input", "'input' must be a string", "invalid_type");
    input = it->get<std::string>();
  }
  agents::SpecJson spec = body;
  if (!body.contains("agents") && body.contains("name")) {  // {"name": a saved spec, "input": ...}
    if (!body["name"].is_string()) throw bad_param("name", "'name' must be a string", "invalid_type");
    const std::string name = body["name"].get<std::string>();
    std::optional<agents::SpecJson> saved = ctx.runner->store_spec(name);
    if (!saved) throw ApiError(404, "no saved pipeline spec '" + name + "'", "invalid_request_error", "not_found", "name");
    spec = *saved;
  }
  std::string id;
  try {
    id = runner.submit(spec, input);
  } catch (const agents::SpecError& e) {
    throw spec_error(e);
  } catch (const agents::LimitExceeded& e) {
    throw_limit_error(e, res);
  }
  reply(res, {{"id", id}, {"object", "pipeline.run"}, {"status", "queued"}});
}

// DELETE /v1/pipelines/{id}: refused while the run is queued or running (cancel
// first: deleting is never a side door to cancelling), so nothing executing
// loses its rows under it.
void delete_run(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  agents::PipelineRunner& runner = runner_of(ctx);
  const std::string id = req.matches[1].str();
  switch (runner.remove(id)) {
    case agents::DeleteOutcome::NotFound: throw no_run(id);
    case agents::DeleteOutcome::Active: {
      const std::optional<agents::RunRecord> r = runner.store().get_run(id);
      throw ApiError(409,
                     "pipeline run " + id + " is " + (r ? r->status : std::string("running")) +
                         ": cancel it first (POST /v1/pipelines/" + id + "/cancel), then delete it",
                     "invalid_request_error", "run_not_finished", "id");
    }
    case agents::DeleteOutcome::Deleted: break;
  }
  reply(res, {{"id", id}, {"object", "pipeline.run"}, {"deleted", true}});
}

// SSE of the run's events from Last-Event-ID (header) or ?last_event_id; ends after "done".
void stream_events(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  agents::PipelineRunner& runner = runner_of(ctx);
  const std::string id = req.matches[1].str();
  std::string last = req.get_header_value("Last-Event-ID");
  if (last.empty() && req.has_param("last_event_id")) last = req.get_param_value("last_event_id");
  int64_t after = 0;
  if (!last.empty()) {
    try {
      after = std::stoll(last);
    } catch (const std::exception&) {
      throw bad_param("Last-Event-ID", "Last-Event-ID must be an event id (an integer)");
    }
  }
  if (!runner.wait_events(id, INT64_MAX, std::chrono::milliseconds(0)).known) throw no_run(id);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [&runner, id, after](size_t, httplib::DataSink& sink) mutable {
    auto last_write = Clock::now();
    for (;;) {
      const agents::EventBatch b = runner.wait_events(id, after, std::chrono::milliseconds(200));
      for (const auto& [seq, ev] : b.events) {
        const std::string chunk = "id: " + std::to_string(seq) + "\nevent: " + ev.value("type", "message") +
                                  "\ndata: " + dump_json(ev) + "\n\n";
        if (!sink.write(chunk.data(), chunk.size())) return false;
        last_write = Clock::now();
        after = seq;
      }
      if (b.ended && b.events.empty()) {
        sink.done();
        return true;
      }
      if (b.events.empty() && Clock::now() - last_write > std::chrono::milliseconds(1000)) {
        if (!sink.write(": keep-alive\n\n", 14)) return false;
        last_write = Clock::now();
      }
    }
  });
}

}  // namespace

void add_pipeline_routes(ServerContext& ctx) {
  GuardedHttpServer& http = ctx.http;  // its Post/Put read bodies within --max-body
  http.Post("/v1/pipelines", guarded(ctx, create_run));
  http.Get("/v1/pipelines", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const int limit = limit_param(req, 20, 1000);
    reply(res, runner_of(c).list_json(limit, req.has_param("after") ? req.get_param_value("after") : ""));
  }));
  http.Get(R"(/v1/pipelines/([A-Za-z0-9_]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> j = runner_of(c).run_json(req.matches[1].str());
    if (!j) throw no_run(req.matches[1].str());
    reply(res, *j);
  }));
  http.Get(R"(/v1/pipelines/([A-Za-z0-9_]+)/events)", guarded(ctx, stream_events));
  http.Get(R"(/v1/pipelines/([A-Za-z0-9_]+)/logs)", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const auto lines = runner_of(c).logs(req.matches[1].str());
    if (!lines) throw no_run(req.matches[1].str());
    reply(res, {{"id", req.matches[1].str()}, {"object", "list"}, {"data", *lines}});
  }));
  http.Post(R"(/v1/pipelines/([A-Za-z0-9_]+)/cancel)", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    agents::PipelineRunner& runner = runner_of(c);
    const std::string id = req.matches[1].str();
    if (!runner.cancel(id)) throw no_run(id);
    runner.wait(id, std::chrono::milliseconds(2000));  // usually ends within a step; the reply shows where it is
    const std::optional<json> j = runner.run_json(id);
    if (!j) throw no_run(id);
    reply(res, *j);
  }));
  http.Delete(R"(/v1/pipelines/([A-Za-z0-9_]+))", guarded(ctx, delete_run));
  http.Put(R"(/v1/pipeline-specs/([^/]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    agents::PipelineRunner& runner = runner_of(c);
    const std::string name = req.matches[1].str();
    if (!valid_spec_name(name))
      throw bad_param("name", "a spec name has 1-128 letters, digits, '_', '-' or '.'");
    agents::SpecJson spec = parse_spec_body(req);
    spec.erase("input");
    try {
      runner.validate(spec);
    } catch (const agents::SpecError& e) {
      throw spec_error(e);
    }
    try {
      runner.save_spec(name, spec);
    } catch (const agents::LimitExceeded& e) {
      throw_limit_error(e, res);
    }
    reply(res, {{"name", name}, {"object", "pipeline.spec"}, {"spec", spec}});
  }));
  http.Get(R"(/v1/pipeline-specs/([^/]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    const std::optional<agents::SpecJson> spec = runner_of(c).store_spec(name);
    if (!spec) throw ApiError(404, "no saved pipeline spec '" + name + "'", "invalid_request_error", "not_found", "name");
    reply(res, {{"name", name}, {"object", "pipeline.spec"}, {"spec", *spec}});
  }));
  http.Delete(R"(/v1/pipeline-specs/([^/]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    if (!runner_of(c).delete_spec(name))
      throw ApiError(404, "no saved pipeline spec '" + name + "'", "invalid_request_error", "not_found", "name");
    reply(res, {{"name", name}, {"object", "pipeline.spec"}, {"deleted", true}});
  }));
  http.Get("/v1/pipeline-specs", guarded(ctx, [](ServerContext& c, const httplib::Request&, httplib::Response& res) {
    reply(res, {{"object", "list"}, {"data", runner_of(c).spec_names()}});
  }));
}

std::string pipeline_metrics(ServerContext& ctx) {
  if (!ctx.runner) return "";
  const agents::RunnerStats s = ctx.runner->stats();
  std::string out;
  out += "# HELP spool_pipeline_runs Pipeline runs in the store by status.\n# TYPE spool_pipeline_runs gauge\n";
  for (const char* st : {"queued", "running", "completed", "failed", "cancelled"}) {
    const auto it = s.runs_by_status.find(st);
    out += std::string("spool_pipeline_runs{status=\"") + st + "\"} " +
           std::to_string(it == s.runs_by_status.end() ? 0 : it->second) + "\n";
  }
  out += "# HELP spool_pipeline_queue_length Runs waiting for a run slot (--max-runs).\n"
         "# TYPE spool_pipeline_queue_length gauge\nspool_pipeline_queue_length " + std::to_string(s.queued) + "\n";
  out += "# HELP spool_pipeline_running Runs executing now.\n# TYPE spool_pipeline_running gauge\nspool_pipeline_running " +
         std::to_string(s.running) + "\n";
  out += "# HELP spool_agent_steps_total Agent steps finished, by result.\n# TYPE spool_agent_steps_total counter\n"
         "spool_agent_steps_total{result=\"done\"} " + std::to_string(s.steps_done) + "\n"
         "spool_agent_steps_total{result=\"failed\"} " + std::to_string(s.steps_failed) + "\n";
  out += "# HELP spool_agent_retries_total Agent attempts that failed and were retried.\n"
         "# TYPE spool_agent_retries_total counter\nspool_agent_retries_total " + std::to_string(s.retries) + "\n";
  return out;
}

}  // namespace spool::server
