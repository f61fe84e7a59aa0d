// Internal to src/agents: the in-memory state of one run (events for SSE
// clients, the cancel flag, the engine requests in flight) and the executor
// that walks its stages.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agents/agent_output.h"
#include "agents/kv_hints.h"
#include "agents/pipeline_runner.h"

namespace spool::agents {

struct PipelineRunner::Run {
  std::string id;
  SpecJson spec_json;
  PipelineSpec spec;
  std::string input;
  std::atomic<bool> cancelled{false};
  int64_t base_seq = 0;  // events up to this id were stored by an earlier process (restart)

  std::mutex record_mu;  // orders event ids with their stored records (parallel agents)
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int64_t, nlohmann::json>> events;  // every event, token deltas included
  int64_t next_seq = 0;
  int64_t reserved_seq = 0;  // ids up to this are reserved in the store (RunStore::reserve_event_seq); record_mu
  bool ended = false;
  std::string status = "queued";
  std::set<std::pair<Engine*, RequestId>> in_flight;    // engine requests to cancel

  void cancel_requests() {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [engine, rid] : in_flight) engine->cancel(rid);
  }
};

// The siblings of a parallel or for_each stage meet here after each has
// recorded its start, so their engine requests go in together (one batch)
// and no sibling can finish before another has started. Every sibling
// arrives exactly once: at the gate, or on its way out (error, resume).
class StartGate {
 public:
  explicit StartGate(size_t n) : left_(n) {}
  void arrive(bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (left_ > 0 && --left_ == 0) cv_.notify_all();
    if (wait) cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
};

// Thrown through the executor when the run must stop.
struct RunCancelled {};
struct RunStopping {};  // server shutting down: leave the run resumable
struct RunFailed {
  std::string reason;
};

// Executes one run's stages (run_executor.cpp).
class RunExecutor {
 public:
  RunExecutor(PipelineRunner& runner, std::shared_ptr<PipelineRunner::Run> run);
  ~RunExecutor();  // clears the run's KV retention hints
  void execute();  // throws RunCancelled, RunStopping or RunFailed

 private:
  struct StepResult;
  void run_stage(const Stage& s, int round);
  // A for_each stage's elements: the source array, checked (throws RunFailed).
  nlohmann::ordered_json for_each_items(const Stage& s, int round);
  // Workflow-aware KV retention: tells each engine which prompt prefixes the
  // next stages will read (as far as they are known now) and in how many
  // stages; called as each stage starts.
  void update_hints(size_t pos);
  // One step: agent `a` as step `step` (its name, or "name[i]" for element
  // `item` of a for_each stage).
  // gate: the stage's StartGate when its steps run together (nullptr otherwise).
  AgentOutput run_agent(const AgentSpec& a, int round, int ord, const std::string& step,
                        const nlohmann::ordered_json* item, StartGate* gate = nullptr);
  // The output as later templates see it (parsed when the agent has an output_schema; throws std::exception).
  static AgentOutput make_output(const AgentSpec& a, const std::string& text);
  std::vector<int32_t> build_prompt(const AgentSpec& a, int round, const AgentModel& m, int& max_tokens,
                                    const nlohmann::ordered_json* item);
  std::string summarize(const AgentSpec& a, const AgentModel& m, const std::string& text, int max_tokens);
  // One attempt of a step: its prompt, its request, and the output checked against the output_schema.
  StepResult attempt(const AgentSpec& a, const AgentModel& m, int round, const std::string& step,
                     const nlohmann::ordered_json* item);
  // stream_as: the step name token events carry ("": no token events).
  StepResult generate(const AgentSpec& a, const AgentModel& m, RequestParams p, const std::string& stream_as, int round);
  // Stores the step (if any), the log lines and the event in one transaction,
  // then publishes the event to SSE clients and the lines to stderr.
  void record(const StepRecord* step, const nlohmann::json& event, const std::vector<std::string>& lines);
  void emit_token(nlohmann::json ev);  // in memory only
  void log(const std::string& line) { record(nullptr, nullptr, {line}); }
  void check_stop() const;

  PipelineRunner& runner_;
  std::shared_ptr<PipelineRunner::Run> run_;
  std::map<std::pair<std::string, int>, StepRecord> done_;  // finished steps from the store (resume)
  std::map<std::string, AgentOutput> outputs_;              // latest output per agent
  // Speculative decoding: every finished step's output as tokens of the model
  // that wrote it; later steps on that model draft from them (the plan an
  // executor copies, the executors' results a summarizer quotes).
  std::map<const Model*, std::vector<std::shared_ptr<const DraftContext>>> draft_contexts_;
  std::string previous_;
  int next_ord_ = 0;
  // The stages in the order they would run (rounds unrolled to max_rounds),
  // for looking ahead; pos_ is the current one.
  std::vector<PlanItem> plan_;
  size_t pos_ = 0;
  uint64_t hint_owner_;
  std::set<Engine*> hinted_;  // engines holding this run's hints (cleared when it ends)
  mutable std::mutex mu_;  // parallel agents write outputs_ and the store from several threads
};

}  // namespace spool::agents
