// The durable run queue, the worker threads, and the read side (run status,
// lists, logs, event streams). Execution itself: run_executor.cpp.
#include "agents/pipeline_runner.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "agents/kv_hints.h"
#include "agents/run_state.h"
#include "core/error.h"

namespace spool::agents {

using nlohmann::json;

namespace {

constexpr size_t kFinishedKept = 64;  // finished runs whose token events stay in memory

bool terminal(const std::string& status) { return status == "completed" || status == "failed" || status == "cancelled"; }

json step_json(const StepRecord& s) {
  json j{{"name", s.agent},        {"round", s.round},           {"status", s.status},
         {"output", s.output},     {"attempts", s.attempts},     {"tokens", s.tokens},
         {"prompt_tokens", s.prompt_tokens}, {"cached_tokens", s.cached_tokens},
         {"started_at", s.started_at},       {"finished_at", s.finished_at > 0 ? json(s.finished_at) : json(nullptr)}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

// "512 B", "3.2 MiB", "1.00 GiB": sizes in limit messages.
std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

json run_summary(const RunRecord& r) {
  json j{{"id", r.id},
         {"object", "pipeline.run"},
         {"status", r.status},
         {"name", r.spec.is_object() ? r.spec.value("name", "") : ""},
         {"created_at", r.created_at},
         {"started_at", r.started_at > 0 ? json(r.started_at) : json(nullptr)},
         {"finished_at", r.finished_at > 0 ? json(r.finished_at) : json(nullptr)}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

}  // namespace

std::string new_run_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)rng(), (unsigned long long)(rng() & 0xffffffffu));
  return std::string(prefix) + buf;
}

PipelineRunner::PipelineRunner(RunStore& store, SpecContext models, ModelResolver resolve, RunnerOptions options)
    : store_(store), models_(std::move(models)), resolve_(std::move(resolve)), options_(options) {
  if (options_.max_runs < 1) throw Error("--max-runs must be at least 1");
}

PipelineRunner::~PipelineRunner() {
  shutdown();
  for (std::thread& t : workers_) t.join();
}

void PipelineRunner::shutdown() {
  std::vector<std::shared_ptr<Run>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [id, r] : runs_) live.push_back(r);
  }
  cv_.notify_all();
  for (auto& r : live) {
    r->cancel_requests();
    r->cv.notify_all();
  }
}

PipelineSpec PipelineRunner::validate(const SpecJson& spec) const { return parse_pipeline_spec(spec, models_); }

std::shared_ptr<PipelineRunner::Run> PipelineRunner::make_run(const RunRecord& rec) {
  auto run = std::make_shared<Run>();
  run->id = rec.id;
  run->spec_json = rec.spec;
  run->input = rec.input;
  run->status = rec.status;
  // Above every id an earlier process may have sent, token deltas included (never stored).
  run->next_seq = run->base_seq = run->reserved_seq = store_.event_seq_floor(rec.id);
  return run;
}

void PipelineRunner::start() {
  // Runs a crash left running resume from their last completed step; queued ones keep their place.
  std::vector<RunRecord> pending = store_.runs_with_status("pipeline", "running");
  for (RunRecord& r : store_.runs_with_status("pipeline", "queued")) pending.push_back(std::move(r));
  std::sort(pending.begin(), pending.end(), [](const RunRecord& a, const RunRecord& b) { return a.seq < b.seq; });
  for (const RunRecord& rec : pending) {
    auto run = make_run(rec);
    try {
      run->spec = parse_pipeline_spec(rec.spec, models_);
    } catch (const SpecError& e) {  // e.g. restarted without a model the run names
      store_.set_run_status(rec.id, "failed", std::string("after restart: ") + e.what());
      store_.add_log(rec.id, "[run:" + rec.id + "] FAILED after restart: " + e.what());
      continue;
    }
    if (rec.status == "running") {
      store_.set_run_status(rec.id, "queued");
      const std::string line = "[run:" + rec.id + "] RESUMED after restart (finished steps are kept)";
      store_.add_log(rec.id, line);
      if (options_.log_to_stderr) std::fprintf(stderr, "%s\n", line.c_str());
      run->status = "queued";
    }
    take_queue_slot(true);
    std::lock_guard<std::mutex> lock(mu_);
    runs_[run->id] = run;
    queue_.push_back(run);
  }
  hint_queued();
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < options_.max_runs; ++i) workers_.emplace_back([this] { worker(); });
  cv_.notify_all();
}

