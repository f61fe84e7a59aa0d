// The agent runtime: runs pipelines (agents in stages) through the serving
// engine, with a durable queue in the RunStore.
//
// A run is validated and stored before submit() returns (status queued);
// `max_runs` worker threads take runs in submission order. Each agent step
// renders its prompt (template + context policy), goes to its model's engine
// as an ordinary request, and streams its tokens as events; the agents of a
// parallel stage are submitted together, so the engine's scheduler decodes
// them in one batch and their shared prompt prefix is computed once (prefix
// cache). A failed attempt is retried up to the agent's `retries`; a step
// that is done is stored with its output and never run again, which is what
// makes a run resumable after a crash (start() requeues runs left queued or
// running). Events: start / token / output / retry / failed per agent and
// done per run; all but token deltas are stored, so an SSE client can resume
// with Last-Event-ID after a restart. Ids of token deltas are handed out only
// below a mark reserved in the store, so after a crash the run's ids go on
// above every id sent before it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agents/pipeline_spec.h"
#include "agents/run_store.h"
#include "grammar/grammar_cache.h"
#include "runtime/engine.h"
#include "text/chat_template.h"

namespace spool::agents {

// A model an agent may use: its engine, chat template (null: plain text
// prompts, system prompt first) and grammar cache.
struct AgentModel {
  Engine* engine = nullptr;
  const ChatTemplate* chat_template = nullptr;
  grammar::GrammarCache* grammars = nullptr;  // compiled output_schema grammars for this model (null: none)
};
using ModelResolver = std::function<AgentModel(const std::string& alias)>;

struct RunnerOptions {
  int max_runs = 1;            // runs executing at once; the rest wait queued, in order
  bool log_to_stderr = true;   // one line per agent event on stderr (always stored with the run)
  bool kv_hints = true;        // workflow-aware KV retention hints (false: the engine's plain LRU)
  // Admission caps (serve's --max-queued-runs and --max-storage; 0: none):
  // pipeline runs and batches waiting to start, together; bytes the store holds.
  int max_queued = 0;
  uint64_t max_storage_bytes = 0;
};

// A submission over an admission cap; the server answers 429 (Queue) or 507
// (Storage). The message names the option and the numbers.
class LimitExceeded : public Error {
 public:
  enum class Kind { Queue, Storage };
  LimitExceeded(Kind kind, const std::string& what) : Error(what), kind(kind) {}
  Kind kind;
};

struct RunnerStats {
  int64_t queued = 0, running = 0;
  std::map<std::string, int64_t> runs_by_status;  // from the store
  uint64_t steps_done = 0, steps_failed = 0, retries = 0;
  // Engine requests of agent steps that ended cancelled (the run was
  // cancelled, the step timed out, the server stopped) or failed in the engine.
  uint64_t requests_cancelled = 0, requests_failed = 0;
};

// A batch of events for an SSE client.
struct EventBatch {
  std::vector<std::pair<int64_t, nlohmann::json>> events;  // (id, event)
  bool ended = false;      // the run has ended and every event up to its end is in `events` or before
  bool known = true;       // false: no such run
};

class PipelineRunner {
 public:
  PipelineRunner(RunStore& store, SpecContext models, ModelResolver resolve, RunnerOptions options);
  ~PipelineRunner();  // stops the workers; runs in flight stay "running" in the store and resume on the next start
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  // Requeues runs the store holds as queued or running, then starts the workers.
  void start();
  // Begins stopping (the destructor finishes): engine requests are cancelled,
  // runs in flight stay resumable, event streams end. Thread-safe, idempotent.
  void shutdown();

  // Validates (throws SpecError), stores and queues a run; returns its id.
  // Throws LimitExceeded when the queue or the store is full.
  std::string submit(const SpecJson& spec, const std::string& input);
  // Validates a spec without running it (throws SpecError).
  PipelineSpec validate(const SpecJson& spec) const;

  // false: unknown run. A queued run ends at once; a running one as soon as
  // its engine requests are cancelled (their KV blocks are freed then).
  bool cancel(const std::string& id);

  // GET /v1/pipelines/{id}: nullopt for an unknown id.
  std::optional<nlohmann::json> run_json(const std::string& id);
  nlohmann::json list_json(int limit, const std::string& after_id);
  std::optional<std::vector<std::string>> logs(const std::string& id);
  // Events with id > after, waiting up to `timeout` for the first one.
  EventBatch wait_events(const std::string& id, int64_t after, std::chrono::milliseconds timeout);
  // Blocks until the run has ended or `timeout` passes; returns its status ("" unknown).
  std::string wait(const std::string& id, std::chrono::milliseconds timeout);

  // Removes an ended run and everything stored with it (DELETE /v1/pipelines/{id});
  // a queued or running one is left (Active): cancel it first.
  DeleteOutcome remove(const std::string& id);

  // Saved specs (PUT/GET/DELETE /v1/pipeline-specs); save_spec throws LimitExceeded (storage).
  void save_spec(const std::string& name, const SpecJson& spec);
  std::optional<SpecJson> store_spec(const std::string& name) { return store_.get_spec(name); }
  std::vector<std::string> spec_names() { return store_.spec_names(); }
  bool delete_spec(const std::string& name) { return store_.delete_spec(name); }

  // Admission, shared with the Batch API. A queue slot is taken when a run or
  // batch is queued and given back when it starts (or is cancelled while
  // queued); take_queue_slot throws LimitExceeded when max_queued are taken
  // (`force`: counted but never refused, for what a restart requeues).
  void take_queue_slot(bool force = false);
  void return_queue_slot();
  // Throws LimitExceeded when the store plus `adding` bytes would pass max_storage_bytes.
  void check_storage(uint64_t adding);

  RunnerStats stats();
  const RunnerOptions& options() const { return options_; }
  RunStore& store() { return store_; }

  struct Run;  // per-run state (pipeline_runner.cpp)

 private:
  void worker();
  void execute(const std::shared_ptr<Run>& run);
  void finish(const std::shared_ptr<Run>& run, const std::string& status, const std::string& error);
  std::shared_ptr<Run> find(const std::string& id);
  std::shared_ptr<Run> make_run(const RunRecord& rec);
  void forget_finished();
  // Hints the engines with the first stages of the queued runs (farther than any running run's).
  void hint_queued();

  RunStore& store_;
  SpecContext models_;
  ModelResolver resolve_;
  RunnerOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Run>> queue_;
  std::map<std::string, std::shared_ptr<Run>> runs_;   // queued, running and recently finished
  std::deque<std::string> finished_order_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  int running_ = 0;
  int queue_slots_ = 0;                // runs and batches queued (take_queue_slot)
  std::mutex hint_mu_;                 // orders hint_queued() calls
  std::set<Engine*> queued_hinted_;    // engines holding the queued runs' hints
  std::atomic<uint64_t> steps_done_{0}, steps_failed_{0}, retries_{0};
  std::atomic<uint64_t> requests_cancelled_{0}, requests_failed_{0};
  friend class RunExecutor;
};

// "run_" + 24 random hex digits.
std::string new_run_id(const char* prefix = "run_");

}  // namespace spool::agents
