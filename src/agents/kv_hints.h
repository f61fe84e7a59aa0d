// Workflow-aware KV retention, the runner's side: which prompt prefixes a
// pipeline run will submit next and how soon, as Engine::set_hints takes them
// (docs/AGENTS.md "Workflow-aware retention"). A running run hints its next
// stages as each stage starts; the runner hints the first stage of runs still
// queued, farther than any running run's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agents/agent_output.h"
#include "agents/pipeline_runner.h"

namespace spool::agents {

// A stage in run order: the spec's stages with rounds unrolled to max_rounds.
struct PlanItem {
  const Stage* stage;
  int round;
};
std::vector<PlanItem> unroll_stages(const PipelineSpec& spec);

// An agent's prompt tokens for `user` text: through the model's chat template
// (system + user messages) or plain text with the system prompt first.
std::vector<int32_t> agent_prompt_tokens(const AgentSpec& a, const AgentModel& m, const std::string& user);

// What a run knows now of the prompts ahead of it.
struct RunView {
  const PipelineSpec* spec;
  std::string input;
  const std::vector<PlanItem>* plan;
  std::map<std::string, AgentOutput> outputs;  // latest output per agent so far
};

// The start of the prompt that plan item `item`'s agent `a` will get, known
// before item `pos` runs: its template rendered up to the first output that is
// not final yet ({previous}, {item}, or an agent that has not run or runs in [pos, item)).
std::string known_prompt_prefix(const RunView& run, const AgentSpec& a, size_t pos, size_t item);

// How far ahead a run hints (stages); farther stages would only compete with nearer uses.
constexpr size_t kHintLookahead = 4;

// Hints for items [first, first + kHintLookahead) of a run, next use = distance + (k - first), grouped by engine.
void add_run_hints(const RunView& run, const ModelResolver& resolve, size_t pos, size_t first, int distance,
                   std::map<Engine*, std::vector<PrefixHint>>& out);

}  // namespace spool::agents