std::string PipelineRunner::submit(const SpecJson& spec_json, const std::string& input) {
  SpecJson spec = spec_json;
  spec.erase("input");
  auto run = std::make_shared<Run>();
  run->spec = parse_pipeline_spec(spec, models_);  // throws SpecError before anything is stored
  const std::string spec_text = spec.dump();
  check_storage(spec_text.size() + input.size());
  take_queue_slot();
  struct SlotGuard {  // given back unless the run is queued
    PipelineRunner* r;
    ~SlotGuard() { if (r) r->return_queue_slot(); }
  } slot{this};
  run->id = new_run_id();
  run->spec_json = spec;
  run->input = input;
  RunRecord rec;
  rec.id = run->id;
  rec.spec = spec;
  rec.input = input;
  rec.status = "queued";
  store_.create_run(rec);
  store_.add_log(run->id, "[run:" + run->id + "] QUEUED");
  if (options_.log_to_stderr) std::fprintf(stderr, "[run:%s] QUEUED\n", run->id.c_str());
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_[run->id] = run;
    queue_.push_back(run);
    slot.r = nullptr;
  }
  cv_.notify_one();
  hint_queued();
  return run->id;
}

void PipelineRunner::take_queue_slot(bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!force && options_.max_queued > 0 && queue_slots_ >= options_.max_queued)
    throw LimitExceeded(LimitExceeded::Kind::Queue,
                        "too many queued runs: " + std::to_string(queue_slots_) +
                            " pipeline runs and batches are waiting to start, the limit set by --max-queued-runs " +
                            std::to_string(options_.max_queued) + "; retry when some have started, or cancel some");
  ++queue_slots_;
}

void PipelineRunner::return_queue_slot() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_slots_ > 0) --queue_slots_;
}

void PipelineRunner::check_storage(uint64_t adding) {
  if (options_.max_storage_bytes == 0) return;
  const uint64_t used = store_.used_bytes();
  if (used + adding <= options_.max_storage_bytes) return;
  throw LimitExceeded(LimitExceeded::Kind::Storage,
                      "storage limit reached: the data dir holds " + human_bytes(used) + " of --max-storage " +
                          human_bytes(options_.max_storage_bytes) + " and this needs " + human_bytes(adding) +
                          " more; delete finished pipeline runs, batches, files or saved specs (DELETE on their "
                          "routes) or raise --max-storage");
}

void PipelineRunner::save_spec(const std::string& name, const SpecJson& spec) {
  check_storage(spec.dump().size());
  store_.put_spec(name, spec);
}

DeleteOutcome PipelineRunner::remove(const std::string& id) {
  const DeleteOutcome d = store_.delete_run(id, "pipeline");
  if (d == DeleteOutcome::Deleted) {  // an ended run kept in memory for its token events goes too
    std::lock_guard<std::mutex> lock(mu_);
    runs_.erase(id);
    finished_order_.erase(std::remove(finished_order_.begin(), finished_order_.end(), id), finished_order_.end());
  }
  return d;
}

void PipelineRunner::worker() {
  for (;;) {
    std::shared_ptr<Run> run;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      run = queue_.front();
      queue_.pop_front();
      if (queue_slots_ > 0) --queue_slots_;
      ++running_;
    }
    hint_queued();
    execute(run);
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
}

void PipelineRunner::execute(const std::shared_ptr<Run>& run) {
  if (run->cancelled) {
    finish(run, "cancelled", "");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(run->mu);
    run->status = "running";
  }
  store_.set_run_status(run->id, "running");
  const std::string line = "[run:" + run->id + "] RUNNING";
  store_.add_log(run->id, line);
  if (options_.log_to_stderr) std::fprintf(stderr, "%s\n", line.c_str());
  try {
    RunExecutor(*this, run).execute();
    finish(run, "completed", "");
  } catch (const RunCancelled&) {
    finish(run, "cancelled", "");
  } catch (const RunStopping&) {
    // Left "running" in the store: the next start resumes it.
  } catch (const RunFailed& e) {
    finish(run, "failed", e.reason);
  } catch (const std::exception& e) {
    finish(run, "failed", std::string("internal error: ") + e.what());
  }
}

