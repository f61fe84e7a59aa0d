#include "server/batch_runner.h"

#include <chrono>
#include <cstdio>
#include <map>

#include <httplib.h>

#include "agents/pipeline_runner.h"
#include "server/json_depth.h"
#include "server/openai_format.h"
#include "server/server_context.h"

namespace spool::server {

using agents::RunRecord;
using agents::StepRecord;

namespace {

struct BatchLine {
  std::string custom_id;
  json body;
};

Endpoint endpoint_of(const std::string& url) {
  return url == "/v1/chat/completions" ? Endpoint::ChatCompletions : Endpoint::Completions;
}

// Parses and checks every line; throws ApiError naming the line.
std::vector<BatchLine> parse_lines(const std::string& content, const std::string& endpoint) {
  std::vector<BatchLine> out;
  std::set<std::string> ids;
  size_t start = 0;
  for (int line_no = 1; start < content.size(); ++line_no) {
    size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string line = content.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = "input file line " + std::to_string(line_no) + ": ";
    if (json_depth_exceeded_at(line) != std::string_view::npos)
      throw bad_param("input_file_id", where + "nested deeper than " + std::to_string(kMaxJsonDepth) + " arrays/objects",
                      "invalid_batch_file");
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw bad_param("input_file_id", where + "not a JSON object", "invalid_batch_file");
    if (!j.contains("custom_id") || !j["custom_id"].is_string() || j["custom_id"].get<std::string>().empty())
      throw bad_param("input_file_id", where + "'custom_id' must be a non-empty string", "invalid_batch_file");
    const std::string cid = j["custom_id"].get<std::string>();
    if (!ids.insert(cid).second)
      throw bad_param("input_file_id", where + "duplicate custom_id '" + cid + "'", "invalid_batch_file");
    // Fields of the wrong type are the client's mistake too (a 400 naming them, never a JSON type error's 500).
    const auto has = [](const json& o, const char* key) { return o.contains(key) && !o[key].is_null(); };
    if (has(j, "method") && (!j["method"].is_string() || j["method"].get<std::string>() != "POST"))
      throw bad_param("input_file_id", where + "'method' must be the string \"POST\"", "invalid_batch_file");
    if (!j.contains("url") || !j["url"].is_string() || j["url"].get<std::string>() != endpoint)
      throw bad_param("input_file_id", where + "'url' must be the batch's endpoint " + endpoint, "invalid_batch_file");
    if (!j.contains("body") || !j["body"].is_object())
      throw bad_param("input_file_id", where + "'body' must be a JSON object", "invalid_batch_file");
    const json& body = j["body"];
    if (has(body, "stream") && !body["stream"].is_boolean())
      throw bad_param("input_file_id", where + "'body.stream' must be a boolean (and false: a batch does not stream)",
                      "invalid_batch_file");
    if (has(body, "stream") && body["stream"].get<bool>())
      throw bad_param("input_file_id", where + "streaming is not available in a batch", "invalid_batch_file");
    out.push_back({cid, j["body"]});
  }
  if (out.empty()) throw bad_param("input_file_id", "the input file has no requests", "invalid_batch_file");
  if (out.size() > 50000) throw bad_param("input_file_id", "a batch holds at most 50000 requests", "invalid_batch_file");
  return out;
}

json ts_or_null(double t) { return t > 0 ? json((int64_t)t) : json(nullptr); }

}  // namespace

BatchRunner::BatchRunner(ApiServer::Context& ctx, agents::RunStore& store) : ctx_(ctx), store_(store) {}

BatchRunner::~BatchRunner() {
  shutdown();
  if (worker_.joinable()) worker_.join();
}

void BatchRunner::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void BatchRunner::start() {
  std::vector<RunRecord> pending;
  for (const char* st : {"validating", "in_progress", "finalizing", "cancelling"})
    for (RunRecord& r : store_.runs_with_status("batch", st)) pending.push_back(std::move(r));
  std::sort(pending.begin(), pending.end(), [](const RunRecord& a, const RunRecord& b) { return a.seq < b.seq; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RunRecord& r : pending) {
      if (r.status == "cancelling") cancelling_.insert(r.id);
      ctx_.runner->take_queue_slot(true);  // counted, never refused: it was accepted before the restart
      queue_.push_back(r.id);
      std::fprintf(stderr, "[batch:%s] RESUMED after restart (%s)\n", r.id.c_str(), r.status.c_str());
    }
  }
  worker_ = std::thread([this] { worker(); });
}

json BatchRunner::create(const std::string& input_file_id, const std::string& endpoint,
                         const std::string& completion_window, const json& metadata) {
  if (endpoint != "/v1/completions" && endpoint != "/v1/chat/completions")
    throw bad_param("endpoint", "endpoint must be /v1/completions or /v1/chat/completions");
  if (completion_window != "24h") throw bad_param("completion_window", "completion_window must be '24h'");
  const std::optional<agents::FileRecord> f = store_.get_file(input_file_id);
  if (!f) throw ApiError(404, "no file '" + input_file_id + "'", "invalid_request_error", "not_found", "input_file_id");
  if (f->purpose != "batch") throw bad_param("input_file_id", "the file's purpose is '" + f->purpose + "', not 'batch'");
  const std::optional<std::string> content = store_.file_content(input_file_id);
  if (!content) throw ApiError(404, "no file '" + input_file_id + "'", "invalid_request_error", "not_found", "input_file_id");
  const std::vector<BatchLine> lines = parse_lines(*content, endpoint);
  RunRecord r;
  r.id = agents::new_run_id("batch_");
  r.kind = "batch";
  r.spec = json{{"endpoint", endpoint}, {"input_file_id", input_file_id}, {"completion_window", completion_window},
                {"metadata", metadata}, {"total", lines.size()}};
  r.status = "validating";
  agents::PipelineRunner& admission = *ctx_.runner;  // the caps pipelines and batches share
  admission.check_storage(r.spec.dump().size());
  admission.take_queue_slot();
  try {
    store_.create_run(r);
  } catch (...) {
    admission.return_queue_slot();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(r.id);
  }
  cv_.notify_one();
  std::fprintf(stderr, "[batch:%s] QUEUED %zu requests\n", r.id.c_str(), lines.size());
  return batch_json(*store_.get_run(r.id));
}

json BatchRunner::batch_json(const RunRecord& r) {
  const json& s = r.spec;
  int completed = 0, failed = 0;
  for (const StepRecord& st : store_.steps(r.id)) (st.status == "done" ? completed : failed)++;
  json j{{"id", r.id},
         {"object", "batch"},
         {"endpoint", s.value("endpoint", "")},
         {"errors", nullptr},
         {"input_file_id", s.value("input_file_id", "")},
         {"completion_window", s.value("completion_window", "24h")},
         {"status", r.status},
         {"output_file_id", s.contains("output_file_id") ? s["output_file_id"] : json(nullptr)},
         {"error_file_id", s.contains("error_file_id") ? s["error_file_id"] : json(nullptr)},
         {"created_at", (int64_t)r.created_at},
         {"in_progress_at", ts_or_null(r.started_at)},
         {"expires_at", (int64_t)r.created_at + 24 * 3600},
         {"finalizing_at", nullptr},
         {"completed_at", r.status == "completed" ? ts_or_null(r.finished_at) : json(nullptr)},
         {"failed_at", r.status == "failed" ? ts_or_null(r.finished_at) : json(nullptr)},
         {"expired_at", nullptr},
         {"cancelling_at", nullptr},
         {"cancelled_at", r.status == "cancelled" ? ts_or_null(r.finished_at) : json(nullptr)},
         {"request_counts", {{"total", s.value("total", 0)}, {"completed", completed}, {"failed", failed}}},
         {"metadata", s.contains("metadata") ? s["metadata"] : json(nullptr)}};
  if (!r.error.empty()) j["errors"] = {{"object", "list"}, {"data", json::array({{{"code", "batch_failed"}, {"message", r.error}}})}};
  return j;
}

std::optional<json> BatchRunner::get(const std::string& id) {
  const std::optional<RunRecord> r = store_.get_run(id);
  if (!r || r->kind != "batch") return std::nullopt;
  return batch_json(*r);
}

json BatchRunner::list(int limit, const std::string& after) {
  bool more = false;
  const std::vector<RunRecord> runs = store_.page("batch", limit, after, more);
  json data = json::array();
  for (const RunRecord& r : runs) data.push_back(batch_json(r));
  return json{{"object", "list"},
              {"data", data},
              {"first_id", runs.empty() ? json(nullptr) : json(runs.front().id)},
              {"last_id", runs.empty() ? json(nullptr) : json(runs.back().id)},
              {"has_more", more}};
}

std::optional<json> BatchRunner::remove(const std::string& id) {
  const std::optional<RunRecord> r = store_.get_run(id);
  if (!r || r->kind != "batch") return std::nullopt;
  // Its output and error files were made by it: they go with it (the input file is the client's).
  std::vector<std::string> files;
  for (const char* key : {"output_file_id", "error_file_id"})
    if (r->spec.contains(key) && r->spec[key].is_string()) files.push_back(r->spec[key].get<std::string>());
  switch (store_.delete_run(id, "batch", files)) {
    case agents::DeleteOutcome::NotFound: return std::nullopt;
    case agents::DeleteOutcome::Active:
      throw ApiError(409,
                     "batch " + id + " is " + r->status + ": cancel it first (POST /v1/batches/" + id +
                         "/cancel) and delete it once its status is cancelled",
                     "invalid_request_error", "batch_not_finished", "batch_id");
    case agents::DeleteOutcome::Deleted: break;
  }
  std::fprintf(stderr, "[batch:%s] DELETED\n", id.c_str());
  return json{{"id", id}, {"object", "batch"}, {"deleted", true}, {"deleted_files", files}};
}

std::string BatchRunner::input_of_unfinished(const std::string& file_id) {
  for (const char* st : {"validating", "in_progress", "finalizing", "cancelling"})
    for (const RunRecord& r : store_.runs_with_status("batch", st))
      if (r.spec.value("input_file_id", "") == file_id) return r.id;
  return "";
}

void throw_limit_error(const agents::LimitExceeded& e, httplib::Response& res) {
  if (e.kind == agents::LimitExceeded::Kind::Queue)
    throw ApiError(429, e.what(), "rate_limit_error", "too_many_queued_runs");
  // A client would retry a 5xx, but the store stays full until something is deleted.
  res.set_header("x-should-retry", "false");
  throw ApiError(507, e.what(), "server_error", "storage_limit_exceeded");
}

std::optional<json> BatchRunner::cancel(const std::string& id) {
  const std::optional<RunRecord> r = store_.get_run(id);
  if (!r || r->kind != "batch") return std::nullopt;
  if (r->status == "validating" || r->status == "in_progress" || r->status == "finalizing") {
    store_.set_run_status(id, "cancelling");
    std::lock_guard<std::mutex> lock(mu_);
    cancelling_.insert(id);
  }
  cv_.notify_all();
  return batch_json(*store_.get_run(id));
}

void BatchRunner::worker() {
  for (;;) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
    }
    ctx_.runner->return_queue_slot();
    try {
      execute(id);
    } catch (const std::exception& e) {
      store_.set_run_status(id, "failed", std::string("internal error: ") + e.what());
      std::fprintf(stderr, "[batch:%s] FAILED: %s\n", id.c_str(), e.what());
    }
  }
}