void PipelineRunner::finish(const std::shared_ptr<Run>& run, const std::string& status, const std::string& error) {
  std::string line = "[run:" + run->id + "] " + (status == "completed" ? "COMPLETED" : status == "failed" ? "FAILED" : "CANCELLED");
  if (!error.empty()) line += ": " + error;
  json ev{{"type", "done"}, {"status", status}};
  if (!error.empty()) ev["error"] = error;
  {
    std::lock_guard<std::mutex> order(run->record_mu);
    int64_t seq;
    {
      std::lock_guard<std::mutex> lock(run->mu);
      seq = run->next_seq + 1;
    }
    store_.finish_run(run->id, status, error, line, seq, ev);
    std::lock_guard<std::mutex> lock(run->mu);
    run->next_seq = seq;
    run->events.emplace_back(seq, ev);
    run->ended = true;
    run->status = status;
  }
  if (options_.log_to_stderr) std::fprintf(stderr, "%s\n", line.c_str());
  run->cv.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  finished_order_.push_back(run->id);
  forget_finished();
}

void PipelineRunner::forget_finished() {
  while (finished_order_.size() > kFinishedKept) {
    runs_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

std::shared_ptr<PipelineRunner::Run> PipelineRunner::find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = runs_.find(id);
  return it == runs_.end() ? nullptr : it->second;
}

bool PipelineRunner::cancel(const std::string& id) {
  std::shared_ptr<Run> run = find(id);
  if (!run) {  // ended long ago (nothing to do), or not a pipeline run
    const std::optional<RunRecord> rec = store_.get_run(id);
    return rec && rec->kind == "pipeline";
  }
  run->cancelled = true;
  bool was_queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (*it == run) {
        queue_.erase(it);
        if (queue_slots_ > 0) --queue_slots_;
        was_queued = true;
        break;
      }
  }
  if (was_queued) {
    finish(run, "cancelled", "");
    hint_queued();
  } else {
    run->cancel_requests();
  }
  return true;
}

// Queued runs' hints: the known prefixes of each one's first stages, next use
// beyond any running run's look-ahead and one further per place in the queue.
void PipelineRunner::hint_queued() {
  if (!options_.kv_hints) return;
  constexpr uint64_t kQueuedOwner = ~0ull;  // RunExecutor owners count up from 1
  constexpr size_t kMaxQueued = 8;
  std::lock_guard<std::mutex> order(hint_mu_);
  std::vector<std::shared_ptr<Run>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < queue_.size() && i < kMaxQueued; ++i) queued.push_back(queue_[i]);
  }
  std::map<Engine*, std::vector<PrefixHint>> by_engine;
  for (Engine* e : queued_hinted_) by_engine[e];
  for (size_t q = 0; q < queued.size(); ++q) {
    const std::vector<PlanItem> plan = unroll_stages(queued[q]->spec);
    add_run_hints(RunView{&queued[q]->spec, queued[q]->input, &plan, {}}, resolve_, 0, 0,
                  (int)(kHintLookahead + 1 + q), by_engine);
  }
  for (auto& [engine, hints] : by_engine) {
    if (!hints.empty()) queued_hinted_.insert(engine);
    engine->set_hints(kQueuedOwner, std::move(hints));
  }
}