void BatchRunner::execute(const std::string& id) {
  const std::optional<RunRecord> rec = store_.get_run(id);
  if (!rec) return;  // deleted while queued (it had ended: a cancelled one)
  RunRecord r = *rec;
  const std::string endpoint = r.spec.value("endpoint", "/v1/completions");
  const Endpoint ep = endpoint_of(endpoint);
  const std::string input_file_id = r.spec.value("input_file_id", "");
  const std::optional<std::string> content = store_.file_content(input_file_id);
  if (!content) {  // deleted in the moment between the check in DELETE /v1/files and this batch's creation
    store_.set_run_status(id, "failed", "the input file " + input_file_id + " was deleted before the batch ran");
    std::fprintf(stderr, "[batch:%s] FAILED: its input file %s was deleted\n", id.c_str(), input_file_id.c_str());
    return;
  }
  const std::vector<BatchLine> lines = parse_lines(*content, endpoint);
  std::map<std::string, StepRecord> done;  // by custom_id: finished before a restart
  for (StepRecord& st : store_.steps(id)) done.emplace(st.agent, std::move(st));
  if (r.status != "cancelling") store_.set_run_status(id, "in_progress");
  std::fprintf(stderr, "[batch:%s] RUNNING %zu requests (%zu done before)\n", id.c_str(), lines.size(), done.size());

  struct InFlight {
    size_t line;
    Engine* engine = nullptr;
    RequestId rid;
    ResponseMeta meta;
    Generation g;
    double started = 0;
  };
  struct Box {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<size_t, RequestEvent>> events;
  };
  auto box = std::make_shared<Box>();
  std::map<size_t, InFlight> in_flight;
  const size_t window = (size_t)std::max(1, ctx_.engine.options().max_running);
  const auto is_cancelling = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelling_.count(id) > 0;
  };
  const auto is_stopping = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  };
  const auto record = [&](size_t i, int status_code, const json& body, const std::string& request_id) {
    StepRecord st;
    st.agent = lines[i].custom_id;
    st.ord = (int)i;
    st.status = status_code == 200 ? "done" : "failed";
    json out{{"id", "batch_req_" + agents::new_run_id("").substr(0, 24)},
             {"custom_id", lines[i].custom_id},
             {"response", {{"status_code", status_code}, {"request_id", request_id}, {"body", body}}},
             {"error", nullptr}};
    st.output = dump_json(out);  // model text may hold bytes that are not UTF-8: replaced, not an exception
    st.finished_at = agents::unix_now();
    store_.put_step(id, st);
    done.emplace(st.agent, st);
  };

  size_t next = 0;
  bool cancelled = false;
  while (true) {
    cancelled = cancelled || is_cancelling();
    if (is_stopping()) {  // shutting down: leave it resumable
      for (auto& [i, f] : in_flight) f.engine->cancel(f.rid);
      return;
    }
    if (cancelled) {
      for (auto& [i, f] : in_flight) f.engine->cancel(f.rid);
    }
    // Fill the window.
    while (!cancelled && in_flight.size() < window && next < lines.size()) {
      const size_t i = next;
      if (done.count(lines[i].custom_id)) {
        ++next;
        continue;
      }
      InFlight f;
      f.line = i;
      f.meta.endpoint = ep;
      f.meta.id = new_response_id(ep);
      f.meta.created = (int64_t)std::time(nullptr);
      try {
        const ApiRequest api = parse_api_request(lines[i].body, ep);
        ServedModel& served = resolve_model(ctx_, api.model);
        f.meta.model = served.id;
        f.engine = served.engine;
        f.meta.logprobs = api.top_logprobs >= 0;
        f.meta.tools = ep == Endpoint::ChatCompletions && api.structured.tools_active();  // tool_calls in the output line
        f.meta.tool_style = tool_call_style(served.chat_template.get(), api.structured);
        RequestParams p = to_request_params(api, served.prompt_context());
        f.rid = served.engine->submit(std::move(p), [box, i](const RequestEvent& ev) {
          {
            std::lock_guard<std::mutex> lock(box->mu);
            box->events.emplace_back(i, ev);
          }
          box->cv.notify_one();
        });
      } catch (const QueueFull&) {
        break;  // the engine's queue is full: wait for room
      } catch (const ApiError& e) {
        record(i, e.status, error_json(e), f.meta.id);
        ++next;
        continue;
      } catch (const InvalidRequest& e) {
        record(i, 400, error_json(ApiError(400, e.what(), "invalid_request_error", "invalid_request")), f.meta.id);
        ++next;
        continue;
      } catch (const nlohmann::json::exception& e) {  // a body field of the wrong type: the client's mistake
        record(i, 400, error_json(ApiError(400, std::string("invalid request body: ") + e.what(), "invalid_request_error",
                                           "invalid_request")),
               f.meta.id);
        ++next;
        continue;
      }
      in_flight.emplace(i, std::move(f));
      ++next;
    }
    if (in_flight.empty() && (next >= lines.size() || cancelled)) break;
    std::vector<std::pair<size_t, RequestEvent>> evs;
    {
      std::unique_lock<std::mutex> lock(box->mu);
      box->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !box->events.empty(); });
      evs.swap(box->events);
    }
    for (const auto& [i, ev] : evs) {
      auto it = in_flight.find(i);
      if (it == in_flight.end()) continue;
      it->second.g.add(ev);
      if (!ev.finished) continue;
      const InFlight& f = it->second;
      if (f.g.reason == FinishReason::Cancelled) {
        // not recorded: cancelled (or shutting down) before it finished
        ++ctx_.outcomes.batch_cancelled;
      } else if (f.g.reason == FinishReason::Error) {
        ++ctx_.outcomes.batch_failed;
        record(i, 500, error_json(ApiError(500, "generation failed: " + f.g.error, "server_error", "engine_error")),
               f.meta.id);
      } else {
        Engine* engine = f.engine;
        const TokenText text = [engine](int32_t t) { return engine->model().tokenizer().token_to_piece(t); };
        record(i, 200, completion_response(f.meta, f.g, text), f.meta.id);
      }
      in_flight.erase(it);
    }
  }

  // Output and error files, in input order.
  std::string output, errors;
  int n_ok = 0, n_err = 0;
  for (const BatchLine& l : lines) {
    const auto it = done.find(l.custom_id);
    if (it == done.end()) continue;
    (it->second.status == "done" ? output : errors) += it->second.output + "\n";
    (it->second.status == "done" ? n_ok : n_err)++;
  }
  r = *store_.get_run(id);
  json spec = r.spec;
  const auto put = [&](const std::string& content, const char* suffix) {
    agents::FileRecord f;
    f.id = agents::new_run_id("file-");
    f.filename = id + suffix;
    f.purpose = "batch_output";
    store_.put_file(f, content);
    return f.id;
  };
  if (!output.empty()) spec["output_file_id"] = put(output, "_output.jsonl");
  if (!errors.empty()) spec["error_file_id"] = put(errors, "_error.jsonl");
  store_.set_run_spec(id, spec);
  store_.set_run_status(id, cancelled ? "cancelled" : "completed");
  std::lock_guard<std::mutex> lock(mu_);
  cancelling_.erase(id);
  std::fprintf(stderr, "[batch:%s] %s: %d completed, %d failed\n", id.c_str(), cancelled ? "CANCELLED" : "COMPLETED",
               n_ok, n_err);
}

}  // namespace spool::server