std::optional<json> PipelineRunner::run_json(const std::string& id) {
  const std::optional<RunRecord> rec = store_.get_run(id);
  if (!rec || rec->kind != "pipeline") return std::nullopt;
  json j = run_summary(*rec);
  j["input"] = rec->input;
  j["spec"] = rec->spec;  // as submitted (lets a client draw the stages of a run it did not start)
  json agents = json::array();
  const std::vector<StepRecord> steps = store_.steps(id);
  // Agents with an output_schema: their outputs are given parsed too ("output_json").
  std::set<std::string> structured;
  if (rec->spec.is_object() && rec->spec.contains("agents") && rec->spec["agents"].is_array())
    for (const auto& a : rec->spec["agents"])
      if (a.is_object() && a.contains("output_schema") && a["name"].is_string()) structured.insert(a["name"].get<std::string>());
  for (const StepRecord& s : steps) {
    json sj = step_json(s);
    if (s.status == "done" && structured.count(step_agent(s.agent))) {
      json parsed = json::parse(s.output, nullptr, false);
      if (!parsed.is_discarded()) sj["output_json"] = std::move(parsed);
    }
    agents.push_back(std::move(sj));
  }
  // Agents that have not started yet (first round), so a client sees the whole pipeline.
  if (const std::shared_ptr<Run> run = find(id)) {
    for (const Stage& stage : run->spec.stages)
      for (const std::string& name : stage_agents(stage)) {
        const bool started = std::any_of(steps.begin(), steps.end(), [&](const StepRecord& s) { return step_agent(s.agent) == name; });
        if (!started) agents.push_back({{"name", name}, {"round", 1}, {"status", terminal(rec->status) ? "skipped" : "pending"},
                                        {"output", nullptr}, {"attempts", 0}, {"tokens", 0}});
      }
  }
  j["agents"] = agents;
  return j;
}

json PipelineRunner::list_json(int limit, const std::string& after_id) {
  bool more = false;
  const std::vector<RunRecord> runs = store_.page("pipeline", limit, after_id, more);
  json data = json::array();
  for (const RunRecord& r : runs) data.push_back(run_summary(r));
  return json{{"object", "list"},
              {"data", data},
              {"first_id", runs.empty() ? json(nullptr) : json(runs.front().id)},
              {"last_id", runs.empty() ? json(nullptr) : json(runs.back().id)},
              {"has_more", more}};
}

std::optional<std::vector<std::string>> PipelineRunner::logs(const std::string& id) {
  const std::optional<RunRecord> rec = store_.get_run(id);
  if (!rec || rec->kind != "pipeline") return std::nullopt;
  return store_.logs(id);
}

EventBatch PipelineRunner::wait_events(const std::string& id, int64_t after, std::chrono::milliseconds timeout) {
  EventBatch b;
  if (std::shared_ptr<Run> run = find(id)) {
    // Events from before this process started (a restart) are only in the store.
    if (after < run->base_seq) {
      for (auto& e : store_.events(id, after))
        if (e.first <= run->base_seq) b.events.push_back(std::move(e));
      if (!b.events.empty()) return b;
      after = run->base_seq;
    }
    std::unique_lock<std::mutex> lock(run->mu);
    const auto has_new = [&] { return run->ended || (!run->events.empty() && run->events.back().first > after); };
    run->cv.wait_for(lock, timeout, has_new);
    for (const auto& e : run->events)
      if (e.first > after) b.events.push_back(e);
    b.ended = run->ended;
    lock.unlock();
    std::lock_guard<std::mutex> stop_lock(mu_);
    if (stopping_) b.ended = true;  // the server is going down: end the stream (resumable after the restart)
    return b;
  }
  const std::optional<RunRecord> rec = store_.get_run(id);
  if (!rec || rec->kind != "pipeline") {
    b.known = false;
    b.ended = true;  // e.g. deleted while a client streamed it: its stream ends
    return b;
  }
  b.events = store_.events(id, after);
  b.ended = terminal(rec->status);
  return b;
}

std::string PipelineRunner::wait(const std::string& id, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (std::shared_ptr<Run> run = find(id)) {
    std::unique_lock<std::mutex> lock(run->mu);
    run->cv.wait_until(lock, deadline, [&] { return run->ended; });
    return run->status;
  }
  const std::optional<RunRecord> rec = store_.get_run(id);
  return rec ? rec->status : "";
}

RunnerStats PipelineRunner::stats() {
  RunnerStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = (int64_t)queue_.size();
    s.running = running_;
  }
  s.runs_by_status = store_.count_runs("pipeline");
  s.steps_done = steps_done_;
  s.steps_failed = steps_failed_;
  s.retries = retries_;
  s.requests_cancelled = requests_cancelled_;
  s.requests_failed = requests_failed_;
  return s;
}

}  // namespace spool::agents
